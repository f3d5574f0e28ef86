#pragma once
/// \brief Turns a user error seen by some ranks into the same UserError on every rank, so
/// that every rank exits cleanly instead of the others hanging in their next collective.

#include <functional>

#include "meshtrain/runtime/mpi_comm.hpp"

namespace meshtrain {

/// Runs `fn` on every rank of `comm`. If it throws UserError on any rank, every rank
/// throws UserError with the message of the lowest such rank. Collective, under the
/// collective watchdog (group "world": call it on the world communicator, in the same
/// order on every rank).
void agree_on_errors(const MpiComm& comm, const std::function<void()>& fn);

}  // namespace meshtrain
