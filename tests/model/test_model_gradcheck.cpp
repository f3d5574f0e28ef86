// Whole-model gradient check in double precision: the analytic gradient of every parameter
// (explicit backward of embedding, blocks, final norm, LM head and cross-entropy) against
// central finite differences of the loss, for both families, with and without activation
// checkpointing, with a padded vocabulary; the fused kernel paths (gpu.fused_loss,
// gpu.fused_norms, gpu.epilogues: the default) and the unfused ones they replace; the norm
// kernels in either form (gpu.norm_form: the GPU's warp per row runs here too).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "model/init.hpp"
#include "model/transformer.hpp"
#include "launched_kernels.hpp"
#include "model_step.hpp"
#include "test_support.hpp"

using namespace meshtrain;
using namespace meshtrain::model;

namespace {

struct Fixture {
  ModelDims dims;
  std::vector<ParamSpec> specs;
  std::vector<UnitLayout> layouts;
  std::vector<std::vector<double>> params;  // host copy per unit
  BatchShape shape{2, 6};
  std::vector<std::int32_t> tokens, targets;

  /// lora_targets: the adapted projections (empty: all of them).
  explicit Fixture(Family f, int lora_rank = 0, std::vector<std::string> lora_targets = {}) {
    model::ModelSettings c;
    c.family = f;
    c.vocab_size = 21;
    c.vocab_pad_multiple = 8;  // 24 rows, ids 21..23 are padding (masked logits)
    c.d_model = 16;
    c.n_layers = 2;
    c.n_heads = 2;
    c.n_kv_heads = f == Family::Llama ? 1 : -1;
    c.ffn_dim = 32;
    c.max_seq_len = 8;
    c.tie_embeddings = f == Family::Gpt2;
    c.init_std = 0.3;  // larger weights than training uses: every path carries signal
    c.lora_rank = lora_rank;
    c.lora_alpha = 3.0;
    c.lora_targets = lora_targets.empty() ? lora_target_names(f) : lora_targets;
    dims = resolve_dims(c);
    specs = build_param_specs(dims, 1);
    layouts = build_layouts(specs, num_units(dims), 1, 1);
    std::mt19937_64 gen(7);
    params = test::perturbed_unit_params(specs, layouts, 99, gen);
    std::uniform_int_distribution<int> tok(0, 20);
    tokens.resize(shape.N());
    targets.resize(shape.N());
    for (auto& t : tokens) t = tok(gen);
    for (auto& t : targets) t = tok(gen);
    targets[3] = -1;  // an ignored position
  }
};

/// Loss (sum over tokens) and, when grads != nullptr, the gradients of every unit.
double run(const Fixture& f, const std::vector<std::vector<double>>& params, bool checkpoint,
           std::vector<std::vector<double>>* grads, KernelPaths paths = {}) {
  const TpDims tp = tp_dims(f.dims, 1, 0);
  Transformer<double> model(f.dims, tp, f.specs, f.layouts, paths);
  std::vector<Buffer<double>> p, g;
  for (std::size_t u = 0; u < params.size(); ++u) {
    p.push_back(test::to_device(params[u]));
    // Gradients cover the unit's trainable segment (all of it without LoRA).
    g.push_back(test::to_device(std::vector<double>(f.layouts[u].trainable_padded(), 0.0)));
  }
  auto tok = test::to_device(f.tokens);
  auto tgt = test::to_device(f.targets);
  const double loss = test::unwound_micro_step(model, p, grads ? &g : nullptr, f.shape, tok.data(), tgt.data(), 1.0f,
                                               checkpoint);
  if (!grads) return loss;
  grads->clear();
  for (auto& b : g) grads->push_back(test::to_host(b));
  return loss;
}

void gradcheck(Family family, bool checkpoint, int lora_rank = 0, KernelPaths paths = {}) {
  Fixture f(family, lora_rank);
  std::vector<std::vector<double>> grads;
  run(f, f.params, checkpoint, &grads, paths);
  std::mt19937_64 gen(3);
  int checked = 0;
  double worst = 0;
  for (std::size_t u = 0; u < f.layouts.size(); ++u) {
    for (const auto& slot : f.layouts[u].slots) {
      if (lora_rank > 0 && f.specs[slot.spec].frozen) continue;  // LoRA: only adapters get gradients
      std::uniform_int_distribution<std::int64_t> pick(0, slot.numel - 1);
      for (int k = 0; k < 4; ++k) {
        const std::int64_t i = slot.offset + pick(gen);
        auto p = f.params;
        const double h = 1e-4 * std::max(1.0, std::fabs(p[u][i]));
        const auto loss_at = [&](double delta) {
          p[u][i] = f.params[u][i] + delta;
          return run(f, p, false, nullptr, paths);
        };
        // Fourth-order central difference (Richardson): truncation O(h^4).
        const double fd = (8 * (loss_at(h) - loss_at(-h)) - (loss_at(2 * h) - loss_at(-2 * h))) / (12 * h);
        const double an = grads[u][i - f.layouts[u].trainable_begin()];
        // Fourth-order central differences in double with h = 1e-4: truncation O(h^4) ~ 1e-16
        // relative and rounding |loss| * 2e-16 / h ~ 1e-10 absolute. Gradients here are O(0.1..10); the
        // 1e-3 floor makes exactly-zero gradients (e.g. the key bias, which softmax cancels)
        // compare at that rounding level instead of dividing noise by zero.
        const double err = std::fabs(fd - an) / std::max({std::fabs(fd), std::fabs(an), 1e-3});
        worst = std::max(worst, err);
        EXPECT_LT(err, 1e-6) << f.specs[slot.spec].name << " element " << i - slot.offset << ": analytic " << an
                             << " vs finite difference " << fd;
        ++checked;
      }
    }
  }
  std::printf("%s%s%s: %d elements checked, worst relative error %.2e\n", family == Family::Gpt2 ? "gpt2" : "llama",
              checkpoint ? " (activation checkpointing)" : "", lora_rank ? " (LoRA adapters)" : "", checked, worst);
}

/// `p` with the norm kernels in the Warps form (the GPU's; the host's default is Rows).
KernelPaths warps(KernelPaths p) {
  p.norm_form = kernels::NormForm::Warps;
  return p;
}

}  // namespace

