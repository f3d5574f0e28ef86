#pragma once
/// \file
/// \brief Two kinds of failure: user errors (bad config, data, checkpoint) that every
/// rank detects alike and that end the run with one clear sentence and a non-zero exit,
/// and internal faults that abort every rank so that no rank hangs in a collective.

#include <stdexcept>
#include <string>

#include "core/format.hpp"

namespace meshtrain {

/// Exit status for a user error (bad input); documented in doc/running.md.
inline constexpr int kExitUserError = 2;
/// Exit status after a write failed with an I/O error (disk full, quota, EIO):
/// EX_IOERR of sysexits.h. Documented in doc/batch.md.
inline constexpr int kExitIoError = 74;

/// \brief A problem in the user's input. Throw it only where every rank reaches the
/// same decision (or after `agree_on_error`); `main` prints it once on rank 0 and every
/// rank exits with `exit_status()` (2) without a stack dump. One raised by some ranks only
/// (ranks started differently) ends the job from such a rank 30 s later (app/cli.cpp): a
/// safety net against a hang, not a way to report one rank's error.
class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& what, int exit_status = kExitUserError)
      : std::runtime_error(what), exit_status_(exit_status) {}
  /// The status every rank exits with: kExitUserError, or kExitIoError for an IoError.
  int exit_status() const { return exit_status_; }

 private:
  int exit_status_;
};

/// \brief A write that failed with an I/O error (disk full, quota exceeded, EIO) after the
/// run's inputs were validated. Same contract as UserError (every rank throws it alike,
/// rank 0 prints one sentence) but the job exits with kExitIoError.
class IoError : public UserError {
 public:
  explicit IoError(const std::string& what) : UserError(what, kExitIoError) {}
};

/// Exit status after a preemption save (the Slurm script requeues on it).
inline constexpr int kExitPreempted = 75;
/// Exit status of an aborted job (internal fault, too many bad steps). A collective watchdog
/// timeout is kExitPeersLost (comm/peers_lost.hpp), so a supervisor can recover from it.
inline constexpr int kExitAbort = 3;

/// \brief Prints `[meshtrain] rank R (host) <lib> error at file:line: message` and aborts
/// every rank of the job (through the function registered with `set_abort_context`: the
/// runtime's MPI_Abort). Never returns.
[[noreturn]] void fatal(const char* library, const std::string& message, const char* call,
                        const char* file, int line);

/// Ends every rank of the job with the exit status given; returns only when it cannot
/// (MPI not initialised or already finalised), and the caller then exits alone.
using AbortAllRanks = void (*)(int code);
/// \brief Registers how `fatal` ends every rank (runtime's `abort_all_ranks`) and the rank
/// it prints. Called once by main (the only place that knows MPI_COMM_WORLD).
void set_abort_context(AbortAllRanks abort_all, int world_rank);

/// \brief Aborts the whole job with `code` after printing `message` (watchdog, NaN limit).
[[noreturn]] void abort_job(const std::string& message, int code = kExitAbort);
/// \brief Aborts the whole job with `code` as abort_job does, printing nothing: for a caller
/// that has printed why in the form the user expects (a UserError's one error line).
[[noreturn]] void abort_job_silently(int code);

/// The world rank registered by main (0 before registration).
int world_rank();

/// This machine's host name (gethostname), "unknown-host" when it has none.
std::string host_name();

}  // namespace meshtrain

/// Throws UserError when `cond` is false; the message is printf-formatted.
#define MESHTRAIN_REQUIRE(cond, ...)                                      \
  do {                                                                    \
    if (!(cond)) throw ::meshtrain::UserError(::meshtrain::strprintf(__VA_ARGS__)); \
  } while (0)

/// Internal invariant: aborts every rank when violated (a bug, not bad input).
#define MESHTRAIN_ASSERT(cond, ...)                                                     \
  do {                                                                                  \
    if (!(cond))                                                                        \
      ::meshtrain::fatal("meshtrain", ::meshtrain::strprintf(__VA_ARGS__), #cond, __FILE__, \
                         __LINE__);                                                     \
  } while (0)
