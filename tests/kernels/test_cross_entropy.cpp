// Fused softmax cross-entropy in three phases over (possibly vocab-parallel) logits:
// padded vocabulary columns, ignored targets, tp slicing with host-side reductions.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernel_test_utils.hpp"
#include "kernels/cross_entropy.hpp"

using namespace meshtrain;
using namespace meshtrain::test;
namespace k = meshtrain::kernels;

namespace {

// N rows of a 23-column vocabulary of which ids >= 20 are padding; row stride 25.
constexpr int kN = 7, kV = 23, kLd = 25;
constexpr std::int64_t kValid = 20;
std::vector<std::int32_t> targets() { return {3, -1, 19, 0, 12, 7, 13}; }  // row 1 ignored

struct Ref {
  double loss = 0;
  std::vector<double> grad;  // (kN, kLd), grad_scale 1; padding columns and ignored rows 0
};

Ref ce_ref(const std::vector<double>& logits, const std::vector<std::int32_t>& tgt) {
  Ref r;
  r.grad.assign(logits.size(), 0.0);
  for (int i = 0; i < kN; ++i) {
    if (tgt[i] < 0) continue;
    const double* l = &logits[static_cast<std::size_t>(i) * kLd];
    double mx = -1e300, sum = 0;
    for (int c = 0; c < kValid; ++c) mx = std::max(mx, l[c]);
    for (int c = 0; c < kValid; ++c) sum += std::exp(l[c] - mx);
    r.loss += std::log(sum) + mx - l[tgt[i]];
    for (int c = 0; c < kValid; ++c)
      r.grad[static_cast<std::size_t>(i) * kLd + c] = std::exp(l[c] - mx) / sum - (c == tgt[i] ? 1.0 : 0.0);
  }
  return r;
}

struct Result {
  double loss = 0;           // returned by cross_entropy_finish (of slice 0)
  double loss_only = 0;      // cross_entropy_loss_sum from the same statistics
  std::vector<double> grad;  // the logits buffer after finish
};

/// Runs the three phases with the vocabulary split at `bounds` (slice s = columns
/// [bounds[s], bounds[s+1])), reducing row_max (max) and stats (sum) over slices on the
/// host as the tp all-reduces would. S = statistics type.
template <class T, class S>
Result run_ce(const std::vector<double>& logits, const std::vector<std::int32_t>& tgt,
              const std::vector<int>& bounds, float grad_scale) {
  auto d = upload<T>(logits);
  auto dt = to_device(tgt);
  const int ns = static_cast<int>(bounds.size()) - 1;
  std::vector<S> row_max(kN, -std::numeric_limits<S>::infinity()), stats(2 * kN, S(0));
  Buffer<S> dmax(kN, MemCategory::Workspace), dstats(2 * kN, MemCategory::Workspace);
  for (int s = 0; s < ns; ++s) {
    k::cross_entropy_row_max(d.data() + bounds[s], kLd, kN, bounds[s + 1] - bounds[s], bounds[s], kValid,
                             dmax.data());
    const auto m = to_host(dmax);
    for (int i = 0; i < kN; ++i) row_max[i] = std::max(row_max[i], m[i]);
  }
  auto gmax = to_device(row_max);
  for (int s = 0; s < ns; ++s) {
    k::cross_entropy_row_sums(d.data() + bounds[s], kLd, kN, bounds[s + 1] - bounds[s], bounds[s], kValid,
                              dt.data(), gmax.data(), dstats.data());
    const auto st = to_host(dstats);
    for (int i = 0; i < 2 * kN; ++i) stats[i] += st[i];
  }
  auto gstats = to_device(stats);
  Result r;
  r.loss_only = k::cross_entropy_loss_sum(kN, dt.data(), gmax.data(), gstats.data());
  for (int s = 0; s < ns; ++s) {
    const double l = k::cross_entropy_finish(d.data() + bounds[s], kLd, kN, bounds[s + 1] - bounds[s], bounds[s],
                                             kValid, dt.data(), gmax.data(), gstats.data(), grad_scale);
    if (s == 0) r.loss = l;
    // Every slice returns the same loss: it is computed from the reduced statistics.
    EXPECT_EQ(l, r.loss) << "slice " << s;
  }
  r.grad = download(d);
  // Row-stride padding (columns kV..kLd) is not part of the logits: restore 0 for comparison.
  for (int i = 0; i < kN; ++i)
    for (int c = kV; c < kLd; ++c) r.grad[static_cast<std::size_t>(i) * kLd + c] = 0.0;
  return r;
}

std::vector<double> make_logits(std::uint64_t seed) {
  auto l = random_normal(static_cast<std::size_t>(kN) * kLd, seed, 3.0);
  // Large padding logits: they must not take part in max, sum or gradient.
  for (int i = 0; i < kN; ++i)
    for (int c = kValid; c < kLd; ++c) l[static_cast<std::size_t>(i) * kLd + c] = 50.0 + c;
  return l;
}

}  // namespace

