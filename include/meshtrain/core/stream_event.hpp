#pragma once
/// \brief A point on the compute stream (Kokkos' default execution space instance) that the
/// host can test, wait for and time without waiting for the whole device: a CUDA event in
/// CUDA builds (core/cuda_rt.hpp). On host builds the work before a record has already
/// run when record() returns (Kokkos' host spaces execute as they are called), so the
/// event is the wall-clock time of the record, done at once.

namespace meshtrain {

class StreamEvent {
 public:
  StreamEvent();
  ~StreamEvent();
  StreamEvent(StreamEvent&& o) noexcept;
  StreamEvent& operator=(StreamEvent&& o) noexcept;
  StreamEvent(const StreamEvent&) = delete;
  StreamEvent& operator=(const StreamEvent&) = delete;

  /// Marks the compute stream's current end (after everything queued so far).
  void record();
  /// Recorded at least once.
  bool recorded() const { return recorded_; }
  /// The work before the last record has completed (true before any record); never blocks.
  bool done() const;
  /// The host waits until the work before the last record has completed.
  void synchronize() const;
  /// Seconds from `a`'s record to `b`'s (both recorded and completed, `a` first on the stream).
  static double seconds(const StreamEvent& a, const StreamEvent& b);

 private:
  void* event_ = nullptr;  // cudaEvent_t (CUDA builds)
  double host_time_ = 0;   // host builds: when record() returned
  bool recorded_ = false;
};

}  // namespace meshtrain
