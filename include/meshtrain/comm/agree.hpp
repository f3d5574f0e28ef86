#pragma once
/// \brief Turns a user error seen by some ranks into the same UserError on every rank, so
/// that every rank exits cleanly instead of the others hanging in their next collective.

#include <functional>

#include "runtime/mpi_comm.hpp"

namespace meshtrain {

/// Runs `fn` on every rank of `comm`. If it throws UserError on any rank, every rank
/// throws UserError with the message and exit status (2, or 74 for an IoError) of the
/// lowest such rank. Collective. With `watch_group`, the agreement is a collective of that
/// watchdog group (see watchdog.hpp): a rank that stalls inside `fn` (a write on rank 0
/// while the others wait) ends the job after parallel.collective_timeout instead of
/// hanging it; every rank must then pass the same group.
void agree_on_errors(const MpiComm& comm, const std::function<void()>& fn, const char* watch_group = nullptr);

}  // namespace meshtrain