TEST(KernelsCrossEntropy, DoubleAgainstReferenceAndFiniteDifferences) {
  auto logits = make_logits(1);
  const auto tgt = targets();
  const auto r = run_ce<double, double>(logits, tgt, {0, kV}, 1.0f);
  const auto ref = ce_ref(logits, tgt);
  // 1e-13: the same formula in double, summation order aside.
  EXPECT_LT(rel_err(r.loss, ref.loss), 1e-13);
  EXPECT_LT(rel_err(r.loss_only, ref.loss), 1e-13);
  expect_close("dlogits", r.grad, ref.grad, 1e-12, 1e-9);
  // Gradient of the whole 3-phase loss (the sum over rows returned by finish), sampled
  // over all columns including padding (gradient 0) and the ignored row (gradient 0).
  fd_check("dlogits", logits, r.grad,
           [&]() { return run_ce<double, double>(logits, tgt, {0, kV}, 1.0f).loss; }, 100, 2);
  // grad_scale multiplies the gradient, not the loss.
  const auto rs = run_ce<double, double>(logits, tgt, {0, kV}, 0.25f);
  EXPECT_EQ(rs.loss, r.loss);
  std::vector<double> scaled(r.grad.size());
  for (std::size_t i = 0; i < scaled.size(); ++i) scaled[i] = 0.25 * r.grad[i];
  // 1e-15: scale folded into 1/sum changes one rounding.
  expect_close("dlogits * grad_scale", rs.grad, scaled, 1e-15, 1e-12);
}

TEST(KernelsCrossEntropy, VocabSlicesMatchOneSlice) {
  const auto logits = make_logits(3);
  const auto tgt = targets();
  const auto one = run_ce<double, double>(logits, tgt, {0, kV}, 0.5f);
  // tp = 2: [0, 12) and [12, 23) (the second slice holds the padding).
  const auto two = run_ce<double, double>(logits, tgt, {0, 12, kV}, 0.5f);
  // tp = 3 with a slice of padding only ([20, 23): row_max -inf, sum 0 there).
  const auto three = run_ce<double, double>(logits, tgt, {0, 9, 20, kV}, 0.5f);
  // 1e-14: the same terms summed in another grouping.
  EXPECT_LT(rel_err(two.loss, one.loss), 1e-14);
  EXPECT_LT(rel_err(three.loss, one.loss), 1e-14);
  expect_close("dlogits tp=2", two.grad, one.grad, 1e-14, 1e-12);
  expect_close("dlogits tp=3", three.grad, one.grad, 1e-14, 1e-12);
  // fp32 statistics (the production path), also sliced.
  const auto f1 = run_ce<float, float>(logits, tgt, {0, kV}, 0.5f);
  const auto f2 = run_ce<float, float>(logits, tgt, {0, 12, kV}, 0.5f);
  EXPECT_LT(rel_err(f2.loss, f1.loss), 1e-6);  // fp32 sums in another grouping
  expect_close("fp32 dlogits tp=2", f2.grad, f1.grad, 1e-5, 1e-4);
}

TEST(KernelsCrossEntropy, Fp32StatisticsAgainstReference) {
  const auto logits = make_logits(4);
  const auto tgt = targets();
  const auto ref = ce_ref(logits, tgt);
  const auto f = run_ce<float, float>(logits, tgt, {0, kV}, 1.0f);
  const auto d = run_ce<double, float>(logits, tgt, {0, kV}, 1.0f);  // double logits, fp32 stats
  // fp32 logits rounded from the double ones (relative 6e-8 of |l| <= ~10) and fp32 sums:
  // loss to 1e-6 relative, probabilities to 1e-5 (floor 1e-4).
  EXPECT_LT(rel_err(f.loss, ref.loss), 1e-6);
  EXPECT_LT(rel_err(d.loss, ref.loss), 1e-6);
  expect_close("fp32 dlogits", f.grad, ref.grad, 1e-5, 1e-4);
  expect_close("double logits, fp32 stats", d.grad, ref.grad, 1e-5, 1e-4);
}

