#include "import.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "format.hpp"
#include "core/error.hpp"
#include "core/file_io.hpp"
#include "formats/json.hpp"

namespace meshtrain::checkpoint {
namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// Tensors that Hugging Face files carry but that are not parameters.
bool is_hf_buffer(const std::string& name) {
  return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") || ends_with(name, ".rotary_emb.inv_freq");
}

/// The files of a sharded directory, from its index (validated against the files later).
std::vector<std::string> index_files(const std::string& index_path, std::map<std::string, std::string>& weight_map) {
  const std::string text = file_io::read_text_file(index_path, "");
  formats::Json root;
  try {
    root = formats::parse_json(text);
  } catch (const std::runtime_error& e) {
    throw UserError(strprintf("%s is not valid JSON: %s", index_path.c_str(), e.what()));
  }
  const auto wm = root.is_object() ? root.find("weight_map") : root.end();
  MESHTRAIN_REQUIRE(wm != root.end() && wm->is_object(),
                    "%s has no \"weight_map\" object (tensor name -> shard file)", index_path.c_str());
  std::vector<std::string> files;
  for (const auto& [name, entry] : wm->items()) {
    const std::string file = entry.is_string() ? entry.get<std::string>() : "";
    MESHTRAIN_REQUIRE(!file.empty() && file.find('/') == std::string::npos,
                      "%s: the weight_map entry of '%s' is not a file name", index_path.c_str(), name.c_str());
    weight_map[name] = file;
    if (std::find(files.begin(), files.end(), file) == files.end()) files.push_back(file);
  }
  return files;
}

}  // namespace

SafetensorsWeights::SafetensorsWeights(const std::string& path, const std::vector<model::ParamSpec>& specs,
                                       const model::ModelDims& dims)
    : specs_(specs), sources_(specs.size()) {
  std::error_code ec;
  MESHTRAIN_REQUIRE(fs::exists(path, ec), "initial weights %s: no such file or directory", path.c_str());
  std::map<std::string, std::string> weight_map;
  std::string index_path;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(path + "/model.safetensors", ec)) {
      files_.push_back(std::make_unique<formats::SafetensorsFile>(path + "/model.safetensors"));
    } else if (fs::exists(path + "/model.safetensors.index.json", ec)) {
      index_path = path + "/model.safetensors.index.json";
      for (const std::string& f : index_files(index_path, weight_map)) {
        MESHTRAIN_REQUIRE(fs::exists(path + "/" + f, ec), "%s names the shard %s which does not exist in %s",
                          index_path.c_str(), f.c_str(), path.c_str());
        files_.push_back(std::make_unique<formats::SafetensorsFile>(path + "/" + f));
      }
    } else {
      throw UserError(strprintf("initial weights %s: the directory holds neither model.safetensors nor "
                                "model.safetensors.index.json",
                                path.c_str()));
    }
  } else {
    files_.push_back(std::make_unique<formats::SafetensorsFile>(path));
  }

  // Every tensor of every file by name (a name in two shards is ambiguous).
  std::map<std::string, Source> all;
  for (const auto& f : files_)
    for (const formats::SafetensorsTensor& t : f->tensors()) {
      MESHTRAIN_REQUIRE(!all.count(t.name), "initial weights %s: tensor '%s' is in both %s and %s", path.c_str(),
                        t.name.c_str(), all[t.name].file->path().c_str(), f->path().c_str());
      all[t.name] = Source{f.get(), &t, 0};
    }
  for (const auto& [name, file] : weight_map) {
    const auto it = all.find(name);
    MESHTRAIN_REQUIRE(it != all.end() && fs::path(it->second.file->path()).filename() == file,
                      "%s maps '%s' to %s, but that file does not hold it", index_path.c_str(), name.c_str(), file.c_str());
  }

  gpt2_ = dims.family == model::Family::Gpt2;
  const std::string where = files_.size() == 1 ? files_[0]->path() : path;
  std::map<std::string, bool> used;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const model::ParamSpec& p = specs[i];
    if (p.is_embedding && p.split_dim == 0) embedding_spec_ = static_cast<int>(i);
    std::vector<std::string> names = {p.name};
    const std::string gpt2_prefix = "transformer.";
    if (dims.family == model::Family::Gpt2 && p.name.compare(0, gpt2_prefix.size(), gpt2_prefix) == 0)
      names.push_back(p.name.substr(gpt2_prefix.size()));  // GPT2Model files (the hub's gpt2) lack the prefix
    const Source* found = nullptr;
    for (const std::string& n : names)
      if (!found && all.count(n)) {
        found = &all[n];
        used[n] = true;
      }
    if (!found && p.is_lora) continue;  // a base model for LoRA fine-tuning: adapters keep their init
    MESHTRAIN_REQUIRE(found, "initial weights %s lack the parameter %s%s", where.c_str(), p.name.c_str(),
                      p.role == "lm_head.weight" ? " (a model with tied embeddings? set model.tie_embeddings=true)" : "");
    const formats::SafetensorsTensor& t = *found->tensor;
    const bool short_vocab = format::has_vocab_rows(p, dims) && t.shape.size() == 2 &&
                             t.shape[0] == dims.valid_vocab && t.shape[1] == p.shape[1];
    MESHTRAIN_REQUIRE(t.shape == p.shape || short_vocab,
                      "initial weights %s: tensor %s has shape %s, the model expects %s%s", where.c_str(),
                      t.name.c_str(), shape_string(t.shape).c_str(), shape_string(p.shape).c_str(),
                      format::has_vocab_rows(p, dims) ? strprintf(" (or %lld rows, model.vocab_size)",
                                                                  static_cast<long long>(dims.valid_vocab)).c_str()
                                                      : "");
    MESHTRAIN_REQUIRE(t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16" || t.dtype == "F64",
                      "initial weights %s: tensor %s has dtype %s; parameters must be F32, F16, BF16 or F64",
                      where.c_str(), t.name.c_str(), t.dtype.c_str());
    sources_[i] = *found;
    sources_[i].rows = t.shape.empty() ? 1 : t.shape[0];
    bytes_ += t.end - t.begin;
  }
  std::vector<std::string> unexpected;
  for (const auto& [name, src] : all) {
    if (used.count(name) || is_hf_buffer(name)) continue;
    if (name == "lm_head.weight" && dims.tied && embedding_spec_ >= 0) {
      tied_head_ = src;
      continue;
    }
    unexpected.push_back(name);
  }
  if (!unexpected.empty()) {
    if (unexpected.size() > 5) {
      const std::size_t more = unexpected.size() - 5;
      unexpected.resize(5);
      unexpected.push_back(strprintf("and %zu more", more));
    }
    const bool lora = std::any_of(unexpected.begin(), unexpected.end(),
                                  [](const std::string& n) { return n.find(".lora_") != std::string::npos; });
    throw UserError(strprintf("initial weights %s hold tensors that are not parameters of this %s model: %s; %s",
                              where.c_str(), model::family_name(dims.family), join(unexpected, ", ").c_str(),
                              lora ? "they are LoRA adapters: give the model.lora_rank, model.lora_alpha and "
                                     "model.lora_targets of the run that trained them"
                                   : "check the model settings (n_layers, tie_embeddings, family)"));
  }
}

