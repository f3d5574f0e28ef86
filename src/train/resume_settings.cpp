#include "train/resume_settings.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>

#include "core/crc32c.hpp"
#include "core/format.hpp"
#include "formats/json.hpp"

namespace meshtrain::train {
namespace {

/// The shortest text that reads back as `v` (what config.ini writes).
std::string real_text(double v) {
  for (int digits = 6; digits < 17; ++digits) {
    std::string t = strprintf("%.*g", digits, v);
    if (std::strtod(t.c_str(), nullptr) == v) return t;
  }
  return strprintf("%.17g", v);
}

/// What the training tokens are: their count and a CRC-32C of tokens sampled across the
/// whole file (every token of a small one). Reading all of a large train.bin at every
/// start would cost seconds per GB; 64 blocks of 1024 tokens catch another corpus, another
/// tokenizer and a reordering of the documents alike.
std::string dataset_identity(const data::Dataset& d) {
  if (!d.train) return "none";
  if (d.meta.tokenizer == "random") return "random tokens";
  const data::TokenSource& t = *d.train;
  const std::uint64_t n = t.size();
  constexpr int kBlock = 1024, kBlocks = 64;
  std::vector<std::int32_t> buf;
  std::uint32_t crc = 0;
  const auto add = [&](std::uint64_t at, int len) {
    buf.resize(static_cast<std::size_t>(len));
    t.read(at, len, buf.data());
    crc = crc32c::extend(crc, buf.data(), buf.size() * sizeof(std::int32_t));
  };
  if (n <= static_cast<std::uint64_t>(kBlock) * kBlocks) {
    for (std::uint64_t at = 0; at < n; at += kBlock) add(at, static_cast<int>(std::min<std::uint64_t>(kBlock, n - at)));
  } else {
    for (int b = 0; b < kBlocks; ++b) add((n - kBlock) / (kBlocks - 1) * static_cast<std::uint64_t>(b), kBlock);
  }
  std::string rows;
  if (d.meta.row_tokens > 0) rows = strprintf(", %s rows of %u tokens", d.meta.data_format.c_str(), d.meta.row_tokens);
  return strprintf("train.bin of %llu tokens%s (sampled CRC-32C %08x)", static_cast<unsigned long long>(n), rows.c_str(),
                   crc);
}

}  // namespace

RunSettings run_settings(const plan::RunSetup& s, const data::Dataset& data) {
  const plan::TrainSpec& t = s.spec.train;
  RunSettings out = {
      // The batch: a window's length and the windows per step (however the mesh, micro_batch
      // and grad_accum split them) fix what a step reads and averages.
      {"train.seq_len", std::to_string(s.batch.seq_len)},
      {"train.global_batch", std::to_string(s.batch.global_batch)},
      // The data order and the tokens it is drawn from.
      {"train.seed", std::to_string(t.seed)},
      {"data.dir", dataset_identity(data)},
      // The optimizer and its schedule (train.steps, the end of a cosine schedule, may move).
      {"train.lr", real_text(t.lr)},
      {"train.lr_schedule", choice_name(t.lr_schedule)},
      {"train.warmup_steps", std::to_string(t.warmup_steps)},
      {"train.weight_decay", real_text(t.weight_decay)},
      {"train.beta1", real_text(t.beta1)},
      {"train.beta2", real_text(t.beta2)},
      {"train.adam_eps", real_text(t.adam_eps)},
      {"train.decay_embeddings", t.decay_embeddings ? "true" : "false"},
      {"train.grad_clip", real_text(t.grad_clip)},
      // What the step minimises (a checkpoint written before the key resumes as sft).
      {"train.objective", choice_name(t.objective)},
      // Numerics of the step.
      {"train.precision", choice_name(t.precision)},
      {"parallel.reduce_dtype", s.spec.parallel.reduce_dtype == DType::BF16 ? "bf16" : "fp32"},
      // A LoRA run on a randomly initialised base re-creates its frozen base from the seed
      // and this standard deviation at every resume.
      {"model.init_std", real_text(s.spec.dims.init_std)},
      {"train.steps", std::to_string(t.steps)},
  };
  // The cosine schedule decays to min_lr; a constant one never uses it.
  if (t.lr_schedule == LrScheduleKind::Cosine) out.insert(out.begin() + 5, {"train.min_lr", real_text(t.min_lr)});
  // A token stream's document mask decides what attends to what and where positions
  // restart (rows of a prepared dataset carry their own document starts).
  if (data.train && data.meta.row_tokens == 0)
    out.push_back({"data.document_mask", s.spec.data.document_mask ? "true" : "false"});
  // The system message the dataset's conversations without one were rendered with: what the
  // checkpoints record for `generate --chat` and exports. Another one changes train.bin's
  // tokens (data.dir refuses that) unless every record brings its own system message; then the
  // trajectory is the same and only the record changes, so a resume may change it (logged).
  // JSON-quoted: the record is one `key = value` line per key.
  if (data.meta.chat_system)
    out.push_back({"data.chat_system", formats::json_text(formats::Json(*data.meta.chat_system))});
  // DPO's beta scales its loss; sft never reads it.
  if (t.dpo()) out.push_back({"train.dpo_beta", real_text(t.dpo_beta)});
  if (t.simpo()) {
    out.push_back({"train.simpo_beta", real_text(t.simpo_beta)});
    out.push_back({"train.simpo_gamma", real_text(t.simpo_gamma)});
  }
  return out;
}

std::string settings_record(const RunSettings& s) {
  std::string out;
  for (const auto& [k, v] : s) out += k + " = " + v + "\n";
  return out;
}

RunSettings parse_settings_record(const std::string& text) {
  RunSettings out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    const std::size_t eq = line.find(" = ");
    if (eq != std::string::npos) out.emplace_back(line.substr(0, eq), line.substr(eq + 3));
    start = end + 1;
  }
  return out;
}

bool may_change_at_resume(const std::string& key) { return key == "train.steps" || key == "data.chat_system"; }

namespace {

std::vector<std::string> differences(const RunSettings& recorded, const RunSettings& now, bool changeable) {
  std::map<std::string, std::string> old(recorded.begin(), recorded.end());
  std::vector<std::string> out;
  for (const auto& [key, value] : now) {
    const auto it = old.find(key);
    if (it == old.end() || it->second == value || may_change_at_resume(key) != changeable) continue;
    out.push_back(strprintf("%s: %s in the checkpoint, %s in this run", key.c_str(), it->second.c_str(), value.c_str()));
  }
  return out;
}

}  // namespace

std::vector<std::string> resume_conflicts(const RunSettings& recorded, const RunSettings& now) {
  return differences(recorded, now, false);
}

std::vector<std::string> resume_changes(const RunSettings& recorded, const RunSettings& now) {
  return differences(recorded, now, true);
}

}  // namespace meshtrain::train
