#pragma once
/// \brief Wall-clock timers and per-category time accounting (compute, comm, I/O).

#include <chrono>
#include <ctime>

namespace meshtrain {

inline double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

/// CPU time consumed by the calling thread (not the process), in seconds.
inline double thread_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// \brief A stopwatch: elapsed() since construction or the last reset().
class Stopwatch {
 public:
  Stopwatch() : start_(now_seconds()) {}
  void reset() { start_ = now_seconds(); }
  double elapsed() const { return now_seconds() - start_; }

 private:
  double start_;
};

/// \brief Adds the lifetime of the scope to `*sink` (seconds).
class ScopedTime {
 public:
  explicit ScopedTime(double* sink) : sink_(sink), start_(now_seconds()) {}
  ~ScopedTime() { *sink_ += now_seconds() - start_; }
  ScopedTime(const ScopedTime&) = delete;
  ScopedTime& operator=(const ScopedTime&) = delete;

 private:
  double* sink_;
  double start_;
};

}  // namespace meshtrain
