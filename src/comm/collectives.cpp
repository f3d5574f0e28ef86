#include "comm/collectives.hpp"

#include <chrono>
#include <limits>
#include <thread>
#include <vector>

#include "comm/watchdog.hpp"
#include "core/check.hpp"
#include "core/memory.hpp"
#include "core/error.hpp"

namespace meshtrain {
namespace {

template <class T>
MPI_Datatype datatype() {
  if constexpr (std::is_same_v<T, int>) return MPI_INT;
  if constexpr (std::is_same_v<T, std::int64_t>) return MPI_INT64_T;
  if constexpr (std::is_same_v<T, std::uint64_t>) return MPI_UINT64_T;
  if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Min: return MPI_MIN;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Sum: return MPI_SUM;
    case ReduceOp::Avg: break;
  }
  MESHTRAIN_ASSERT(false, "%s is not a reduction of collectives.hpp", reduce_op_name(op));
  return MPI_SUM;
}

/// MPI counts are int: a larger message would be cut silently.
int checked_count(std::int64_t n) {
  MESHTRAIN_ASSERT(n >= 0 && n <= std::numeric_limits<int>::max(), "message of %lld elements does not fit an MPI count",
                  static_cast<long long>(n));
  return static_cast<int>(n);
}

}  // namespace

template <class T>
void all_reduce_in_place(const MpiComm& comm, T* values, int count, ReduceOp op) {
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values, count, datatype<T>(), mpi_op(op), comm.get()));
}

template <class T>
T all_reduce_value(const MpiComm& comm, T value, ReduceOp op) {
  all_reduce_in_place(comm, &value, 1, op);
  return value;
}

template <class T>
void watched_all_reduce_in_place(const char* what, const std::string& group, const MpiComm& comm, T* values,
                                 int count, ReduceOp op) {
  watched_collective(what, group, comm, [&](MPI_Request* r) {
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, values, count, datatype<T>(), mpi_op(op), comm.get(), r));
  });
}

#define MESHTRAIN_INSTANTIATE_REDUCTIONS(T)                                                                   \
  template T all_reduce_value<T>(const MpiComm&, T, ReduceOp);                                               \
  template void all_reduce_in_place<T>(const MpiComm&, T*, int, ReduceOp);                                   \
  template void watched_all_reduce_in_place<T>(const char*, const std::string&, const MpiComm&, T*, int, ReduceOp);
MESHTRAIN_INSTANTIATE_REDUCTIONS(int)
MESHTRAIN_INSTANTIATE_REDUCTIONS(std::int64_t)
MESHTRAIN_INSTANTIATE_REDUCTIONS(std::uint64_t)
MESHTRAIN_INSTANTIATE_REDUCTIONS(double)
#undef MESHTRAIN_INSTANTIATE_REDUCTIONS

MinMax all_min_max(const MpiComm& comm, double v) {
  double m[2] = {-v, v};
  all_reduce_in_place(comm, m, 2, ReduceOp::Max);
  return {-m[0], m[1]};
}

MinMax watched_all_min_max(const char* what, const std::string& group, const MpiComm& comm, double v) {
  MinMax out;
  watched_all_min_max(what, group, comm, &v, &out, 1);
  return out;
}

void watched_all_min_max(const char* what, const std::string& group, const MpiComm& comm, const double* values,
                         MinMax* out, int count) {
  std::vector<double> m(2 * static_cast<std::size_t>(count));  // (-v0, v0, -v1, v1, ...)
  for (int i = 0; i < count; ++i) {
    m[2 * i] = -values[i];
    m[2 * i + 1] = values[i];
  }
  watched_all_reduce_in_place(what, group, comm, m.data(), 2 * count, ReduceOp::Max);
  for (int i = 0; i < count; ++i) out[i] = {-m[2 * i], m[2 * i + 1]};
}

void broadcast_bytes(const MpiComm& comm, void* data, std::int64_t bytes, int root) {
  if (bytes == 0) return;
  MPI_CHECK(MPI_Bcast(data, checked_count(bytes), MPI_BYTE, root, comm.get()));
}

std::string broadcast_string(const MpiComm& comm, std::string s, int root) {
  auto n = static_cast<std::int64_t>(s.size());
  broadcast_values(comm, &n, 1, root);
  s.resize(static_cast<std::size_t>(n));
  broadcast_bytes(comm, s.data(), n, root);
  return s;
}

void watched_broadcast_bytes(const char* what, const std::string& group, const MpiComm& comm, void* data,
                             std::int64_t bytes, int root) {
  if (bytes == 0) return;
  watched_collective(what, group, comm, [&](MPI_Request* r) {
    MPI_CHECK(MPI_Ibcast(data, checked_count(bytes), MPI_BYTE, root, comm.get(), r));
  });
}

std::string watched_broadcast_string(const char* what, const std::string& group, const MpiComm& comm, std::string s,
                                     int root) {
  auto n = static_cast<std::int64_t>(s.size());
  watched_broadcast_bytes(what, group, comm, &n, sizeof n, root);
  s.resize(static_cast<std::size_t>(n));
  watched_broadcast_bytes(what, group, comm, s.data(), n, root);
  return s;
}

void watched_gather(const char* what, const std::string& group, const MpiComm& comm, const double* mine, int count,
                    double* all, int root) {
  watched_collective(what, group, comm, [&](MPI_Request* r) {
    MPI_CHECK(MPI_Igather(mine, count, MPI_DOUBLE, all, count, MPI_DOUBLE, root, comm.get(), r));
  });
}

void barrier(const MpiComm& comm) { MPI_CHECK(MPI_Barrier(comm.get())); }

void watched_barrier(const char* what, const std::string& group, const MpiComm& comm) {
  watched_collective(what, group, comm, [&](MPI_Request* r) { MPI_CHECK(MPI_Ibarrier(comm.get(), r)); });
}

void sleeping_barrier(const MpiComm& comm) {
  MPI_Request request;
  MPI_CHECK(MPI_Ibarrier(comm.get(), &request));
  for (int done = 0;;) {
    MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool sleeping_barrier_within(const MpiComm& comm, double seconds) {
  MPI_Request request;
  MPI_CHECK(MPI_Ibarrier(comm.get(), &request));
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (int done = 0;;) {
    MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return true;
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::uint64_t exclusive_prefix_sum(const MpiComm& comm, std::uint64_t mine) {
  std::uint64_t below = 0;
  MPI_CHECK(MPI_Exscan(&mine, &below, 1, MPI_UINT64_T, MPI_SUM, comm.get()));
  return comm.rank() == 0 ? 0 : below;  // MPI leaves rank 0's result undefined
}

void exchange_bytes(const MpiComm& comm, int to, const void* send, std::int64_t send_bytes, int from, void* recv,
                    std::int64_t recv_bytes, int tag) {
  MPI_CHECK(MPI_Sendrecv(send, checked_count(send_bytes), MPI_BYTE, to, tag, recv, checked_count(recv_bytes), MPI_BYTE,
                         from, tag, comm.get(), MPI_STATUS_IGNORE));
}

double all_reduce_value(Communicator& comm, double value, ReduceOp op) {
  Buffer<double> v(1, MemCategory::Workspace);
  Kokkos::deep_copy(v.view(), value);
  comm.all_reduce(v.data(), v.data(), 1, DType::F64, op);
  double out = 0;
  Kokkos::deep_copy(out, Kokkos::subview(v.view(), 0));
  return out;
}

}  // namespace meshtrain
