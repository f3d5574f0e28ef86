// The one-pass (online-softmax) cross-entropy of gpu.fused_loss against a double-precision
// reference and finite differences, and against the three-pass path it replaces: masked
// rows, padded vocabulary, tp-split vocabulary (slices merged on the host as the tp
// all-reduces would), DPO row scales, rows long enough that the running max is rescaled.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>

#include "kernel_test_utils.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/cross_entropy_online.hpp"
#include "kernels/step_scalars.hpp"
#include "../../src/kernels/cross_entropy_rows.hpp"

using namespace meshtrain;
using namespace meshtrain::test;
namespace k = meshtrain::kernels;

namespace {

/// Logits (n, ld) with columns >= valid of each row padding (and ld - v stride padding).
struct Case {
  int n, v, ld;
  std::int64_t valid;
  std::vector<std::int32_t> targets;
};

/// 7 rows of a 23-column slice (ids >= 20 padding, stride 25), row 1 ignored.
Case small_case() { return {7, 23, 25, 20, {3, -1, 19, 0, 12, 7, 13}}; }
/// 5 rows of 2000 columns (1990 valid): several of the host's 512-column blocks, and
/// logits that grow along the row, so the running max rises block after block.
Case long_case() { return {5, 2000, 2000, 1990, {1989, 0, -1, 1000, 513}}; }

std::vector<double> make_logits(const Case& k, std::uint64_t seed, double trend = 0) {
  auto l = random_normal(static_cast<std::size_t>(k.n) * k.ld, seed, 3.0);
  for (int i = 0; i < k.n; ++i)
    for (int c = 0; c < k.ld; ++c) {
      double& x = l[static_cast<std::size_t>(i) * k.ld + c];
      x += trend * c;
      // Large padding logits: they must not take part in max, sum or gradient.
      if (c >= k.valid) x = 50.0 + c;
    }
  return l;
}

struct Ref {
  double loss = 0;
  std::vector<double> grad;  // (n, ld): grad_scale * row_scale * (softmax - onehot); 0 elsewhere
};

Ref ce_ref(const Case& k, const std::vector<double>& logits, double grad_scale,
           const std::vector<float>& row_scale = {}) {
  Ref r;
  r.grad.assign(logits.size(), 0.0);
  for (int i = 0; i < k.n; ++i) {
    if (k.targets[i] < 0) continue;
    const double* l = &logits[static_cast<std::size_t>(i) * k.ld];
    double mx = -1e300, sum = 0;
    for (int c = 0; c < k.valid; ++c) mx = std::max(mx, l[c]);
    for (int c = 0; c < k.valid; ++c) sum += std::exp(l[c] - mx);
    r.loss += std::log(sum) + mx - l[k.targets[i]];
    const double g = grad_scale * (row_scale.empty() ? 1.0 : row_scale[i]);
    for (int c = 0; c < k.valid; ++c)
      r.grad[static_cast<std::size_t>(i) * k.ld + c] = g * (std::exp(l[c] - mx) / sum - (c == k.targets[i] ? 1.0 : 0.0));
  }
  return r;
}

struct Result {
  double loss = 0;
  std::vector<double> grad;  // the logits buffer afterwards, stride padding set to 0
};

void clear_stride_padding(const Case& k, Result& r) {
  for (int i = 0; i < k.n; ++i)
    for (int c = k.v; c < k.ld; ++c) r.grad[static_cast<std::size_t>(i) * k.ld + c] = 0.0;
}

double read_scalar(const Buffer<double>& b) { return to_host(b)[0]; }

/// tp = 1: cross_entropy_fused, one launch.
template <class T>
Result run_fused(const Case& k, const std::vector<double>& logits, float grad_scale,
                 const std::vector<float>& row_scale = {}) {
  auto d = upload<T>(logits);
  auto dt = to_device(k.targets);
  Buffer<float> drs = row_scale.empty() ? Buffer<float>() : to_device(row_scale);
  Buffer<double> loss(1, MemCategory::Workspace);
  k::cross_entropy_fused(d.data(), k.ld, k.n, k.v, k.valid, dt.data(), grad_scale,
                         row_scale.empty() ? nullptr : drs.data(), loss.data());
  Result r;
  r.loss = read_scalar(loss);
  r.grad = download(d);
  clear_stride_padding(k, r);
  return r;
}

/// tp = slices at `bounds`: cross_entropy_online_stats per slice, the pairs merged as the
/// model does (max over slices, each slice's sum rescaled to it, sums added), then
/// cross_entropy_finish_into per slice. Also returns the loss-only sum of the merged stats.
template <class T>
Result run_online_sliced(const Case& k, const std::vector<double>& logits, const std::vector<int>& bounds,
                         float grad_scale, double* loss_only = nullptr) {
  using S = acc_t<T>;
  auto d = upload<T>(logits);
  auto dt = to_device(k.targets);
  const int ns = static_cast<int>(bounds.size()) - 1;
  std::vector<std::vector<S>> lmax(ns), lstats(ns);
  Buffer<S> dlocal(k.n, MemCategory::Workspace), dmax(k.n, MemCategory::Workspace), dstats(2 * k.n, MemCategory::Workspace);
  std::vector<S> row_max(k.n, -std::numeric_limits<S>::infinity());
  for (int s = 0; s < ns; ++s) {
    k::cross_entropy_online_stats(d.data() + bounds[s], k.ld, k.n, bounds[s + 1] - bounds[s], bounds[s], k.valid,
                                  dt.data(), dlocal.data(), dmax.data(), dstats.data());
    lmax[s] = to_host(dlocal);
    lstats[s] = to_host(dstats);
    const auto m = to_host(dmax);
    EXPECT_TRUE(bitwise_equal(m, lmax[s])) << "row_max = local_max before the reduction";
    for (int i = 0; i < k.n; ++i) row_max[i] = std::max(row_max[i], m[i]);
  }
  // all_reduce(MAX) done; each slice rescales its sums on the device, then all_reduce(SUM).
  auto gmax = to_device(row_max);
  std::vector<S> stats(2 * k.n, S(0));
  for (int s = 0; s < ns; ++s) {
    auto l = to_device(lmax[s]);
    auto st = to_device(lstats[s]);
    k::cross_entropy_rescale_sums(k.n, l.data(), gmax.data(), st.data());
    const auto h = to_host(st);
    for (int i = 0; i < 2 * k.n; ++i) stats[i] += h[i];
  }
  auto gstats = to_device(stats);
  if (loss_only) *loss_only = k::cross_entropy_loss_sum(k.n, dt.data(), gmax.data(), gstats.data());
  Result r;
  Buffer<double> loss(1, MemCategory::Workspace);
  for (int s = 0; s < ns; ++s) {
    k::cross_entropy_finish_into(d.data() + bounds[s], k.ld, k.n, bounds[s + 1] - bounds[s], bounds[s], k.valid,
                                 dt.data(), gmax.data(), gstats.data(), grad_scale, nullptr, loss.data());
    const double l = read_scalar(loss);
    if (s == 0) r.loss = l;
    EXPECT_EQ(l, r.loss) << "slice " << s << ": every slice's loss comes from the same merged statistics";
  }
  r.grad = download(d);
  clear_stride_padding(k, r);
  return r;
}

/// The three-pass path (cross_entropy_row_max, _row_sums, _finish) on the whole vocabulary.
template <class T>
Result run_three_pass(const Case& k, const std::vector<double>& logits, float grad_scale) {
  using S = acc_t<T>;
  auto d = upload<T>(logits);
  auto dt = to_device(k.targets);
  Buffer<S> dmax(k.n, MemCategory::Workspace), dstats(2 * k.n, MemCategory::Workspace);
  k::cross_entropy_row_max(d.data(), k.ld, k.n, k.v, 0, k.valid, dmax.data());
  k::cross_entropy_row_sums(d.data(), k.ld, k.n, k.v, 0, k.valid, dt.data(), dmax.data(), dstats.data());
  Result r;
  r.loss = k::cross_entropy_finish(d.data(), k.ld, k.n, k.v, 0, k.valid, dt.data(), dmax.data(), dstats.data(),
                                   grad_scale);
  r.grad = download(d);
  clear_stride_padding(k, r);
  return r;
}

}  // namespace

