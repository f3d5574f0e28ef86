#pragma once
/// \brief Communicator over host memory with MPI non-blocking collectives
/// (MPI_Iallgather, MPI_Ireduce_scatter_block, MPI_Iallreduce, MPI_Ibcast).
/// bf16 reductions use user-defined MPI ops that add in float. Avg = Sum then ×1/size.
/// Non-blocking MPI collectives only advance inside MPI calls, so the compute loop calls
/// `progress()` between kernels. Waits honour the collective watchdog.

#include <vector>

#include "comm/communicator.hpp"
#include "runtime/mpi_comm.hpp"

namespace meshtrain {

class MpiCommunicator final : public Communicator {
 public:
  /// `name` identifies the group in watchdog messages ("tp", "dp_shard", ...).
  explicit MpiCommunicator(MpiComm comm, std::string name = "world");
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "mpi"; }
  const std::string& name() const { return name_; }
  const MpiComm& mpi_comm() const { return comm_; }

  Work all_gather_async(const void* send, void* recv, std::size_t count_per_rank,
                        DType dtype) override;
  Work reduce_scatter_async(const void* send, void* recv, std::size_t count_per_rank, DType dtype,
                            ReduceOp op) override;
  Work all_reduce_async(const void* send, void* recv, std::size_t count, DType dtype,
                        ReduceOp op) override;
  Work broadcast_async(void* buffer, std::size_t count, DType dtype, int root) override;
  void barrier() override;
  void progress() override;

  struct Pending;  // one in-flight request (internal)

 private:
  Work post(const char* what, MPI_Request request, void* result, std::size_t result_count,
            DType dtype, ReduceOp op, std::size_t bytes);

  MpiComm comm_;
  std::string name_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<Pending*> in_flight_;  // non-owning; the Work handles own them
};

/// Watchdog for every blocking wait on an MPI request (seconds; <= 0 disables).
void set_collective_timeout(double seconds);
double collective_timeout();

}  // namespace meshtrain
