#include "kernels/adamw.hpp"

#include <cmath>
#include <limits>

#include "kernel_common.hpp"
#include "core/error.hpp"
#include "kernels/elementwise.hpp"

namespace meshtrain::kernels {
using namespace detail;

namespace {

AdamWScalars scalars_with_decay(const AdamWParams& p, float weight_decay) {
  // Same operation order as torch.optim.AdamW (single-tensor path): scalars in double on
  // the host, then per element
  //   p *= 1 - lr*wd;  m += (1-b1) (g - m);  v = v b2 + (1-b2) g g;
  //   p -= step_size * m / (sqrt(v) / sqrt(1 - b2^t) + eps),  step_size = lr / (1 - b1^t).
  // (m: torch's lerp; equal to b1 m + (1-b1) g as the header states.)
  const double lr = p.lr, b1 = p.beta1, b2 = p.beta2;
  const double bc1 = 1.0 - std::pow(b1, p.step);
  const double bc2 = 1.0 - std::pow(b2, p.step);
  AdamWScalars s;
  s.step_size = static_cast<float>(lr / bc1);
  s.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  s.decay = static_cast<float>(1.0 - lr * static_cast<double>(weight_decay));
  s.no_decay = static_cast<float>(1.0 - lr * 0.0);  // 1 exactly
  s.w1 = static_cast<float>(1.0 - b1);
  s.w2 = static_cast<float>(1.0 - b2);
  s.beta2 = p.beta2;
  s.eps = p.eps;
  return s;
}

/// One element's update; returns the new parameter. The one copy of the arithmetic that
/// adamw_step and both launches of adamw_multi share.
KOKKOS_FORCEINLINE_FUNCTION float adamw_element(const AdamWScalars& s, float decay, float gs, float& param,
                                                float grad, float& exp_avg, float& exp_avg_sq) {
  const float g = grad * gs;
  const float m = exp_avg + s.w1 * (g - exp_avg);
  const float v = exp_avg_sq * s.beta2 + s.w2 * g * g;
  exp_avg = m;
  exp_avg_sq = v;
  const float denom = math::sqrt(v) / s.bc2_sqrt + s.eps;
  param = param * decay - s.step_size * (m / denom);
  return param;
}

/// Index of the segment holding flattened element j: the last k with segs[k].first <= j.
KOKKOS_INLINE_FUNCTION int find_segment(const FlatSegment* segs, int n, std::int64_t j) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (segs[mid].first <= j) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

bool single_launch(SegmentLaunch launch) {
  if (launch == SegmentLaunch::Auto) return !kHostExec;
  MESHTRAIN_ASSERT(launch == SegmentLaunch::Single || kDeviceIsHost,
                   "per-segment launches read the segment table on the host (host builds only)");
  return launch == SegmentLaunch::Single;
}

/// The element loops of adamw_multi, with its scalars and gate where the host can read
/// them (`s`, `skip`, `gs`) or, in the single launch, read by each thread from `sd`/`gate`.
template <class C>
void adamw_multi_host(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, const FlatSegment* segs,
                      int n_segs, const AdamWScalars& s, float gs, C* compute) {
  // Each segment is the loop of adamw_step (unit stride, vectorized).
  for (int k = 0; k < n_segs; ++k) {
    const FlatSegment sg = segs[k];
    const float decay = sg.decay ? s.decay : s.no_decay;
    float* pp = param + sg.offset;
    const float* gp = grad + sg.offset;
    float* mp = exp_avg + sg.offset;
    float* vp = exp_avg_sq + sg.offset;
    C* cp = compute != nullptr ? compute + sg.offset : nullptr;
    if (cp == nullptr) {
      Kokkos::parallel_for(
          "Kernels::adamw_multi", Range64(0, sg.numel),
          KOKKOS_LAMBDA(std::int64_t i) { adamw_element(s, decay, gs, pp[i], gp[i], mp[i], vp[i]); });
    } else {
      Kokkos::parallel_for(
          "Kernels::adamw_multi", Range64(0, sg.numel), KOKKOS_LAMBDA(std::int64_t i) {
            cp[i] = store<C>(adamw_element(s, decay, gs, pp[i], gp[i], mp[i], vp[i]));
          });
    }
  }
}

}  // namespace

AdamWScalars adamw_scalars(const AdamWParams& p) { return scalars_with_decay(p, p.weight_decay); }

void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::size_t n,
                const AdamWParams& p) {
  const AdamWScalars s = adamw_scalars(p);
  const float gs = p.grad_scale;
  Kokkos::parallel_for(
      "Kernels::adamw_step", Range64(0, static_cast<std::int64_t>(n)),
      KOKKOS_LAMBDA(std::int64_t i) { adamw_element(s, s.decay, gs, param[i], grad[i], exp_avg[i], exp_avg_sq[i]); });
}