TEST(KernelsCrossEntropyOnline, FusedDoubleAgainstReferenceAndFiniteDifferences) {
  for (const Case& c : {small_case(), long_case()}) {
    auto logits = make_logits(c, 11, c.v > 100 ? 0.01 : 0.0);
    const auto ref = ce_ref(c, logits, 1.0);
    const auto r = run_fused<double>(c, logits, 1.0f);
    // 1e-12: the same formula in double; the online rescaling adds a rounding per block.
    EXPECT_LT(rel_err(r.loss, ref.loss), 1e-12) << "V = " << c.v;
    expect_close("fused dlogits", r.grad, ref.grad, 1e-11, 1e-9);
    // Masked row and padding columns: exactly 0.
    for (int i = 0; i < c.n; ++i)
      for (int col = 0; col < c.ld; ++col)
        if (c.targets[i] < 0 || col >= c.valid) EXPECT_EQ(r.grad[static_cast<std::size_t>(i) * c.ld + col], 0.0);
    // Gradient of the one-pass loss itself, sampled over all columns (padding and the
    // ignored row included: gradient 0 there).
    fd_check("fused dlogits", logits, r.grad, [&]() { return run_fused<double>(c, logits, 1.0f).loss; }, 60, 5);
  }
}

TEST(KernelsCrossEntropyOnline, GradScaleAndDpoRowScale) {
  const Case c = small_case();
  const auto logits = make_logits(c, 12);
  const std::vector<float> row_scale = {0.5f, 2.0f, -1.0f, 1.0f, -0.25f, 3.0f, 1.0f};
  const auto ref = ce_ref(c, logits, 0.125, row_scale);
  const auto r = run_fused<double>(c, logits, 0.125f, row_scale);
  // The scales multiply the gradient (negative for a rejected response), not the loss.
  EXPECT_LT(rel_err(r.loss, ref.loss), 1e-12);
  expect_close("row-scaled dlogits", r.grad, ref.grad, 1e-11, 1e-9);
}

