#pragma once
/// \brief The `Communicator` interface: how tensors (the FSDP/TP data path) move between
/// ranks; small host values (scalars, strings, agreement) go through collectives.hpp. No
/// code outside comm/ and runtime/ calls MPI. Backends: `MpiCommunicator` (host memory, non-blocking MPI collectives) and
/// `NcclCommunicator` (device memory, a comm stream ordered against the compute stream
/// with events). Every collective exists blocking and async; async ones return a
/// `Work` handle that must be waited on before the buffers are touched.
///
/// Buffers are raw pointers to `count` elements of `dtype` in the backend's memory
/// space (host for MPI, device for NCCL). Counts are per rank where the name says so.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "comm/interval_ledger.hpp"

namespace meshtrain {

enum class DType : int { F32, BF16, F64, I32, I64, U8 };
enum class ReduceOp : int { Sum, Avg, Max, Min };

std::size_t dtype_size(DType t);
const char* dtype_name(DType t);
const char* reduce_op_name(ReduceOp op);

/// Maps C++ scalar types to DType (float, double, bf16, int32_t, int64_t, uint8_t).
template <class T> struct DTypeOf;

/// \brief Backend-specific state of one in-flight collective.
class WorkImpl {
 public:
  virtual ~WorkImpl() = default;
  /// Non-blocking progress; true once the operation has completed.
  virtual bool test() = 0;
  /// Blocks (host) or orders the compute stream (device) until complete.
  virtual void wait() = 0;
};

/// \brief Handle to an async collective. Default-constructed = already complete.
/// Destroying an unwaited handle waits (so buffers are never freed under a transfer).
class Work {
 public:
  Work() = default;
  explicit Work(std::unique_ptr<WorkImpl> impl) : impl_(std::move(impl)) {}
  Work(Work&&) noexcept = default;
  Work& operator=(Work&& o) noexcept {
    if (this != &o) {
      wait();
      impl_ = std::move(o.impl_);
    }
    return *this;
  }
  ~Work() { wait(); }

  void wait() {
    if (impl_) {
      impl_->wait();
      impl_.reset();
    }
  }
  bool test() {
    if (impl_ && impl_->test()) {
      impl_->wait();  // completes bookkeeping (e.g. the 1/size scaling of Avg)
      impl_.reset();
    }
    return !impl_;
  }
  bool pending() const { return impl_ != nullptr; }

 private:
  std::unique_ptr<WorkImpl> impl_;
};

/// Time and volume spent in collectives, accumulated per process (all communicators).
struct CommStats {
  double exposed_seconds = 0;   ///< host time blocked in wait()/blocking calls (MPI; NCCL's barrier)
  double busy_seconds = 0;      ///< MPI: post-to-completion time of every collective (host clock)
  std::uint64_t bytes = 0;      ///< bytes sent+received per rank (algorithmic volume)
  std::uint64_t operations = 0;
  /// The step tag that device-timed intervals issued from now on carry (the trainer sets
  /// its 0-based step before issuing a step).
  std::uint64_t tag = 0;
  /// NCCL: device-timed seconds per tag (busy: the collectives on the comm stream; exposed:
  /// the compute stream waiting for them), added as the communicators' ledgers account
  /// their events (comm/interval_ledger.hpp); the MPI backend measures on the host instead
  /// (the two fields above) and adds nothing here.
  std::map<std::uint64_t, DeviceCommTimes> device;
};
CommStats& comm_stats();
/// The device-timed seconds accounted for `tag` (zero when none), forgetting that tag and
/// every older one (intervals of a tag already taken, e.g. an evaluation's, are dropped).
DeviceCommTimes take_device_comm_times(std::uint64_t tag);

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "mpi" or "nccl".
  virtual const char* backend() const = 0;

  /// recv[r*count .. (r+1)*count) = send of rank r. In place when send == recv + rank*count.
  virtual Work all_gather_async(const void* send, void* recv, std::size_t count_per_rank,
                                DType dtype) = 0;
  /// recv (count_per_rank) = op over ranks of send[rank*count .. (rank+1)*count).
  /// In place when recv == send + rank*count (NCCL's convention); the other blocks of
  /// send are then undefined afterwards.
  virtual Work reduce_scatter_async(const void* send, void* recv, std::size_t count_per_rank,
                                    DType dtype, ReduceOp op) = 0;
  /// In place when send == recv.
  virtual Work all_reduce_async(const void* send, void* recv, std::size_t count, DType dtype,
                                ReduceOp op) = 0;
  virtual Work broadcast_async(void* buffer, std::size_t count, DType dtype, int root) = 0;
  virtual void barrier() = 0;
  /// Drives outstanding non-blocking operations (MPI needs this between kernels;
  /// NCCL progresses on its own stream).
  virtual void progress() {}

  void all_gather(const void* send, void* recv, std::size_t count_per_rank, DType dtype) {
    all_gather_async(send, recv, count_per_rank, dtype).wait();
  }
  void reduce_scatter(const void* send, void* recv, std::size_t count_per_rank, DType dtype,
                      ReduceOp op) {
    reduce_scatter_async(send, recv, count_per_rank, dtype, op).wait();
  }
  void all_reduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op) {
    all_reduce_async(send, recv, count, dtype, op).wait();
  }
  void broadcast(void* buffer, std::size_t count, DType dtype, int root) {
    broadcast_async(buffer, count, dtype, root).wait();
  }

  /// Typed conveniences.
  template <class T>
  void all_reduce_inplace(T* data, std::size_t count, ReduceOp op) {
    all_reduce(data, data, count, DTypeOf<T>::value, op);
  }
};

struct bf16;  // meshtrain/core/bf16.hpp (kept out of this header: NCCL code builds without Kokkos)
template <> struct DTypeOf<float> { static constexpr DType value = DType::F32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::F64; };
template <> struct DTypeOf<bf16> { static constexpr DType value = DType::BF16; };
template <> struct DTypeOf<std::int32_t> { static constexpr DType value = DType::I32; };
template <> struct DTypeOf<std::int64_t> { static constexpr DType value = DType::I64; };
template <> struct DTypeOf<std::uint8_t> { static constexpr DType value = DType::U8; };
}  // namespace meshtrain
