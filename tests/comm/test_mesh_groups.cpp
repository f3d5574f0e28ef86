// Sub-communicators of the device mesh: for every valid shape at this rank count, each
// group (tp, dp_shard, dp_replicate, dp) has the members mesh_coord/mesh_rank say it
// has, in mesh order, and a collective inside each group stays inside it.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "meshtrain/comm/mpi_communicator.hpp"
#include "meshtrain/runtime/mesh.hpp"
#include "test_support.hpp"

using namespace meshtrain;

namespace {

/// Every (dp_replicate, dp_shard, tp) with product `world`, e.g. at 4 ranks:
/// 1x1x4, 1x2x2, 1x4x1, 2x1x2, 2x2x1, 4x1x1.
std::vector<MeshShape> all_shapes(int world) {
  std::vector<MeshShape> out;
  for (int r = 1; r <= world; ++r)
    for (int s = 1; s <= world; ++s)
      for (int t = 1; t <= world; ++t)
        if (r * s * t == world) out.push_back({r, s, t});
  return out;
}

/// World ranks of the group of `me` along one mesh axis, in group-rank order.
std::vector<int> expected_members(const MeshShape& shape, int me, const char* axis) {
  const MeshCoord c = mesh_coord(shape, me);
  std::vector<int> ranks;
  const std::string a = axis;
  if (a == "dp") {
    // Same tp coordinate; ordered by the data-parallel index replicate*dp_shard+shard.
    for (int rep = 0; rep < shape.dp_replicate; ++rep)
      for (int sh = 0; sh < shape.dp_shard; ++sh) ranks.push_back(mesh_rank(shape, {rep, sh, c.tp}));
    return ranks;
  }
  const int n = a == "tp" ? shape.tp : a == "dp_shard" ? shape.dp_shard : shape.dp_replicate;
  for (int i = 0; i < n; ++i) {
    MeshCoord o = c;
    (a == "tp" ? o.tp : a == "dp_shard" ? o.shard : o.replicate) = i;
    ranks.push_back(mesh_rank(shape, o));
  }
  return ranks;
}

/// Gathers the world rank of every member through a collective on the group itself.
std::vector<int> actual_members(const MpiComm& group, const char* name, int world_rank) {
  MpiCommunicator comm(group, name);
  std::vector<std::int32_t> all(comm.size(), -1);
  const std::int32_t mine = world_rank;
  comm.all_gather(&mine, all.data(), 1, DType::I32);
  return std::vector<int>(all.begin(), all.end());
}

TEST(MeshGroups, EveryValidShapeAtThisRankCount) {
  const MpiComm& world = test::world();
  const int p = world.size(), me = world.rank();
  const auto shapes = all_shapes(p);
  ASSERT_FALSE(shapes.empty());
  for (const MeshShape& shape : shapes) {
    SCOPED_TRACE("mesh " + shape.str());
    // Every shape of a single node is valid when tp divides the ranks on the node.
    const MeshShape resolved = resolve_mesh({shape.dp_replicate, shape.dp_shard, shape.tp}, p, p);
    ASSERT_EQ(resolved.world(), p);

    Mesh mesh(world, shape);
    const MeshCoord c = mesh.coord();
    EXPECT_EQ(mesh_rank(shape, c), me);
    EXPECT_EQ(mesh.dp_rank(), c.replicate * shape.dp_shard + c.shard);

    struct Group {
      const char* axis;
      const MpiComm* comm;
      int size;
      int rank;
    };
    const Group groups[] = {
        {"tp", &mesh.tp_group(), shape.tp, c.tp},
        {"dp_shard", &mesh.shard_group(), shape.dp_shard, c.shard},
        {"dp_replicate", &mesh.replicate_group(), shape.dp_replicate, c.replicate},
        {"dp", &mesh.dp_group(), shape.dp(), mesh.dp_rank()},
    };
    for (const Group& g : groups) {
      SCOPED_TRACE(std::string("group ") + g.axis);
      ASSERT_TRUE(g.comm->valid());
      EXPECT_EQ(g.comm->size(), g.size);
      EXPECT_EQ(g.comm->rank(), g.rank);
      const std::vector<int> expect = expected_members(shape, me, g.axis);
      EXPECT_EQ(actual_members(*g.comm, g.axis, me), expect);

      // A reduction inside the group sees exactly its members.
      MpiCommunicator comm(*g.comm, g.axis);
      double x[2] = {static_cast<double>(me), 1.0};
      comm.all_reduce(x, x, 2, DType::F64, ReduceOp::Sum);
      EXPECT_EQ(x[0], std::accumulate(expect.begin(), expect.end(), 0.0));
      EXPECT_EQ(x[1], static_cast<double>(g.size));
    }
  }
}

}  // namespace
