#pragma once
/// \brief The optimizer end of a step without host round trips (gpu.fused_optimizer): the
/// global gradient norm in one reduction launch per FSDP unit, summed over the world and
/// turned into the clip coefficient on the device; AdamW in one launch per unit that reads
/// that coefficient (and skips the update when the norm is not finite) from device memory,
/// writing no_shard's compute-dtype copy in the same pass. The learning rate and the bias
/// correction are read from device memory too (the step's AdamW scalars), so nothing the host
/// passes by value changes from step to step and a CUDA graph can replay the whole end of the
/// step. The host reads the norm one step late (train/step.hpp), to log it and count the update.
///
/// Host builds run the same class: the per-unit reductions become the per-parameter
/// sum_squares calls of parallel::global_grad_norm added in its order, and AdamW is the
/// same element update, so results are bitwise those of the unfused path there.

#include <vector>

#include "comm/communicator.hpp"
#include "core/memory.hpp"
#include "kernels/adamw.hpp"
#include "optim/adamw.hpp"
#include "parallel/fsdp.hpp"

namespace meshtrain::optim {

template <class T>
class FusedStep {
 public:
  /// Segment tables of every unit, built once (they depend only on the engine's layouts,
  /// its state and owned ranges, and its tp rank).
  FusedStep(parallel::FsdpEngine<T>& engine, const AdamWSettings& settings);

  /// Global gradient norm and clip coefficient (max_norm 0 = no clipping) into device
  /// memory: norm_clip()[0], [1]. Nothing is read back.
  void grad_norm(Communicator& world, double max_norm);
  /// The AdamW scalars of learning rate `lr` and update `step` (1-based) with these
  /// settings (kernels::adamw_scalars, on the host).
  kernels::AdamWScalars scalars(double lr, int step) const;
  /// AdamW on every unit with the scalars at `scalars` and the gate at `gate` (both device
  /// memory: kernels::adamw_gate writes them from the step's loss, grad_norm's norm and clip
  /// coefficient and the host's candidates); leaves everything unchanged when gate[0] is not
  /// finite. Does not call the engine's params_updated*: the caller does.
  void update(const kernels::AdamWScalars* scalars, const double* gate);
  /// The norm of the last grad_norm, read back (waits for the work queued before it).
  double norm() const;
  /// Device pointer: [0] the norm, [1] the clip coefficient.
  const double* norm_clip() const { return scalars_.data(); }

  /// Launch form of the kernels (tests run the GPU form, Single, on host threads).
  kernels::SegmentLaunch launch = kernels::SegmentLaunch::Auto;

 private:
  struct Table {
    Buffer<kernels::FlatSegment> segs;  ///< device
    int n = 0;
    std::int64_t total = 0;             ///< elements over all segments
  };
  static Table make_table(std::vector<kernels::FlatSegment> segs);

  parallel::FsdpEngine<T>& eng_;
  AdamWSettings settings_;
  std::vector<Table> norm_, adam_;  ///< per unit
  Buffer<double> partial_;          ///< (units) per-unit sums of squares (Single)
  Buffer<double> scalars_;          ///< (2) sum of squares -> norm, clip coefficient
};

}  // namespace meshtrain::optim
