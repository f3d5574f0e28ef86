#pragma once
/// \brief One Communicator per mesh group (world, tp, dp_shard, dp_replicate, dp), on the
/// chosen backend (MPI on host builds; NCCL on CUDA builds unless parallel.backend=mpi).

#include <memory>
#include <string>

#include "meshtrain/comm/communicator.hpp"
#include "meshtrain/config/choices.hpp"
#include "meshtrain/runtime/mesh.hpp"

namespace meshtrain::parallel {

struct CommGroups {
  std::unique_ptr<Communicator> world;
  std::unique_ptr<Communicator> tp;
  std::unique_ptr<Communicator> shard;
  std::unique_ptr<Communicator> replicate;
  std::unique_ptr<Communicator> dp;

  /// Polls every group (drives MPI non-blocking collectives).
  void progress() const;
  /// "mpi" or "nccl".
  std::string backend() const { return world ? world->backend() : "none"; }
};

/// Creates the groups of `mesh`; `backend`: parallel.backend (UserError when NCCL is
/// requested in a build without CUDA).
CommGroups make_comm_groups(const Mesh& mesh, Backend backend);

/// A communicator over an arbitrary MPI group on the chosen backend.
std::unique_ptr<Communicator> make_communicator(const MpiComm& comm, const std::string& name,
                                                Backend backend);

}  // namespace meshtrain::parallel
