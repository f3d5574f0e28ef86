// Packed rows are exact (issue 30, must-show 1): a batch of rows holding several examples
// each, with document-masked attention, restarted positions and the boundary-crossing
// targets dropped, gives the same loss as the same examples one per padded row (within fp32
// rounding) and the same gradients (normwise relative 1e-6) — GPT-2 and Llama, with and
// without activation checkpointing, with LoRA, at 1 rank and on a dp_shard 2 x tp 2 mesh
// (4 ranks), the padded run also through gradient accumulation. Without the document mask
// the packed loss differs, so the comparison can fail.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "app/run_spec_resolve.hpp"
#include "config/config.hpp"
#include "data/doc_file.hpp"
#include "data/sampler.hpp"
#include "parallel/micro_step.hpp"
#include "train/session.hpp"
#include "train/token_batch.hpp"
#include "test_support.hpp"

using namespace meshtrain;

namespace {

constexpr int kSeqLen = 24, kRow = kSeqLen + 1;
constexpr std::int32_t kPad = 0;

struct Example {
  std::vector<std::int32_t> ids;
  std::vector<std::uint8_t> mask;  // 1: a response token (its prediction counts)
};

// 12 examples, lengths 1..20, packed by hand into 4 rows of 25 (two with padding at the end).
const std::vector<std::vector<int>> kPacking = {{0, 1, 2}, {3, 4, 5, 6}, {7, 8}, {9, 10, 11}};
const std::vector<int> kLengths = {12, 9, 4, 7, 1, 10, 6, 20, 5, 3, 11, 8};

std::vector<Example> make_examples() {
  std::mt19937 rng(5);
  std::vector<Example> ex;
  for (int n : kLengths) {
    Example e;
    for (int t = 0; t < n; ++t) {
      e.ids.push_back(1 + static_cast<std::int32_t>(rng() % 255));
      e.mask.push_back(t >= n / 3 ? 1 : 0);  // the first third is the "prompt"
    }
    ex.push_back(e);
  }
  return ex;
}

/// A row (R tokens) made of the given examples, then padding; its inputs, targets and
/// document starts as the sampler makes them: a target is -1 when its token is masked out,
/// padding, or the first token of the next document (segment ids differ).
struct Row {
  std::vector<std::int32_t> in, tgt, doc;
};
Row make_row(const std::vector<Example>& ex, const std::vector<int>& items) {
  std::vector<std::int32_t> ids;
  std::vector<std::uint8_t> mask;
  std::vector<std::uint16_t> seg;
  std::uint16_t s = 0;
  for (int e : items) {
    ids.insert(ids.end(), ex[e].ids.begin(), ex[e].ids.end());
    mask.insert(mask.end(), ex[e].mask.begin(), ex[e].mask.end());
    seg.insert(seg.end(), ex[e].ids.size(), s++);
  }
  EXPECT_LE(ids.size(), static_cast<std::size_t>(kRow));
  ids.resize(kRow, kPad);
  mask.resize(kRow, 0);
  seg.resize(kRow, s);
  Row r;
  r.in.assign(ids.begin(), ids.begin() + kSeqLen);
  r.doc.resize(kSeqLen);
  data::doc_starts_from_segments(seg.data(), kSeqLen, r.doc.data());
  for (int t = 0; t < kSeqLen; ++t)
    r.tgt.push_back(mask[t + 1] && seg[t + 1] == seg[t] ? ids[t + 1] : -1);
  return r;
}

struct Result {
  double loss = 0, counted = 0;
  std::vector<float> grad;  // this rank's gradient shards, all units concatenated
};

/// One forward/backward over `rows` (the global batch) on this job's mesh: rank d takes the
/// rows data::rank_first_window gives it, `accum` micro-batches per step.
Result run(const char* family, bool checkpointing, int lora, const std::vector<Row>& rows, int accum,
           bool doc_mask) {
  const int n = test::world().size();
  Config c = test::tiny_model_config(family, kSeqLen);
  if (std::string(family) == "llama") c.model.n_kv_heads = 2;
  c.model.ffn_dim = 128;
  c.model.lora_rank = lora;
  c.parallel.strategy = StrategyChoice::FullShard;
  c.parallel.tp = n >= 4 ? 2 : 1;  // 4 ranks: dp_shard 2 x tp 2
  const int dp = n / c.parallel.tp;
  const int micro = static_cast<int>(rows.size()) / (dp * accum);
  EXPECT_EQ(micro * dp * accum, static_cast<int>(rows.size()));
  c.train.micro_batch = micro;
  c.train.grad_accum = accum;
  c.train.seq_len = kSeqLen;
  c.train.steps = 1;
  c.data.dir = "random";
  const plan::RunSetup setup = app::resolve_run(c, test::runtime().topology());
  train::Session<float> s(test::runtime(), setup);
  s.engine().init_parameters(11);
  if (lora > 0) {
    // LoRA's B starts at 0, which would leave A without gradient: give every parameter a
    // deterministic non-zero value so that all adapter gradients are exercised.
    for (int u = 0; u < s.engine().num_units(); ++u) {
      auto& st = s.engine().state(u);
      std::vector<float> h = test::to_host(st.master);
      for (std::size_t i = 0; i < h.size(); ++i)
        if (h[i] == 0.0f) h[i] = 0.01f * static_cast<float>(((st.begin + static_cast<std::int64_t>(i)) * 37) % 11 - 5);
      Kokkos::deep_copy(st.master.view(), UView<float, HostMem>(h.data(), h.size()));
    }
  }
  train::TokenBatch token_batch(micro, kSeqLen, doc_mask);
  double counted = 0;
  for (const Row& r : rows)
    for (std::int32_t t : r.tgt) counted += t >= 0;
  auto& eng = s.engine();
  eng.begin_step();
  double local = 0;
  for (int a = 0; a < accum; ++a) {
    eng.begin_micro(a);
    const std::uint64_t w0 = data::rank_first_window(0, a, micro, dp, s.mesh().dp_rank());
    for (int j = 0; j < micro; ++j) {
      const Row& r = rows[w0 + static_cast<std::uint64_t>(j)];
      std::copy(r.in.begin(), r.in.end(), token_batch.host_in.begin() + j * kSeqLen);
      std::copy(r.tgt.begin(), r.tgt.end(), token_batch.host_tgt.begin() + j * kSeqLen);
      if (doc_mask) std::copy(r.doc.begin(), r.doc.end(), token_batch.host_doc.begin() + j * kSeqLen);
    }
    token_batch.upload();
    local += parallel::forward_backward(eng, s.model(), s.context(), token_batch.in.data(), token_batch.tgt.data(),
                                        token_batch.shape(), static_cast<float>(1.0 / counted), checkpointing);
  }
  eng.finish_step();
  Result res;
  res.counted = counted;
  res.loss = s.global_sum(local) / counted;
  for (int u = 0; u < eng.num_units(); ++u) {
    const std::vector<float> g = test::to_host(eng.state(u).grad);
    res.grad.insert(res.grad.end(), g.begin(), g.end());
  }
  return res;
}

double world_sum(double x) {
  double y = 0;
  MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, test::world().get());
  return y;
}

