#pragma once
/// \brief Communicator over device memory with NCCL.
///
/// Construction is collective over the MPI group: rank 0 creates the `ncclUniqueId`,
/// `MPI_Bcast` shares it, every rank calls `ncclCommInitRank` on its device.
/// Each collective runs on a dedicated comm stream: an event recorded on the compute
/// stream makes the comm stream wait for the producer kernels; a second event recorded
/// after the collective is what `Work::wait()` makes the compute stream wait on. No host
/// synchronisation on the data path (ARCHITECTURE.md, "On GPUs ..."). Timing events bracket
/// each collective on the comm stream and each wait on the compute stream; their intervals
/// are read later, without blocking (comm/interval_ledger.hpp). Under a CUDA graph capture
/// of the compute stream the same calls build the graph's nodes, untimed.
///
/// Only built where the CUDA toolkit and NCCL exist (CUDA builds; CPU builds compile and
/// link it as a check). Streams are passed as opaque `void*` (a `cudaStream_t`) so this
/// header needs no CUDA include.

#include <memory>
#include <string>

#include "comm/communicator.hpp"
#include "runtime/mpi_comm.hpp"

namespace meshtrain {

class NcclCommunicator final : public Communicator {
 public:
  /// `compute_stream` is the stream the kernels run on (Kokkos' CUDA stream; nullptr =
  /// the legacy default stream).
  NcclCommunicator(const MpiComm& group, std::string name, void* compute_stream);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "nccl"; }

  Work all_gather_async(const void* send, void* recv, std::size_t count_per_rank,
                        DType dtype) override;
  Work reduce_scatter_async(const void* send, void* recv, std::size_t count_per_rank, DType dtype,
                            ReduceOp op) override;
  Work all_reduce_async(const void* send, void* recv, std::size_t count, DType dtype,
                        ReduceOp op) override;
  Work broadcast_async(void* buffer, std::size_t count, DType dtype, int root) override;
  void barrier() override;
  /// Accounts the device-timed intervals that have finished (comm_stats().device, per step
  /// tag); NCCL needs no host progress otherwise.
  void progress() override;

  /// Seconds of the intervals that finished since the last drain: collectives on the comm
  /// stream (busy) and the compute stream's waits for them (exposed), both from events,
  /// also added to comm_stats().device under the tags that issued them; never blocks.
  double drain_busy_seconds();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  std::string name_;
  int rank_ = 0;
  int size_ = 1;
};

/// NCCL version "2.27.7" (compile-time header version).
std::string nccl_version_string();

}  // namespace meshtrain
