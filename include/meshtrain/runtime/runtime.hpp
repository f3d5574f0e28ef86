#pragma once
/// \brief RAII process runtime: `MPI_Init_thread` then Kokkos initialize (device =
/// node-local rank mod visible devices); on destruction the memory pool is trimmed,
/// Kokkos finalized, then MPI finalized — the order both libraries require.

#include <mpi.h>

#include "runtime/mpi_comm.hpp"
#include "runtime/topology.hpp"

namespace meshtrain {

class Runtime {
 public:
  /// `world` is the job's world communicator handle (MPI_COMM_WORLD, passed by main);
  /// it is duplicated after MPI_Init_thread.
  Runtime(int& argc, char**& argv, MPI_Comm world);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const MpiComm& world() const { return world_; }
  /// \brief Another duplicate of the world, for one collective only: the barrier of the
  /// command line's user-error exit (app/cli.cpp), by which the ranks that raised a UserError
  /// learn whether every rank did. Nothing else posts on it, so that barrier pairs only with
  /// the same barrier of another rank, never with a collective a rank still busy with the
  /// command has posted (as it could on `world()`).
  const MpiComm& error_agreement() const { return error_agreement_; }
  const Topology& topology() const { return topology_; }
  /// Device this rank uses (-1 on host-only builds).
  int device_id() const { return device_id_; }
  int mpi_thread_level() const { return thread_level_; }

 private:
  MpiComm world_;
  MpiComm error_agreement_;
  Topology topology_;
  int device_id_ = -1;
  int thread_level_ = 0;
};

/// MPI_Abort on the world the Runtime was made for (every rank ends with `code`); returns
/// without doing anything before MPI_Init or after MPI_Finalize. Registered with
/// set_abort_context (core/error.hpp) by main.
void abort_all_ranks(int code);

/// The algorithm Open MPI's non-blocking all-reduce (libnbc's MPI_Iallreduce, which the MPI
/// communicator calls) runs in this process: Rabenseifner's reduce-scatter by recursive
/// halving then all-gather by recursive doubling, which the Runtime selects before
/// MPI_Init; or what the user chose instead with OMPI_MCA_coll_libnbc_iallreduce_algorithm
/// (a ring, or libnbc's own choice: a binomial tree for an in-place buffer; recursive
/// doubling is modelled as that tree too). The cost model times all-reduces by it.
enum class MpiAllReduce { BinomialTree, Ring, HalvingDoubling };
MpiAllReduce mpi_all_reduce_algorithm();
/// "halving-doubling", "ring" or "binomial tree".
const char* describe(MpiAllReduce a);

/// "Open MPI v4.1.4, ..." from MPI_Get_library_version (first line).
std::string mpi_library_version();

}  // namespace meshtrain
