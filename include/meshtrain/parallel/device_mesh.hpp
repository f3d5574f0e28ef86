#pragma once
/// \brief The device mesh of a job, built once: world = dp_replicate x dp_shard x tp (tp
/// fastest-varying, runtime/mesh.hpp) and one `MeshDim` per group -- world, tp, dp_shard,
/// dp_replicate and dp = dp_replicate x dp_shard. Each dimension owns its MPI
/// sub-communicator (the small collectives, HDF5's MPI-IO), its `Communicator` on the run's
/// backend (tensors: MPI on host builds, NCCL on CUDA builds), its rank and size, and the
/// small collectives every module needs, under the collective watchdog. Whoever talks to
/// other ranks takes the dimension it talks over from here (torchtitan's DeviceMesh, for
/// this project's three axes).

#include <functional>
#include <memory>
#include <string>

#include "comm/collectives.hpp"
#include "comm/communicator.hpp"
#include "config/choices.hpp"
#include "runtime/mesh.hpp"
#include "runtime/mpi_comm.hpp"

namespace meshtrain::parallel {

/// \brief One dimension of the mesh: the ranks that share every other coordinate.
///
/// The collectives here block, run under the watchdog as collectives of the group `name()`
/// (a rank that never arrives ends the job after parallel.collective_timeout, naming it),
/// and must be entered by every member of the dimension in the same order. `what` names
/// the call in the watchdog's message.
class MeshDim {
 public:
  /// Wraps `mpi` (already split) and makes its Communicator on `backend`.
  MeshDim(std::string name, MpiComm mpi, Backend backend);
  MeshDim(const MeshDim&) = delete;
  MeshDim& operator=(const MeshDim&) = delete;

  /// "world", "tp", "dp_shard", "dp_replicate" or "dp": also the watchdog group.
  const std::string& name() const { return name_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// The MPI sub-communicator (small collectives, MPI-IO).
  const MpiComm& mpi() const { return mpi_; }
  /// The tensor communicator on the run's backend (MPI or NCCL).
  Communicator& comm() const { return *comm_; }

  /// The sum, smallest or largest of `v` over the dimension (int, int64, uint64, double).
  template <class T>
  T sum(T v, const char* what = "all_reduce") const {
    return watched_all_reduce_value(what, name_, mpi_, v, ReduceOp::Sum);
  }
  template <class T>
  T min(T v, const char* what = "all_reduce") const {
    return watched_all_reduce_value(what, name_, mpi_, v, ReduceOp::Min);
  }
  template <class T>
  T max(T v, const char* what = "all_reduce") const {
    return watched_all_reduce_value(what, name_, mpi_, v, ReduceOp::Max);
  }
  /// Both at once, one reduction (comm/collectives.hpp, all_min_max).
  MinMax min_max(double v, const char* what = "all_reduce") const;
  /// Element-wise over `count` values, still one reduction.
  void min_max(const double* values, MinMax* out, int count, const char* what = "all_reduce") const;
  /// Rank `root`'s string on every rank of the dimension.
  std::string broadcast_string(std::string s, int root = 0, const char* what = "broadcast") const;
  /// Runs `fn` on every rank; a UserError on some ranks becomes the same UserError on all
  /// (comm/agree.hpp), under the watchdog as a collective of this dimension.
  void agree_on_error(const std::function<void()>& fn) const;

 private:
  std::string name_;
  MpiComm mpi_;
  std::unique_ptr<Communicator> comm_;
  int rank_ = 0, size_ = 1;
};

/// \brief The mesh of a job over `world`: its shape, this rank's coordinates and the five
/// dimensions. Collective over `world` (it splits it and creates every communicator).
/// Neither copied nor moved: the FSDP engine and the model's compute context hold
/// references to its dimensions.
class DeviceMesh {
 public:
  /// `backend`: parallel.backend (UserError when NCCL is requested in a build without
  /// CUDA, or MPI in a CUDA build).
  DeviceMesh(const MpiComm& world, const MeshShape& shape, Backend backend);
  DeviceMesh(const DeviceMesh&) = delete;
  DeviceMesh& operator=(const DeviceMesh&) = delete;

  const MeshShape& shape() const { return shape_; }
  const MeshCoord& coord() const { return coord_; }
  /// Data-parallel index of this rank, 0..dp()-1 (= replicate * dp_shard + shard).
  int dp_rank() const { return coord_.replicate * shape_.dp_shard + coord_.shard; }

  /// Every rank of the job.
  const MeshDim& world() const { return *world_; }
  /// Ranks with the same (replicate, shard): one tensor-parallel group.
  const MeshDim& tp() const { return *tp_; }
  /// Ranks with the same (replicate, tp): the FSDP shard group.
  const MeshDim& dp_shard() const { return *dp_shard_; }
  /// Ranks with the same (shard, tp): the replicate group (hybrid sharding).
  const MeshDim& dp_replicate() const { return *dp_replicate_; }
  /// Ranks with the same tp: all data-parallel ranks (replicate x shard).
  const MeshDim& dp() const { return *dp_; }
  /// The dimension called `name` (as MeshDim::name()); nullptr for any other word.
  const MeshDim* find(const std::string& name) const;

  /// Polls every dimension's Communicator (drives MPI non-blocking collectives).
  void progress() const;
  /// "mpi" or "nccl".
  const char* backend() const { return world_->comm().backend(); }

 private:
  MeshShape shape_;
  MeshCoord coord_;
  std::unique_ptr<MeshDim> world_, tp_, dp_shard_, dp_replicate_, dp_;
};

/// A Communicator over an arbitrary MPI group on the chosen backend (the cost model's
/// measurements; DeviceMesh uses it for its dimensions).
std::unique_ptr<Communicator> make_communicator(const MpiComm& comm, const std::string& name, Backend backend);

}  // namespace meshtrain::parallel