TEST(ModelGradcheck, Gpt2) { gradcheck(Family::Gpt2, false); }
TEST(ModelGradcheck, Llama) { gradcheck(Family::Llama, false); }
TEST(ModelGradcheck, Gpt2ActivationCheckpointing) { gradcheck(Family::Gpt2, true); }
TEST(ModelGradcheck, LlamaActivationCheckpointing) { gradcheck(Family::Llama, true); }

// LoRA on every projection of both families: the adapters' gradients (A and B, with B
// perturbed away from its zero init so both get signal) against finite differences.
TEST(ModelGradcheck, Gpt2LoraAdapters) { gradcheck(Family::Gpt2, false, 2); }
TEST(ModelGradcheck, LlamaLoraAdapters) { gradcheck(Family::Llama, false, 2); }
TEST(ModelGradcheck, LlamaLoraAdaptersActivationCheckpointing) { gradcheck(Family::Llama, true, 2); }

// The unfused kernels (gpu.fused_loss = gpu.fused_norms = gpu.epilogues = false) stay a
// checked path.
TEST(ModelGradcheck, Gpt2UnfusedPaths) { gradcheck(Family::Gpt2, false, 0, KernelPaths{false, false, false}); }
TEST(ModelGradcheck, LlamaUnfusedPaths) { gradcheck(Family::Llama, false, 0, KernelPaths{false, false, false}); }
// gpu.epilogues with the unfused norms: the attention projection's bias and its gradient
// then go through its GEMMs too.
TEST(ModelGradcheck, Gpt2EpiloguesUnfusedNorms) { gradcheck(Family::Gpt2, true, 0, KernelPaths{true, false, true}); }