SafetensorsWeights::~SafetensorsWeights() = default;

void SafetensorsWeights::read(const Piece& piece, float* dst) const {
  const Source& s = sources_[piece.spec];
  const std::int64_t cols = specs_[piece.spec].cols();
  // Rows convert independently from the mapped file (dtypes were checked on opening).
  piece.for_each_row_run_parallel([&](std::int64_t at, std::int64_t row, std::int64_t col, std::int64_t n) {
    if (row < s.rows) s.file->read_f32(*s.tensor, row * cols + col, n, dst + at);
    else std::fill(dst + at, dst + at + n, 0.0f);  // vocab padding rows absent from the file
  });
}

std::string SafetensorsWeights::file_tensor_name(int spec) const {
  const Source& s = sources_[spec];
  if (!s.tensor) return specs_[spec].name;
  return files_.size() == 1 ? s.tensor->name : s.tensor->name + " (in " + s.file->path() + ")";
}

void SafetensorsWeights::check_once() const {
  if (!tied_head_.tensor) return;
  const Source& emb = sources_[embedding_spec_];
  const formats::SafetensorsTensor& h = *tied_head_.tensor;
  MESHTRAIN_REQUIRE(h.shape == emb.tensor->shape,
                    "initial weights: lm_head.weight has shape %s but the embedding %s has %s; with "
                    "model.tie_embeddings=true they must be one tensor",
                    shape_string(h.shape).c_str(), emb.tensor->name.c_str(), shape_string(emb.tensor->shape).c_str());
  const std::int64_t n = h.numel(), chunk = 1 << 20;
  std::vector<float> a(static_cast<std::size_t>(std::min(n, chunk))), b(a.size());
  for (std::int64_t i = 0; i < n; i += chunk) {
    const std::int64_t m = std::min(chunk, n - i);
    tied_head_.file->read_f32(h, i, m, a.data());
    emb.file->read_f32(*emb.tensor, i, m, b.data());
    for (std::int64_t k = 0; k < m; ++k)
      MESHTRAIN_REQUIRE(a[k] == b[k], "%s",
                        (gpt2_ ? strprintf("initial weights: lm_head.weight differs from %s (element %lld), but "
                                           "meshtrain's gpt2 always ties the LM head to the token embedding, so this "
                                           "separate head cannot be loaded; use a GPT-2 file whose head is the "
                                           "embedding, or model.family=llama for models with an untied head",
                                           emb.tensor->name.c_str(), static_cast<long long>(i + k))
                               : strprintf("initial weights: lm_head.weight differs from %s (element %lld), but "
                                           "model.tie_embeddings=true would drop it; set model.tie_embeddings=false "
                                           "to load it as a separate head",
                                           emb.tensor->name.c_str(), static_cast<long long>(i + k)))
                            .c_str());
  }
}

}  // namespace meshtrain::checkpoint