TEST(KernelsCrossEntropyOnline, CountedTargetsScaleFromTheDeviceEqualsTheScaleByValue) {
  // Loss-masked training (train/step.cpp, StepRunner's `counted`): the gradient scale
  // 1 / counted targets reaches the kernel as a per-row scale filled on the device from the
  // step's uploaded count, grad_scale 1; the loss is divided by the same device count. Both
  // must be bit for bit the by-value forms they replace (a replayed CUDA graph reads each
  // step's count), for the compute dtypes the trainer uses.
  const Case c = small_case();
  const auto logits = make_logits(c, 14);
  for (const double counted : {6.0, 7.0, 1000003.0}) {
    Buffer<double> dc = to_device(std::vector<double>{counted});
    Buffer<float> rs(static_cast<std::size_t>(c.n), MemCategory::Workspace);
    k::fill_reciprocal(rs.data(), c.n, dc.data());
    const std::vector<float> row_scale = to_host(rs);
    for (const float v : row_scale) EXPECT_EQ(v, static_cast<float>(1.0 / counted));
    const float by_value = static_cast<float>(1.0 / counted);
    const auto a = run_fused<float>(c, logits, by_value);
    const auto b = run_fused<float>(c, logits, 1.0f, row_scale);
    EXPECT_EQ(a.grad, b.grad) << "fp32, counted " << counted;
    const auto ab = run_fused<bf16>(c, logits, by_value);
    const auto bb = run_fused<bf16>(c, logits, 1.0f, row_scale);
    EXPECT_EQ(ab.grad, bb.grad) << "bf16, counted " << counted;
    Buffer<double> sum = to_device(std::vector<double>{a.loss}), q1(1, MemCategory::Workspace),
                   q2(1, MemCategory::Workspace);
    k::divide_scalar(sum.data(), counted, q1.data());
    k::divide_by_scalar(sum.data(), dc.data(), q2.data());
    EXPECT_EQ(read_scalar(q1), read_scalar(q2));
    EXPECT_EQ(read_scalar(q2), a.loss / counted);
  }
}

TEST(KernelsCrossEntropyOnline, TpSlicesMergeToTheWholeVocabulary) {
  for (const Case& c : {small_case(), long_case()}) {
    const auto logits = make_logits(c, 13, c.v > 100 ? 0.01 : 0.0);
    const auto ref = ce_ref(c, logits, 0.5);
    const int h = c.v / 2;
    // tp = 2 (the second slice holds the padding); tp = 3 with a slice of padding only
    // (max -inf, sum 0 there: the rescale must add nothing).
    const std::vector<std::vector<int>> splits = {{0, h, c.v}, {0, h / 2, static_cast<int>(c.valid), c.v}};
    for (const auto& b : splits) {
      double loss_only = 0;
      const auto r = run_online_sliced<double>(c, logits, b, 0.5f, &loss_only);
      // 1e-12: double sums in another grouping and one rescale per slice.
      EXPECT_LT(rel_err(r.loss, ref.loss), 1e-12) << b.size() - 1 << " slices";
      EXPECT_LT(rel_err(loss_only, ref.loss), 1e-12) << "loss-only form, " << b.size() - 1 << " slices";
      expect_close("sliced dlogits", r.grad, ref.grad, 1e-11, 1e-9);
    }
    // fp32 statistics (the production path), sliced: the loss to 2e-6 relative (fp32 sums
    // of ~2000 terms in two groupings), probabilities to 1e-5 (floor 1e-4).
    const auto f = run_online_sliced<float>(c, logits, {0, h, c.v}, 0.5f);
    EXPECT_LT(rel_err(f.loss, ref.loss), 2e-6);
    expect_close("fp32 sliced dlogits", f.grad, ref.grad, 1e-5, 1e-4);
  }
}

