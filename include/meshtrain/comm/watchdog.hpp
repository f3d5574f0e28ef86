#pragma once
/// \brief Collective watchdog: a rank that waits longer than `parallel.collective_timeout`
/// for a collective aborts the whole job with a message naming the collective, its
/// group, and the group members that never entered it.
///
/// Each rank publishes, per communicator group, how many collectives it has entered,
/// in an MPI shared-memory window on its node. A waiting rank that times out reads its
/// node-local peers' counters: a peer whose counter is behind has not arrived (stalled or
/// dead). Peers on other nodes cannot be inspected and are listed as such, by host.
///
/// Calls that block inside MPI without a request to poll (the collective HDF5 calls of a
/// checkpoint save) are watched by a monitor thread instead: see WatchedBlockingCall.

#include <cstdint>
#include <functional>
#include <string>

#include "runtime/mpi_comm.hpp"

namespace meshtrain {

/// Collective over `world`; call once after MPI init (main and the test main do).
/// Safe to skip: the watchdog then still times out but cannot name absent ranks.
void watchdog_init(const MpiComm& world);
/// Frees the shared window (before MPI_Finalize).
void watchdog_finalize();

/// Records that this rank entered the next collective of `group`; returns its number.
std::uint64_t watchdog_enter(const std::string& group);
void watchdog_leave(const std::string& group, std::uint64_t sequence);

/// Polls `done` until it returns true; past the timeout, diagnoses and aborts the job.
void watchdog_wait(const char* what, const std::string& group, std::uint64_t sequence,
                   const MpiComm& group_comm, const std::function<bool()>& done);

/// \brief A blocking collective outside a Communicator (the step-boundary stop decision,
/// metric reductions) under the watchdog: records the entry into `group`, lets `post`
/// start the non-blocking MPI call (MPI_Iallreduce, ...) on `comm`, and waits for it like
/// a Communicator collective. Without it a rank that stalls at a step boundary would leave
/// the others in a plain MPI_Allreduce forever.
void watched_collective(const char* what, const std::string& group, const MpiComm& comm,
                        const std::function<void(MPI_Request*)>& post);

/// \brief A blocking collective call that cannot be polled -- HDF5's collective MPI-IO
/// (file create, dataset create and write, close) -- under the watchdog, for its lifetime:
/// the constructor enters the next collective of `group` (every member of `comm` must
/// construct one for the same call, in the same order) and arms a monitor thread; if the
/// object still exists after parallel.collective_timeout, the monitor names the members
/// that never entered the call and aborts the job (status 3), as watchdog_wait does.
/// Members that entered it are blocked in the same call and cannot be told from stalled
/// ones, so only absent members are named.
class WatchedBlockingCall {
 public:
  WatchedBlockingCall(const char* what, const std::string& group, const MpiComm& comm);
  ~WatchedBlockingCall();
  WatchedBlockingCall(const WatchedBlockingCall&) = delete;
  WatchedBlockingCall& operator=(const WatchedBlockingCall&) = delete;

 private:
  bool armed_ = false;
};

}  // namespace meshtrain