TEST(KernelsCrossEntropy, Bf16MatchesFloat) {
  const auto logits = bf16_exact(make_logits(5));
  const auto tgt = targets();
  const auto f = run_ce<float, float>(logits, tgt, {0, 12, kV}, 1.0f);
  const auto b = run_ce<bf16, float>(logits, tgt, {0, 12, kV}, 1.0f);
  // The loss is computed in fp32 from bf16-exact logits: only the summation may differ.
  EXPECT_LT(rel_err(b.loss, f.loss), 1e-5);
  expect_bf16_close("bf16 dlogits", b.grad, f.grad);
}

TEST(KernelsCrossEntropy, Deterministic) {
  const auto logits = make_logits(6);
  const auto tgt = targets();
  const auto a = run_ce<float, float>(logits, tgt, {0, kV}, 1.0f);
  const auto b = run_ce<float, float>(logits, tgt, {0, kV}, 1.0f);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_TRUE(bitwise_equal(a.grad, b.grad));
}

// The loss of instruction/chat data (doc/data.md): targets outside the loss mask are written
// as -1 by the samplers, and the trainer passes grad_scale = 1 / (number of targets >= 0 in
// the global batch) and divides the summed loss by that count. Here: a 0/1 mask over the
// rows, the batch split into two micro-batches, against a double-precision masked mean and
// its gradient by finite differences; the result does not depend on the split.
TEST(KernelsCrossEntropy, MaskedMeanOverCountedTargets) {
  auto logits = make_logits(7);
  const std::vector<std::int32_t> all = {3, 5, 19, 0, 12, 7, 13};
  const std::vector<int> mask = {0, 1, 1, 0, 1, 0, 1};  // prompt (0) and response (1) positions
  std::vector<std::int32_t> tgt(all);
  int counted = 0;
  for (int i = 0; i < kN; ++i) {
    if (!mask[i]) tgt[i] = -1;
    counted += mask[i];
  }
  // Reference: mean over the mask = 1 rows only, in double, and its gradient.
  double ref_loss = 0;
  std::vector<double> ref_grad(logits.size(), 0.0);
  for (int i = 0; i < kN; ++i) {
    if (!mask[i]) continue;
    const double* l = &logits[static_cast<std::size_t>(i) * kLd];
    double mx = -1e300, sum = 0;
    for (int c = 0; c < kValid; ++c) mx = std::max(mx, l[c]);
    for (int c = 0; c < kValid; ++c) sum += std::exp(l[c] - mx);
    ref_loss += (std::log(sum) + mx - l[all[i]]) / counted;
    for (int c = 0; c < kValid; ++c)
      ref_grad[static_cast<std::size_t>(i) * kLd + c] = (std::exp(l[c] - mx) / sum - (c == all[i] ? 1.0 : 0.0)) / counted;
  }
  const float scale = 1.0f / static_cast<float>(counted);
  const auto whole = run_ce<double, double>(logits, tgt, {0, kV}, scale);
  EXPECT_LT(rel_err(whole.loss / counted, ref_loss), 1e-13);
  expect_close("masked dlogits", whole.grad, ref_grad, 1e-7, 1e-9);  // scale rounded to float
  // The masked-out rows have no gradient at all, whatever their logits.
  for (int i = 0; i < kN; ++i)
    for (int c = 0; c < kLd && !mask[i]; ++c) EXPECT_EQ(whole.grad[static_cast<std::size_t>(i) * kLd + c], 0.0);
  // Finite differences of the masked mean (unscaled gradient / count).
  std::vector<double> unscaled = run_ce<double, double>(logits, tgt, {0, kV}, 1.0f).grad;
  for (double& g : unscaled) g /= counted;
  fd_check("masked mean dlogits", logits, unscaled,
           [&]() { return run_ce<double, double>(logits, tgt, {0, kV}, 1.0f).loss / counted; }, 100, 3);
  // Two micro-batches (rows 0..3 and 4..6, as grad_accum or two dp ranks would hold them),
  // each scaled by the GLOBAL count: the summed losses and the gradients are the same.
  std::vector<std::int32_t> first(tgt), second(tgt);
  for (int i = 0; i < kN; ++i) (i < 4 ? second : first)[i] = -1;
  const auto a = run_ce<double, double>(logits, first, {0, kV}, scale);
  const auto b = run_ce<double, double>(logits, second, {0, kV}, scale);
  EXPECT_LT(rel_err((a.loss + b.loss) / counted, ref_loss), 1e-13);
  std::vector<double> sum(a.grad.size());
  for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = a.grad[i] + b.grad[i];
  expect_close("micro-batch dlogits", sum, whole.grad, 1e-15, 1e-15);
}
