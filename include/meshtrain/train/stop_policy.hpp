#pragma once
/// \brief When a run must stop early, decided identically on every rank at a step boundary:
/// a SIGUSR1/SIGTERM on any rank (Slurm's --signal=USR1@T before the time limit,
/// scancel --signal, a preemption), or the wall-clock deadline (train.time_limit, or the
/// Slurm job's end time) minus a margin and one step. The trainer then saves a checkpoint
/// of the same step on every rank and exits with kExitPreempted (75), which the Slurm
/// jobscript turns into a requeue.

#include <string>

#include "runtime/mpi_comm.hpp"

namespace meshtrain::train {

/// Installs SIGUSR1 and SIGTERM handlers that only set a flag (async-signal-safe); a second
/// signal while the save runs sets it again and changes nothing. `train` installs them
/// first thing (command_train), before its start-up reads the dataset, loads a checkpoint
/// or measures anything: a signal then (a requeued job's start-up is its slowest part) must
/// end in status 75 like one during training, not kill the rank by the default action.
void install_stop_signal_handlers();
/// The last signal received by this process (0 = none).
int received_stop_signal();

enum class StopReason { None, Signal, TimeLimit };
const char* stop_reason_name(StopReason r);

class StopPolicy {
 public:
  /// Collective over `world`. `process_start` = process_start_seconds() (core/process_start.hpp):
  /// `time_limit` counts from the start of the rank whose process started first, so the
  /// start-up is inside it. Reads the Slurm end time (env SLURM_JOB_END_TIME, or
  /// `squeue -h -j $SLURM_JOB_ID -o %e`) on rank 0 and shares it as seconds left.
  /// `time_limit` and `margin` in seconds (train.time_limit, train.time_limit_margin; 0 = no limit).
  StopPolicy(double time_limit, double margin, double process_start, const MpiComm& world);

  /// Collective over `world`: the same answer on every rank. `step_seconds` = the last
  /// step's duration (the deadline check leaves room for one more step and the save).
  StopReason check(double step_seconds) const;
  /// Collective over `world`, the same all-reduce as check() but of the signal flags alone:
  /// whether any rank received SIGUSR1/SIGTERM, by now (the start-up's signals, before the
  /// first step; the deadline is left to check(), which knows a step's duration).
  bool any_rank_signalled() const;

  /// Seconds of wall-clock budget left (infinity without a deadline).
  double seconds_left() const;
  std::string describe() const;
  /// Seconds from the first rank's process start to this policy's construction: what the
  /// start-up took of train.time_limit.
  double startup_seconds() const { return startup_seconds_; }

 private:
  MpiComm world_;
  double deadline_ = 0;  ///< this rank's now_seconds() scale; 0 = none
  double margin_ = 60;
  double startup_seconds_ = 0;
  std::string source_;
};

}  // namespace meshtrain::train