TEST(KernelsCrossEntropyOnline, MatchesThreePassPath) {
  for (const Case& c : {small_case(), long_case()}) {
    const auto logits = bf16_exact(make_logits(c, 14, c.v > 100 ? 0.01 : 0.0));
    // In double both forms agree to rounding.
    const auto d3 = run_three_pass<double>(c, logits, 1.0f);
    const auto d1 = run_fused<double>(c, logits, 1.0f);
    EXPECT_LT(rel_err(d1.loss, d3.loss), 1e-12);
    expect_close("double: fused vs three-pass", d1.grad, d3.grad, 1e-11, 1e-9);
    // fp32: the sums are taken in another order (block-wise with rescaling), so not
    // bitwise: loss to 2e-6 relative, dlogits to 1e-5 (floor 1e-4), as fp32 vs double above.
    const auto f3 = run_three_pass<float>(c, logits, 1.0f);
    const auto f1 = run_fused<float>(c, logits, 1.0f);
    EXPECT_LT(rel_err(f1.loss, f3.loss), 2e-6);
    expect_close("fp32: fused vs three-pass", f1.grad, f3.grad, 1e-5, 1e-4);
    // bf16 logits (fp32 statistics): the gradient is rounded to bf16 by both.
    const auto b3 = run_three_pass<bf16>(c, logits, 1.0f);
    const auto b1 = run_fused<bf16>(c, logits, 1.0f);
    EXPECT_LT(rel_err(b1.loss, b3.loss), 2e-6);
    expect_bf16_close("bf16: fused vs three-pass", b1.grad, b3.grad);
  }
}

TEST(KernelsCrossEntropyOnline, Deterministic) {
  const Case c = long_case();
  const auto logits = make_logits(c, 15, 0.01);
  const auto a = run_fused<float>(c, logits, 1.0f);
  const auto b = run_fused<float>(c, logits, 1.0f);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_TRUE(bitwise_equal(a.grad, b.grad));
  const auto sa = run_online_sliced<float>(c, logits, {0, 700, c.v}, 1.0f);
  const auto sb = run_online_sliced<float>(c, logits, {0, 700, c.v}, 1.0f);
  EXPECT_EQ(sa.loss, sb.loss);
  EXPECT_TRUE(bitwise_equal(sa.grad, sb.grad));
}

// ---- the GPU form's row functions, lane by lane on the host ---------------------------------
// On GPUs each thread of a row's team keeps its own online statistics over its strided packs
// of the row (cross_entropy_rows.hpp: strided_row_stats; 16-byte packs where the rows allow
// it, ce_rows_packable) and writes its packs of the gradient (strided_row_gradient). Here the
// same functions run for each lane of a team of `lanes` threads on the host, the lanes'
// pairs merged as the kernel's team reductions merge them (max, then the rescaled sums), and
// the results are compared with a double reference: each lane's own share, the merge, and
// the gradient in the real and the padding columns.

