#pragma once
/// \brief Fused AdamW on fp32 master shards (decoupled weight decay, bias correction), the
/// multi-tensor form that updates every parameter of one flat FSDP unit in one launch, and
/// the one-pass sum of squares over a unit's counted ranges (the gradient norm's part).

#include <cstddef>
#include <cstdint>

namespace meshtrain::kernels {

struct AdamWParams {
  float lr = 0;
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay = 0;   ///< for this range (0 for norms/biases)
  float grad_scale = 1.0f;  ///< multiplies the gradient first (clipping coefficient)
  int step = 1;             ///< 1-based step for bias correction
};

/// The scalars of one AdamW update, computed once on the host in double (as torch does):
/// step_size = lr / (1 - b1^t), bc2_sqrt = sqrt(1 - b2^t), decay = 1 - lr * weight_decay
/// (no_decay the same with weight decay 0), w1 = 1 - b1, w2 = 1 - b2. The fused step reads
/// them from device memory (adamw_multi's device form), so that a step replayed from a CUDA
/// graph takes each step's learning rate and bias correction, never the captured ones.
struct AdamWScalars {
  float step_size = 0, bc2_sqrt = 1, decay = 1, no_decay = 1, w1 = 0, w2 = 0, beta2 = 0, eps = 0;
};
AdamWScalars adamw_scalars(const AdamWParams& p);

/// For i < n: g = grad[i]*grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
/// p -= lr * (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + weight_decay * p).
void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::size_t n,
                const AdamWParams& p);

/// One piece of a flat buffer: elements [offset, offset + numel), and (AdamW) whether it
/// decays. Offsets are relative to the pointers the kernels get.
struct FlatSegment {
  std::int64_t offset = 0;
  std::int64_t numel = 0;
  std::int64_t first = 0;  ///< elements of the segments before this one (their running sum)
  int decay = 0;           ///< 1: AdamW applies weight_decay here; 0: none (norms, biases)
};

/// How the multi-segment kernels launch. Single: one launch over all segments, each element
/// finding its segment by binary search (the GPU path). PerSegment: one launch per segment
/// over contiguous indices, which vectorizes on host threads; with sum_squares_segments it
/// also keeps the summation order of one sum_squares per segment. Auto: Single on GPUs,
/// PerSegment on host. Results of adamw_multi are bitwise the same either way.
enum class SegmentLaunch { Auto, Single, PerSegment };

/// \brief Multi-tensor AdamW: the update of adamw_step on every segment of `segs` (device
/// array of n_segs, total elements `total`) in one launch, element for element the same
/// arithmetic as one adamw_step call per segment (so the results are bitwise those).
/// `p.weight_decay` applies where a segment decays; `p.grad_scale` is ignored: the clip
/// coefficient is read on the device from norm_clip[1], and when the global gradient norm
/// norm_clip[0] is not finite nothing is written (the step is skipped without the host
/// looking at the norm first). `compute` (may be null): the updated parameter is also
/// written there, at the same offset, in the compute dtype C (the bf16 copy the forward
/// reads), so no separate cast pass is needed.
template <class C>
void adamw_multi(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, const FlatSegment* segs,
                 int n_segs, std::int64_t total, const AdamWParams& p, const double* norm_clip, C* compute,
                 SegmentLaunch launch = SegmentLaunch::Auto);

/// The same update with its scalars read from device memory: `scalars` (one AdamWScalars) and
/// `gate` ([0]: the step is skipped when it is not finite; [1]: the clip coefficient), both
/// device pointers written by earlier kernels (adamw_gate) or copies. Bitwise the form above
/// for the same values.
template <class C>
void adamw_multi(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, const FlatSegment* segs,
                 int n_segs, std::int64_t total, const AdamWScalars* scalars, const double* gate, C* compute,
                 SegmentLaunch launch = SegmentLaunch::Auto);

/// \brief The decision of a fused optimizer step, on the device (one thread), so that the
/// host reads nothing before AdamW: with loss[0] (the step's loss) and norm_clip ([0] the
/// global gradient norm, [1] its clip coefficient, grad_norm_clip's),
///   gate[0] = norm_clip[0] when the loss and the norm are finite, else NaN (AdamW then skips);
///   gate[1] = norm_clip[1];  applied[0] = 1 or 0.
/// The AdamW scalars of the step: the host, which learns whether a step was applied only
/// when it reads the step back (one step late), gives two candidates -- [0] for "the
/// previous step was skipped", [1] for "it was applied" (their bias corrections differ by
/// one update) --, and the device takes candidates[prev[0] != 0] into *current, then sets
/// prev[0] (kept across steps) to this step's applied flag. chosen[0] = the candidate taken.
void adamw_gate(const double* loss, const double* norm_clip, const AdamWScalars* candidates, double* prev,
                AdamWScalars* current, double* gate, double* applied, double* chosen);

/// \brief Sum over the segments of x[i]^2 in double into *out, a device pointer, written
/// asynchronously (nothing is read back). Single: one reduction over all `total` elements,
/// *out overwritten. PerSegment: *out += sum_squares(segment) for each segment in order
/// (`segs` must then be host-accessible: host builds), exactly the additions of the
/// per-parameter gradient norm. The order is fixed for a fixed space and thread count.
void sum_squares_segments(const float* x, const FlatSegment* segs, int n_segs, std::int64_t total, double* out,
                          SegmentLaunch launch = SegmentLaunch::Auto);

/// out[0] = sum of partial[0..n) in index order (one device thread; n is the unit count).
void sum_in_order(const double* partial, int n, double* out);

/// \brief The norm's last pass, on the device: on entry norm_clip[0] is the global sum of
/// squares; on exit norm_clip[0] = its square root (the norm) and norm_clip[1] =
/// min(1, max_norm / (norm + 1e-6)) when max_norm > 0, else 1: the clip coefficient
/// adamw_multi reads (a NaN norm gives 1, and adamw_multi then skips the step).
void grad_norm_clip(double* norm_clip, double max_norm);

}  // namespace meshtrain::kernels