/// ||a - b|| / ||b|| over the whole job's gradient shards.
double grad_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, ref = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    diff += d * d;
    ref += static_cast<double>(b[i]) * b[i];
  }
  ref = std::sqrt(world_sum(ref));
  EXPECT_GT(ref, 0);
  return std::sqrt(world_sum(diff)) / ref;
}

void check(const char* family, bool checkpointing, int lora) {
  const std::vector<Example> ex = make_examples();
  std::vector<Row> packed, padded;
  for (const auto& items : kPacking) packed.push_back(make_row(ex, items));
  for (int e = 0; e < static_cast<int>(ex.size()); ++e) padded.push_back(make_row(ex, {e}));
  const Result p = run(family, checkpointing, lora, packed, 1, true);
  const Result u = run(family, checkpointing, lora, padded, 2, false);  // one example a row, 2 micro-batches
  ASSERT_EQ(p.counted, u.counted) << "the same targets count in both layouts";
  ASSERT_GT(p.counted, 0);
  // Loss: fp32 rounding of sums over ~100 targets.
  EXPECT_NEAR(p.loss, u.loss, 2e-6 * std::abs(u.loss)) << family << ": packed vs one example per row";
  // Gradients: the same sums in another order (other GEMM shapes), normwise.
  const double rel = grad_rel_diff(p.grad, u.grad);
  EXPECT_LT(rel, 1e-6) << family << ": packed gradient vs summed per-example gradients";
  // Without the document mask (same targets), attention and positions cross examples. At
  // initialisation the loss is near ln(vocab) whatever the context, so its change is small
  // (~5e-5 relative), yet 25x the fp32 tolerance above; the gradients differ by far more.
  const Result leak = run(family, checkpointing, lora, packed, 1, false);
  const double leak_rel = grad_rel_diff(leak.grad, u.grad);
  EXPECT_GT(std::abs(leak.loss - u.loss), 1e-5 * std::abs(u.loss)) << family << ": the mask must matter";
  EXPECT_GT(leak_rel, 1e-3) << family << ": the mask must matter for the gradients";
  if (test::world().rank() == 0)
    std::printf("%s checkpointing=%d lora=%d ranks=%d: loss packed %.9g, one per row %.9g (rel %.2e), gradient "
                "rel diff %.2e; without the document mask: loss %.9g, gradient rel diff %.2e\n",
                family, checkpointing, lora, test::world().size(), p.loss, u.loss, std::abs(p.loss - u.loss) / u.loss,
                rel, leak.loss, leak_rel);
}

}  // namespace

TEST(PackedExact, Gpt2) { check("gpt2", false, 0); }
TEST(PackedExact, Gpt2Checkpointing) { check("gpt2", true, 0); }
TEST(PackedExact, Gpt2Lora) { check("gpt2", false, 4); }
TEST(PackedExact, Llama) { check("llama", false, 0); }
TEST(PackedExact, LlamaCheckpointing) { check("llama", true, 0); }
TEST(PackedExact, LlamaLoraCheckpointing) { check("llama", true, 4); }
