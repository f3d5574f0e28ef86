#include "parallel/device_mesh.hpp"

#include "comm/agree.hpp"
#include "comm/mpi_communicator.hpp"
#include "core/check.hpp"
#include "core/error.hpp"
#include "core/views.hpp"

#if defined(MESHTRAIN_WITH_CUDA)
#include "comm/nccl_communicator.hpp"
#endif

namespace meshtrain::parallel {

std::unique_ptr<Communicator> make_communicator(const MpiComm& comm, const std::string& name, Backend backend) {
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

// ---- MeshDim ---------------------------------------------------------------------------------

MeshDim::MeshDim(std::string name, MpiComm mpi, Backend backend)
    : name_(std::move(name)), mpi_(std::move(mpi)), comm_(make_communicator(mpi_, name_, backend)),
      rank_(mpi_.rank()), size_(mpi_.size()) {}

MinMax MeshDim::min_max(double v, const char* what) const { return watched_all_min_max(what, name_, mpi_, v); }

void MeshDim::min_max(const double* values, MinMax* out, int count, const char* what) const {
  watched_all_min_max(what, name_, mpi_, values, out, count);
}

std::string MeshDim::broadcast_string(std::string s, int root, const char* what) const {
  return watched_broadcast_string(what, name_, mpi_, std::move(s), root);
}

void MeshDim::agree_on_error(const std::function<void()>& fn) const { agree_on_errors(mpi_, fn, name_.c_str()); }

// ---- DeviceMesh ------------------------------------------------------------------------------

DeviceMesh::DeviceMesh(const MpiComm& world, const MeshShape& shape, Backend backend)
    : shape_(shape), coord_(mesh_coord(shape, world.rank())) {
  MESHTRAIN_ASSERT(shape.world() == world.size(), "mesh %s does not match %d ranks", shape.str().c_str(),
                   world.size());
  const MeshCoord& c = coord_;
  // Every split first, then every Communicator, each in this order on every rank: NCCL's
  // communicator creation is collective, and a checkpoint made before this class existed
  // was written by ranks that created them in exactly this order.
  // color = the coordinates that stay fixed within the group; key = position in the group.
  MpiComm tp = world.split(c.replicate * shape.dp_shard + c.shard, c.tp);
  MpiComm shard = world.split(c.replicate * shape.tp + c.tp, c.shard);
  MpiComm replicate = world.split(c.shard * shape.tp + c.tp, c.replicate);
  MpiComm dp = world.split(c.tp, c.replicate * shape.dp_shard + c.shard);
  world_ = std::make_unique<MeshDim>("world", world, backend);
  tp_ = std::make_unique<MeshDim>("tp", std::move(tp), backend);
  dp_shard_ = std::make_unique<MeshDim>("dp_shard", std::move(shard), backend);
  dp_replicate_ = std::make_unique<MeshDim>("dp_replicate", std::move(replicate), backend);
  dp_ = std::make_unique<MeshDim>("dp", std::move(dp), backend);
}

const MeshDim* DeviceMesh::find(const std::string& name) const {
  for (const MeshDim* d : {world_.get(), tp_.get(), dp_shard_.get(), dp_replicate_.get(), dp_.get()})
    if (d->name() == name) return d;
  return nullptr;
}

void DeviceMesh::progress() const {
  for (const MeshDim* d : {world_.get(), tp_.get(), dp_shard_.get(), dp_replicate_.get(), dp_.get()})
    d->comm().progress();
}

}  // namespace meshtrain::parallel