// gpu.norm_form=warps: every norm kernel, fused (with activation checkpointing for Llama)
// and unfused, in the GPU's form.
TEST(ModelGradcheck, Gpt2WarpsNormForm) { gradcheck(Family::Gpt2, false, 0, warps(KernelPaths{})); }
TEST(ModelGradcheck, LlamaWarpsNormFormActivationCheckpointing) {
  gradcheck(Family::Llama, true, 0, warps(KernelPaths{}));
}
TEST(ModelGradcheck, Gpt2UnfusedWarpsNormForm) {
  gradcheck(Family::Gpt2, false, 0, warps(KernelPaths{false, false, false}));
}

namespace {

/// Launches of the Warps form's norm kernels in one step of `family` with `paths`: in
/// 16-byte packs (`_warps16`) and element by element (`_warps`).
struct WarpsLaunches {
  int packed = 0, elementwise = 0;
};
WarpsLaunches warps_launches(Family family, const KernelPaths& paths) {
  Fixture f(family);
  std::vector<std::vector<double>> grads;
  test::LaunchedKernels rec;
  run(f, f.params, true, &grads, paths);
  return {rec.count_ending("_warps16"), rec.count_ending("_warps")};
}

}  // namespace

// Every norm call of a step passes tensors whose rows start on 16 bytes (activations from the
// pool, norm parameters at kFlatAlign offsets), so the Warps form moves them in packs: none
// falls back to element-by-element rows (which would be correct, and slower on a GPU).
// gpu.row_packs=false reaches every norm call: the same step element by element.
TEST(ModelGradcheck, WarpsNormFormPacksEveryModelRowUnlessRowPacksAreOff) {
  for (Family family : {Family::Gpt2, Family::Llama}) {
    const char* name = family == Family::Gpt2 ? "gpt2" : "llama";
    for (const KernelPaths paths : {warps(KernelPaths{}), warps(KernelPaths{false, false, false})}) {
      const WarpsLaunches on = warps_launches(family, paths);
      EXPECT_GT(on.packed, 0) << name;
      EXPECT_EQ(on.elementwise, 0) << name << ": a norm call fell back to element-by-element rows";
      KernelPaths off = paths;
      off.row_packs = false;
      const WarpsLaunches elementwise = warps_launches(family, off);
      EXPECT_EQ(elementwise.packed, 0) << name << ": gpu.row_packs=false moved rows in packs";
      EXPECT_EQ(elementwise.elementwise, on.packed) << name;
    }
  }
}

// Each fused path alone gives the unfused loss and gradients to double rounding: the loss to
// 1e-12 relative, each gradient element to 1e-12 of its unit's largest gradient. The fused
// forms sum in another order, and a weight gradient that is a sum of larger terms cancelling
// carries that rounding at the terms' scale, not at its own: a per-element relative bound
// then depends on BLAS's summation order, i.e. on the CPU (Llama unit 1, element 634, 7.7e-3
// of a unit whose largest gradient is 18: 1.6e-12 relative to itself with OpenBLAS' Zen
// kernels, 6.6e-16 of the unit's scale; every path's worst is below 2e-15 of it).
TEST(ModelGradcheck, FusedPathsMatchUnfused) {
  for (Family family : {Family::Gpt2, Family::Llama}) {
    Fixture f(family);
    std::vector<std::vector<double>> ref, got;
    const double loss_ref = run(f, f.params, false, &ref, KernelPaths{false, false, false});
    for (const KernelPaths paths : {KernelPaths{true, false, false}, KernelPaths{false, true, false},
                                    KernelPaths{false, false, true}, KernelPaths{true, true, true},
                                    warps(KernelPaths{false, false, false}), warps(KernelPaths{true, true, true})}) {
      const double loss = run(f, f.params, false, &got, paths);
      EXPECT_LT(std::fabs(loss - loss_ref), 1e-12 * std::fabs(loss_ref));
      for (std::size_t u = 0; u < ref.size(); ++u) {
        double scale = 0;  // the unit's largest reference gradient
        for (const double g : ref[u]) scale = std::max(scale, std::fabs(g));
        ASSERT_GT(scale, 0.0) << "unit " << u << " has no gradient";
        for (std::size_t i = 0; i < ref[u].size(); ++i)
          ASSERT_LE(std::fabs(got[u][i] - ref[u][i]), 1e-12 * scale)
              << "unit " << u << " element " << i << " (reference " << ref[u][i] << ", unit scale " << scale
              << "), fused_loss " << paths.fused_loss << ", fused_norms "
              << paths.fused_norms << ", epilogues " << paths.epilogues << ", norm form "
              << static_cast<int>(paths.norm_form);
      }
      // The loss-only form (evaluation) agrees too.
      EXPECT_LT(std::fabs(run(f, f.params, false, nullptr, paths) - loss_ref), 1e-12 * std::fabs(loss_ref));
    }
  }
}