template <class C>
void adamw_multi(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, const FlatSegment* segs,
                 int n_segs, std::int64_t total, const AdamWParams& p, const double* norm_clip, C* compute,
                 SegmentLaunch launch) {
  if (n_segs == 0 || total == 0) return;
  const AdamWScalars s = adamw_scalars(p);
  if (!single_launch(launch)) {
    // Host (device memory is host memory here): the skip and the clip coefficient are read
    // once.
    if (!std::isfinite(norm_clip[0])) return;
    adamw_multi_host(param, grad, exp_avg, exp_avg_sq, segs, n_segs, s, static_cast<float>(norm_clip[1]), compute);
    return;
  }
  // The device form with the scalars in device memory (a copy of `s` made for this call).
  Buffer<AdamWScalars> sd(1, MemCategory::Workspace);
  Kokkos::deep_copy(ExecSpace(), sd.view(), UView<const AdamWScalars, HostMem>(&s, 1));
  adamw_multi(param, grad, exp_avg, exp_avg_sq, segs, n_segs, total, sd.data(), norm_clip, compute, launch);
  ExecSpace().fence();  // `s` is a host local: the copy must have read it
}

template <class C>
void adamw_multi(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, const FlatSegment* segs,
                 int n_segs, std::int64_t total, const AdamWScalars* scalars, const double* gate, C* compute,
                 SegmentLaunch launch) {
  if (n_segs == 0 || total == 0) return;
  if (single_launch(launch)) {
    Kokkos::parallel_for(
        "Kernels::adamw_multi", Range64(0, total), KOKKOS_LAMBDA(std::int64_t j) {
          if (!math::isfinite(gate[0])) return;  // non-finite norm or loss: the step is skipped
          const AdamWScalars s = *scalars;
          const float gs = static_cast<float>(gate[1]);
          const FlatSegment& sg = segs[find_segment(segs, n_segs, j)];
          const std::int64_t i = sg.offset + (j - sg.first);
          const float w = adamw_element(s, sg.decay ? s.decay : s.no_decay, gs, param[i], grad[i], exp_avg[i],
                                        exp_avg_sq[i]);
          if (compute != nullptr) compute[i] = store<C>(w);
        });
    return;
  }
  // Host: the gate and the scalars are read once (device memory is host memory here).
  if (!std::isfinite(gate[0])) return;
  adamw_multi_host(param, grad, exp_avg, exp_avg_sq, segs, n_segs, *scalars, static_cast<float>(gate[1]), compute);
}

void adamw_gate(const double* loss, const double* norm_clip, const AdamWScalars* candidates, double* prev,
                AdamWScalars* current, double* gate, double* applied, double* chosen) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Kokkos::parallel_for(
      "Kernels::adamw_gate", RangeInt(0, 1), KOKKOS_LAMBDA(int) {
        const int c = prev[0] != 0.0 ? 1 : 0;
        current[0] = candidates[c];
        chosen[0] = c;
        const double norm = norm_clip[0];
        const bool ok = math::isfinite(loss[0]) && math::isfinite(norm);
        gate[0] = ok ? norm : nan;
        gate[1] = norm_clip[1];
        applied[0] = ok ? 1.0 : 0.0;
        prev[0] = applied[0];
      });
}

void sum_squares_segments(const float* x, const FlatSegment* segs, int n_segs, std::int64_t total, double* out,
                          SegmentLaunch launch) {
  if (single_launch(launch)) {
    // One reduction into the device scalar (Kokkos writes the result there, asynchronously).
    Kokkos::View<double, DeviceMem, Kokkos::MemoryTraits<Kokkos::Unmanaged>> result(out);
    Kokkos::parallel_reduce(
        "Kernels::sum_squares_segments", Range64(0, total),
        KOKKOS_LAMBDA(std::int64_t j, double& acc) {
          const FlatSegment& sg = segs[find_segment(segs, n_segs, j)];
          const double v = static_cast<double>(x[sg.offset + (j - sg.first)]);
          acc += v * v;
        },
        result);
    return;
  }
  // Host: the per-parameter sums of the unfused norm, added in the same order.
  for (int k = 0; k < n_segs; ++k)
    *out += sum_squares(x + segs[k].offset, static_cast<std::size_t>(segs[k].numel));
}

void sum_in_order(const double* partial, int n, double* out) {
  Kokkos::parallel_for(
      "Kernels::sum_in_order", RangeInt(0, 1), KOKKOS_LAMBDA(int) {
        double s = 0;
        for (int u = 0; u < n; ++u) s += partial[u];
        out[0] = s;
      });
}

void grad_norm_clip(double* norm_clip, double max_norm) {
  Kokkos::parallel_for(
      "Kernels::grad_norm_clip", RangeInt(0, 1), KOKKOS_LAMBDA(int) {
        const double norm = math::sqrt(norm_clip[0]);
        norm_clip[0] = norm;
        // std::min(1.0, c) of the host code: c when c < 1, else 1 (also for a NaN c).
        const double c = max_norm / (norm + 1e-6);
        norm_clip[1] = max_norm > 0 ? (c < 1.0 ? c : 1.0) : 1.0;
      });
}

template void adamw_multi<float>(float*, const float*, float*, float*, const FlatSegment*, int, std::int64_t,
                                 const AdamWParams&, const double*, float*, SegmentLaunch);
template void adamw_multi<bf16>(float*, const float*, float*, float*, const FlatSegment*, int, std::int64_t,
                                const AdamWParams&, const double*, bf16*, SegmentLaunch);
template void adamw_multi<float>(float*, const float*, float*, float*, const FlatSegment*, int, std::int64_t,
                                 const AdamWScalars*, const double*, float*, SegmentLaunch);
template void adamw_multi<bf16>(float*, const float*, float*, float*, const FlatSegment*, int, std::int64_t,
                                const AdamWScalars*, const double*, bf16*, SegmentLaunch);

}  // namespace meshtrain::kernels
