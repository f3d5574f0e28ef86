#include "meshtrain/parallel/comm_groups.hpp"

#include "meshtrain/comm/mpi_communicator.hpp"
#include "meshtrain/core/error.hpp"
#include "meshtrain/core/views.hpp"

#if defined(MESHTRAIN_WITH_CUDA)
#include "meshtrain/comm/nccl_communicator.hpp"
#endif

namespace meshtrain::parallel {

std::unique_ptr<Communicator> make_communicator(const MpiComm& comm, const std::string& name,
                                                Backend backend) {
#if defined(MESHTRAIN_WITH_CUDA)
  if (backend == Backend::Auto || backend == Backend::Nccl)
    return std::make_unique<NcclCommunicator>(comm, name, ExecSpace().cuda_stream());
  throw UserError("parallel.backend=mpi is not supported in a CUDA build: device buffers need NCCL "
                  "(use parallel.backend=auto or nccl)");
#else
  MESHTRAIN_REQUIRE(backend != Backend::Nccl,
                    "parallel.backend=nccl needs a CUDA build of meshtrain (cmake --preset cuda); this "
                    "build runs on the host: use parallel.backend=auto or mpi");
  return std::make_unique<MpiCommunicator>(comm, name);
#endif
}

CommGroups make_comm_groups(const Mesh& mesh, Backend backend) {
  CommGroups g;
  g.world = make_communicator(mesh.world(), "world", backend);
  g.tp = make_communicator(mesh.tp_group(), "tp", backend);
  g.shard = make_communicator(mesh.shard_group(), "dp_shard", backend);
  g.replicate = make_communicator(mesh.replicate_group(), "dp_replicate", backend);
  g.dp = make_communicator(mesh.dp_group(), "dp", backend);
  return g;
}

void CommGroups::progress() const {
  for (Communicator* c : {world.get(), tp.get(), shard.get(), replicate.get(), dp.get()})
    if (c) c->progress();
}

}  // namespace meshtrain::parallel