// gpu.epilogues on and off: the same loss and gradients bit for bit on host builds, where the
// epilogue is the GEMM then one pass that rounds and sums in the unfused kernels' order
// (linalg/gemm_epilogue.hpp); with either norm path, with activation checkpointing (the
// recompute takes the same path) and with LoRA adapters on every projection (they keep the
// separate kernels) or on c_attn and mlp.c_proj only (the others take the epilogues, without
// bias gradients: the base is frozen).
TEST(ModelGradcheck, EpiloguesBitwiseUnfusedOnHost) {
  // (fp64 never takes cuBLASLt; but nvcc may contract the GELU's multiply-adds differently in
  // the fused and the separate kernels, so device builds get FusedPathsMatchUnfused's 1e-12.)
  if (!kDeviceIsHost) GTEST_SKIP() << "bit-for-bit only on host builds; FusedPathsMatchUnfused covers device builds";
  const std::vector<std::string> some = {"c_attn", "mlp.c_proj"};
  for (int lora : {0, 1, 2})
    for (bool fused_norms : {false, true})
      for (bool checkpoint : {false, true}) {
        const int lora_rank = lora ? 2 : 0;
        Fixture f(Family::Gpt2, lora_rank, lora == 2 ? some : std::vector<std::string>{});
        std::vector<std::vector<double>> off, on;
        const double loss_off = run(f, f.params, checkpoint, &off, KernelPaths{true, fused_norms, false});
        const double loss_on = run(f, f.params, checkpoint, &on, KernelPaths{true, fused_norms, true});
        EXPECT_EQ(std::memcmp(&loss_on, &loss_off, sizeof(double)), 0) << "loss " << loss_on << " vs " << loss_off;
        ASSERT_EQ(on.size(), off.size());
        for (std::size_t u = 0; u < on.size(); ++u)
          // (a unit without gradients has empty vectors, whose data() memcmp must not see)
          EXPECT_TRUE(on[u].size() == off[u].size() &&
                      (on[u].empty() || std::memcmp(on[u].data(), off[u].data(), on[u].size() * sizeof(double)) == 0))
              << "unit " << u << " gradients differ: lora " << lora << ", fused_norms " << fused_norms
              << ", checkpoint " << checkpoint;
      }
}

TEST(ModelGradcheck, PaddedVocabularyRowsGetNoGradient) {
  Fixture f(Family::Llama);
  std::vector<std::vector<double>> grads;
  run(f, f.params, false, &grads);
  const ParamSlot* head = f.layouts[0].find(f.specs, "lm_head.weight");
  ASSERT_NE(head, nullptr);
  for (std::int64_t i = 21 * f.dims.d_model; i < 24 * f.dims.d_model; ++i) EXPECT_EQ(grads[0][head->offset + i], 0.0);
}