namespace {

template <class T, int K>
void check_strided_row(int lanes) {
  using A = acc_t<T>;
  // 1000 columns of which 997 are vocabulary: the last pack holds padding columns; logits
  // that rise along the row, so each lane rescales its sum many times.
  constexpr int kV = 1000, kValid = 997;
  static_assert(kV % K == 0, "a whole number of packs");
  std::vector<double> l = random_normal(kV, 90 + K, 2.0);
  for (int c = 0; c < kV; ++c) l[c] += 0.01 * c + (c >= kValid ? 1e4 : 0.0);  // huge padding: must be skipped
  // 16-byte aligned host storage, as the packs require.
  struct alignas(16) Row {
    T v[kV];
  };
  auto row = std::make_unique<Row>();
  for (int c = 0; c < kV; ++c) row->v[c] = convert<T>({l[c]})[0];
  std::vector<double> stored(kV);
  for (int c = 0; c < kV; ++c) stored[c] = as_double(row->v[c]);
  double ref_max = -INFINITY, ref_sum = 0;
  for (int c = 0; c < kValid; ++c) ref_max = std::max(ref_max, stored[c]);
  for (int c = 0; c < kValid; ++c) ref_sum += std::exp(stored[c] - ref_max);

  A mx = -std::numeric_limits<A>::infinity();
  std::vector<k::detail::RowStats<A>> own(lanes);
  for (int lane = 0; lane < lanes; ++lane) {
    own[lane] = k::detail::strided_row_stats<K, A>(row->v, kValid, lane, lanes);
    // The lane's own share against its columns in double.
    double m = -INFINITY, s = 0;
    for (int p = lane; p * K < kValid; p += lanes)
      for (int j = 0; j < K && p * K + j < kValid; ++j) m = std::max(m, stored[p * K + j]);
    for (int p = lane; p * K < kValid; p += lanes)
      for (int j = 0; j < K && p * K + j < kValid; ++j) s += std::exp(stored[p * K + j] - m);
    EXPECT_EQ(static_cast<double>(own[lane].max), m) << "lane " << lane;
    if (s == 0) EXPECT_EQ(static_cast<double>(own[lane].sum), 0.0) << "lane " << lane;
    else EXPECT_NEAR(static_cast<double>(own[lane].sum) / s, 1.0, 1e-5) << "lane " << lane;
    mx = std::max(mx, own[lane].max);
  }
  A sum = A(0);
  for (int lane = 0; lane < lanes; ++lane)
    sum += own[lane].sum > A(0) ? own[lane].sum * std::exp(own[lane].max - mx) : A(0);
  EXPECT_EQ(static_cast<double>(mx), ref_max);
  EXPECT_NEAR(static_cast<double>(sum) / ref_sum, 1.0, 1e-5);

  const A scale = A(0.5) / sum;
  for (int lane = 0; lane < lanes; ++lane)
    k::detail::strided_row_gradient<K>(row->v, kV, kValid, mx, scale, lane, lanes);
  std::vector<double> got(kV), want(kV, 0.0);
  for (int c = 0; c < kV; ++c) got[c] = as_double(row->v[c]);
  for (int c = 0; c < kValid; ++c) want[c] = 0.5 * std::exp(stored[c] - ref_max) / ref_sum;
  if constexpr (std::is_same_v<T, bf16>) {
    expect_bf16_close("gradient", got, want);
  } else {
    expect_close("gradient", got, want, 1e-5, 1e-30);
  }
  for (int c = kValid; c < kV; ++c) EXPECT_EQ(got[c], 0.0) << "padding column " << c;
}

}  // namespace

TEST(KernelsCrossEntropyOnline, GpuRowFormLaneByLaneAgainstReference) {
  for (int lanes : {1, 3, 32, 256}) {  // 256 lanes: most of them hold no pack of a 1000-column row
    check_strided_row<float, 1>(lanes);
    check_strided_row<float, 4>(lanes);
    check_strided_row<bf16, 1>(lanes);
    check_strided_row<bf16, 8>(lanes);
    check_strided_row<double, 2>(lanes);
  }
}

TEST(KernelsCrossEntropyOnline, PacksOnlyOnGpusAndWholeAlignedRows) {
  alignas(16) static bf16 logits[64];
  // 16-byte rows of whole packs only.
  EXPECT_TRUE(k::detail::ce_rows_in_packs(logits, 50304, 50304));        // GPT-2's padded vocabulary
  EXPECT_TRUE(k::detail::ce_rows_in_packs(logits, 50304, 25152));        // one of 2 tp slices
  EXPECT_FALSE(k::detail::ce_rows_in_packs(logits, 50257, 50257));       // rows of 100514 bytes
  EXPECT_FALSE(k::detail::ce_rows_in_packs(logits + 1, 50304, 50304));   // off the boundary
  EXPECT_FALSE(k::detail::ce_rows_in_packs(logits, 50304, 25148));       // 25148 columns: 3143.5 packs
  EXPECT_TRUE(k::detail::ce_rows_in_packs(reinterpret_cast<float*>(logits), 1000, 1000));
  // Host builds keep their block loops.
  EXPECT_EQ(k::detail::ce_rows_packable(logits, 50304, 50304), !kDeviceIsHost);
}
