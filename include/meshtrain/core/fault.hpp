#pragma once
/// \brief Deterministic fault injection for tests: one environment variable,
/// MESHTRAIN_FAULT, makes a chosen rank die (SIGKILL itself), stall (stop making progress
/// while staying alive), stop (SIGSTOP itself, going on after SIGCONT), see a chosen I/O call
/// fail with EIO or ENOSPC, or see a device allocation fail as out of memory, at a chosen
/// point of the code. The points are compiled in always; a point that is not armed costs
/// one compare of a global (`pass` below). doc/batch.md lists the points.
///
///   MESHTRAIN_FAULT=POINT[:rank=R][:step=S][:after=K][:action=kill|stall|stop|eio|enospc]
///
///   rank=R   only world rank R passes the point (default: every rank)
///   step=S   only while the trainer is at step S (the step being computed, saved or
///            logged, 1-based as in the log; default: any step, and before the first)
///   after=K  fire at the first pass after K passes that matched rank and step (default 0)
///   action   kill (default), stall, stop, eio, enospc (these two: I/O points only),
///            enomem (pool.allocate only)
///
/// The fault fires once per process. It is read once, by `configure_from_environment`
/// (called by the command line before any command runs); a spec that does not parse is a
/// UserError naming the problem.

#include <string>

namespace meshtrain::fault {

/// Where a fault can fire. The names in comments are the spellings of MESHTRAIN_FAULT.
enum class Point : int {
  None = 0,          ///< no point (a caller's "nothing to pass"); never fires
  SaveDataset,       ///< save.dataset: a checkpoint save, before each tensor dataset is written (every rank)
  SaveBeforeRename,  ///< save.before_rename: the .tmp is complete and closed, not yet synced or renamed (every rank)
  SaveAfterRename,   ///< save.after_rename: the .h5 is renamed into place, `latest` not yet replaced (rank 0)
  Collective,        ///< collective: a communicator collective is posted, not yet complete (every rank)
  RecordWrite,       ///< record.write: each run-record file: config.ini, mesh.txt, run.json, summary.json (rank 0)
  MetricsWrite,      ///< metrics.write: each record appended to metrics.jsonl (rank 0)
  PrepareWrite,      ///< prepare.write: each write of a token or loss-mask file by `prepare` (rank 0)
  ConvertWrite,      ///< convert.write: each tensor written into a safetensors file by `convert` (rank 0)
  SaveBackground,    ///< save.background: an asynchronous save's background thread, before each tensor piece it writes (every rank with pieces)
  PoolAllocate,      ///< pool.allocate: each call of the memory pool's underlying allocator (cudaMalloc; every rank)
  TrainStartup,      ///< train.startup: `train`'s start-up, the checkpoint resumed (or the weights initialised), before the run writes (every rank)
};

namespace detail {
extern int g_armed;  ///< the armed Point as int; -1 when nothing is armed (never equals a Point, None included)
int fire(Point p, int step);
extern int g_step;
}  // namespace detail

/// Passes point `p`. When MESHTRAIN_FAULT selects this pass, kill and stall happen here
/// (the call does not return) and eio/enospc/enomem return that errno, which the caller
/// treats as the result of its I/O call or allocation. Returns 0 otherwise.
inline int pass(Point p) { return detail::g_armed == static_cast<int>(p) ? detail::fire(p, detail::g_step) : 0; }
/// As pass, with `step` for `step=S` instead of the trainer's current step: a point passed
/// on another thread (save.background), whose step is that of its save while the trainer
/// has moved on. Only the thread of the armed point counts its passes, so this is safe
/// while the main thread passes other points.
inline int pass_at_step(Point p, int step) {
  return detail::g_armed == static_cast<int>(p) ? detail::fire(p, step) : 0;
}

/// Parses MESHTRAIN_FAULT (unset or empty: nothing armed). UserError on a bad spec.
void configure_from_environment();
/// Arms a spec directly (tests); "" disarms.
void configure(const std::string& spec);
/// The armed spec, "" when none.
std::string armed_spec();
/// The trainer's current step for `step=S` (0 before the first step).
void set_step(int step);

}  // namespace meshtrain::fault
