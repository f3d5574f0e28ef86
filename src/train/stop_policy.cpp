#include "comm/collectives.hpp"
#include "train/stop_policy.hpp"

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <limits>

#include "comm/watchdog.hpp"
#include "core/check.hpp"
#include "core/format.hpp"
#include "core/timer.hpp"

namespace meshtrain::train {
namespace {

// A process-directed signal runs its handler on whichever thread does not block it, often
// one of Open MPI's progress threads, while the main thread polls: a volatile sig_atomic_t
// is only safe within one thread (ThreadSanitizer reported the race). A lock-free atomic
// is safe across threads and async-signal-safe.
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the stop-signal flag must be lock-free");

extern "C" void on_stop_signal(int sig) { g_signal.store(sig, std::memory_order_relaxed); }

/// Seconds since the epoch of the Slurm job's end, or 0 when unknown.
double slurm_end_epoch() {
  if (const char* e = std::getenv("SLURM_JOB_END_TIME")) {
    const double v = std::atof(e);
    if (v > 0) return v;
  }
  const char* job = std::getenv("SLURM_JOB_ID");
  if (!job) return 0;
  // squeue prints the end time as YYYY-MM-DDTHH:MM:SS in local time.
  const std::string cmd = strprintf("squeue -h -j %s -o %%e 2>/dev/null", job);
  std::FILE* p = popen(cmd.c_str(), "r");
  if (!p) return 0;
  char buf[64] = {0};
  const bool got = std::fgets(buf, sizeof(buf), p) != nullptr;
  pclose(p);
  if (!got) return 0;
  std::tm tm{};
  if (std::sscanf(buf, "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
                  &tm.tm_sec) != 6)
    return 0;  // "Unknown" / "N/A": no time limit
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  tm.tm_isdst = -1;
  return static_cast<double>(std::mktime(&tm));
}

}  // namespace

void install_stop_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // MPI and file I/O calls continue after the handler
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int received_stop_signal() { return g_signal.load(std::memory_order_relaxed); }

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::None: return "none";
    case StopReason::Signal: return "signal";
    case StopReason::TimeLimit: return "time limit";
  }
  return "?";
}

StopPolicy::StopPolicy(double time_limit, double margin, double process_start, const MpiComm& world) : world_(world) {
  margin_ = margin;
  // Rank 0 asks for the Slurm end time first (squeue may take a while).
  const double slurm_end = world.rank() == 0 ? slurm_end_epoch() : 0;
  // Only durations cross ranks: each host's steady clock counts from its own boot, so one
  // rank's now_seconds() means nothing on another. Leaving an all-reduce, the ranks are at
  // one moment (to the collective's latency): each takes its `now` there; the run's age is
  // that of the rank that started first, and the Slurm end is rank 0's seconds left from it.
  watched_all_reduce_value("all_reduce", "world", world_, 0, ReduceOp::Max);
  const double now = now_seconds();
  constexpr double kNone = std::numeric_limits<double>::lowest();
  double agreed[2] = {now - process_start,
                      slurm_end > 0 ? slurm_end - static_cast<double>(std::time(nullptr)) : kNone};
  watched_all_reduce_in_place("all_reduce", "world", world_, agreed, 2, ReduceOp::Max);
  startup_seconds_ = agreed[0];
  // train.time_limit counts from the first rank's start: the start-up is inside it.
  double deadline = time_limit > 0 ? now - startup_seconds_ + time_limit : 0;
  source_ = time_limit > 0 ? strprintf("train.time_limit=%gs", time_limit) : "none";
  if (agreed[1] != kNone) {
    const double from_slurm = now + agreed[1];
    if (deadline == 0 || from_slurm < deadline) {
      deadline = from_slurm;
      source_ = "the Slurm job's end time";
    }
  }
  deadline_ = deadline;
}

double StopPolicy::seconds_left() const {
  return deadline_ > 0 ? deadline_ - now_seconds() : std::numeric_limits<double>::infinity();
}

std::string StopPolicy::describe() const {
  if (deadline_ <= 0) return "no wall-clock limit; SIGUSR1/SIGTERM save and exit with status 75";
  return strprintf("wall-clock limit from %s: %.0f s left (the start-up took %.0f s since the first rank's process "
                   "started); the run saves %g s (+ one step) before it; SIGUSR1/SIGTERM save and exit with status 75",
                   source_.c_str(), std::max(seconds_left(), 0.0), startup_seconds_, margin_);
}

StopReason StopPolicy::check(double step_seconds) const {
  int local = g_signal != 0 ? 2 : (deadline_ > 0 && seconds_left() < margin_ + step_seconds ? 1 : 0);
  // Under the watchdog: a rank that stalls between steps must not hang the others here.
  const int any = watched_all_reduce_value("all_reduce", "world", world_, local, ReduceOp::Max);
  return any == 2 ? StopReason::Signal : any == 1 ? StopReason::TimeLimit : StopReason::None;
}

bool StopPolicy::any_rank_signalled() const {
  const int local = g_signal != 0 ? 1 : 0;
  return watched_all_reduce_value("all_reduce", "world", world_, local, ReduceOp::Max) != 0;
}

}  // namespace meshtrain::train
