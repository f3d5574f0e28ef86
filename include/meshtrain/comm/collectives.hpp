#pragma once
/// \brief The small collectives every module needs -- a scalar's min/max/sum over ranks, a
/// broadcast of a few values or of a string, a barrier, a prefix sum -- so that MPI is
/// called only in comm/ and runtime/ (doc/architecture.md). The plain ones block and are
/// meant for start-up, checkpoint bookkeeping and benchmarks; the `watched_` ones run under
/// the collective watchdog (watchdog.hpp) and are for step boundaries and saves, where a
/// stalled rank must end the job instead of hanging it.
///
/// Value types: int, std::int64_t, std::uint64_t, double (the reductions); any trivially
/// copyable type (the broadcasts, as bytes).

#include <cstdint>
#include <string>
#include <type_traits>

#include "comm/communicator.hpp"
#include "runtime/mpi_comm.hpp"

namespace meshtrain {

// ReduceOp (communicator.hpp): Min, Max and Sum here; Avg is the Communicator's alone.

/// Every rank of `comm` gets op(values of all ranks).
template <class T>
T all_reduce_value(const MpiComm& comm, T value, ReduceOp op);
/// op of a double over the tensor communicator (MPI or NCCL, the run's backend), through a
/// one-element device buffer: NCCL reduces device memory only. For sums that must ride the
/// same communicator as the tensors they summarise (the gradient norm, the loss).
double all_reduce_value(Communicator& comm, double value, ReduceOp op);
/// Element-wise over `count` values, in place.
template <class T>
void all_reduce_in_place(const MpiComm& comm, T* values, int count, ReduceOp op);
/// As all_reduce_in_place, under the watchdog as collective `what` of `group`.
template <class T>
void watched_all_reduce_in_place(const char* what, const std::string& group, const MpiComm& comm, T* values,
                                 int count, ReduceOp op);
template <class T>
T watched_all_reduce_value(const char* what, const std::string& group, const MpiComm& comm, T value, ReduceOp op) {
  watched_all_reduce_in_place(what, group, comm, &value, 1, op);
  return value;
}

/// The smallest and largest of a value over the ranks.
struct MinMax {
  double min = 0, max = 0;
};
/// One max-reduction of (-v, v): negation is exact, so -max(-v) == min(v).
MinMax all_min_max(const MpiComm& comm, double v);
/// As all_min_max, under the watchdog as collective `what` of `group`.
MinMax watched_all_min_max(const char* what, const std::string& group, const MpiComm& comm, double v);
/// Element-wise over `count` values, still one reduction (of 2 x count doubles).
void watched_all_min_max(const char* what, const std::string& group, const MpiComm& comm, const double* values,
                         MinMax* out, int count);

/// Rank `root`'s `count` values (bytes of a trivially copyable type) on every rank.
void broadcast_bytes(const MpiComm& comm, void* data, std::int64_t bytes, int root);
template <class T>
void broadcast_values(const MpiComm& comm, T* values, int count, int root = 0) {
  static_assert(std::is_trivially_copyable_v<T>, "broadcast_values sends bytes");
  broadcast_bytes(comm, values, static_cast<std::int64_t>(sizeof(T)) * count, root);
}
template <class T>
T broadcast_value(const MpiComm& comm, T value, int root = 0) {
  broadcast_values(comm, &value, 1, root);
  return value;
}
/// Rank `root`'s string on every rank (the length first, then the bytes).
std::string broadcast_string(const MpiComm& comm, std::string s, int root = 0);
/// As broadcast_bytes / broadcast_string, under the watchdog as collective `what` of `group`.
void watched_broadcast_bytes(const char* what, const std::string& group, const MpiComm& comm, void* data,
                             std::int64_t bytes, int root);
std::string watched_broadcast_string(const char* what, const std::string& group, const MpiComm& comm, std::string s,
                                     int root = 0);

/// Gathers `count` doubles of every rank into `all` (size count x comm.size(), rank order)
/// on `root`, under the watchdog.
void watched_gather(const char* what, const std::string& group, const MpiComm& comm, const double* mine, int count,
                    double* all, int root);

void barrier(const MpiComm& comm);
void watched_barrier(const char* what, const std::string& group, const MpiComm& comm);
/// A barrier in which waiting ranks sleep (1 ms polls) instead of spinning: Open MPI
/// busy-polls a blocking collective, which would take the cores others are measuring.
void sleeping_barrier(const MpiComm& comm);
/// \brief A sleeping barrier that gives up: true when every rank of `comm` entered it within
/// `seconds` of this rank (at once when they already wait in it), false past that. On false
/// the barrier stays posted (MPI cannot cancel a collective) and `comm` is spent: a later
/// collective on it would pair with the other ranks' calls out of order. So use it only on a
/// communicator of its own (Runtime::error_agreement) and, on false, end the job.
bool sleeping_barrier_within(const MpiComm& comm, double seconds);

/// The sum of `mine` over the ranks below this one (0 on rank 0).
std::uint64_t exclusive_prefix_sum(const MpiComm& comm, std::uint64_t mine);

/// Sends `send_bytes` to rank `to` while receiving up to `recv_bytes` from rank `from`
/// (both of `comm`, with message tag `tag`).
void exchange_bytes(const MpiComm& comm, int to, const void* send, std::int64_t send_bytes, int from, void* recv,
                    std::int64_t recv_bytes, int tag);

}  // namespace meshtrain
