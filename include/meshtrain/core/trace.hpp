#pragma once
/// \brief Names a phase of a training step for profilers, for the lifetime of a scope: a
/// Kokkos::Profiling region on every backend (what a Kokkos Tools library, e.g. the simple
/// kernel timer of perf/gpu/validate.sh, attributes kernels to) and, in CUDA builds, an NVTX
/// range (nvtx3, header-only: nsys and ncu show it; free when no tool is attached).
///
/// The Kokkos region carries the phase name alone ("meshtrain::forward"), so that a
/// profile sums a phase over the layers; the NVTX range adds the unit index
/// ("meshtrain::forward 3"), so that a timeline shows each one. Both are host-side marks:
/// a step replayed from a CUDA graph shows one range for the whole replay.

namespace meshtrain {

class TraceRange {
 public:
  /// `phase`: a string literal (kept by pointer). `index` >= 0 is appended to the NVTX name.
  explicit TraceRange(const char* phase, int index = -1);
  ~TraceRange();
  TraceRange(const TraceRange&) = delete;
  TraceRange& operator=(const TraceRange&) = delete;
};

}  // namespace meshtrain
