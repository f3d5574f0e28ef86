// parallel::DeviceMesh: for every valid shape at this rank count, each dimension (world,
// tp, dp_shard, dp_replicate, dp) has the size, rank and members mesh_coord/mesh_rank say
// it has, in mesh order; a collective on its MPI sub-communicator and one on its
// Communicator stay inside it; and its small collectives (sum, min, max, min_max,
// broadcast_string, agree_on_error) give the values computed here from the members.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "parallel/device_mesh.hpp"
#include "test_support.hpp"

using namespace meshtrain;
using parallel::DeviceMesh;
using parallel::MeshDim;

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
  if (a == "world") {
    ranks.resize(shape.world());
    std::iota(ranks.begin(), ranks.end(), 0);
    return ranks;
  }
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

/// The small collectives of `dim`, checked against values computed from its members
/// (`members`: their world ranks, in dimension-rank order).
void check_small_collectives(const MeshDim& dim, const std::vector<int>& members, int me) {
  const int lo = *std::min_element(members.begin(), members.end());
  const int hi = *std::max_element(members.begin(), members.end());
  const long long total = std::accumulate(members.begin(), members.end(), 0LL);
  EXPECT_EQ(dim.sum(me), total);
  EXPECT_EQ(dim.sum(static_cast<std::int64_t>(me) << 33), static_cast<std::int64_t>(total) << 33);
  EXPECT_EQ(dim.sum<std::uint64_t>(1), static_cast<std::uint64_t>(members.size()));
  // 0.5 + rank: exact in any summation order.
  EXPECT_EQ(dim.sum(0.5 + me), 0.5 * members.size() + total);
  EXPECT_EQ(dim.min(me), lo);
  EXPECT_EQ(dim.max(me), hi);
  EXPECT_EQ(dim.min(-2.5 * me), -2.5 * hi);
  EXPECT_EQ(dim.max(-2.5 * me), -2.5 * lo);
  const MinMax mm = dim.min_max(1.0 + me);
  EXPECT_EQ(mm.min, 1.0 + lo);
  EXPECT_EQ(mm.max, 1.0 + hi);
  const double vs[2] = {static_cast<double>(me), -static_cast<double>(me)};
  MinMax out[2];
  dim.min_max(vs, out, 2);
  EXPECT_EQ(out[0].min, lo);
  EXPECT_EQ(out[0].max, hi);
  EXPECT_EQ(out[1].min, -hi);
  EXPECT_EQ(out[1].max, -lo);

  // Every root in turn; the string grows with the root's world rank, and the empty
  // string (root's length 0) comes through too.
  for (int root = 0; root < dim.size(); ++root) {
    const std::string mine = me == members[root] ? "from " + std::to_string(me) + std::string(me, 'x') : "junk";
    EXPECT_EQ(dim.broadcast_string(mine, root),
              "from " + std::to_string(members[root]) + std::string(members[root], 'x'));
  }
  EXPECT_EQ(dim.broadcast_string(dim.rank() == 0 ? "" : "not empty"), "");

  // A UserError on the highest member only reaches every member, with its message; a
  // member of another group of this dimension does not see it.
  try {
    dim.agree_on_error([&] {
      if (dim.rank() == dim.size() - 1) throw UserError("bad input on " + std::to_string(hi));
    });
    ADD_FAILURE() << "agree_on_error did not throw on " << me;
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), "bad input on " + std::to_string(hi));
  }
  EXPECT_NO_THROW(dim.agree_on_error([] {}));
}

TEST(DeviceMesh, EveryValidShapeAtThisRankCount) {
  const MpiComm& world = test::world();
  const int p = world.size(), me = world.rank();
  const auto shapes = all_shapes(p);
  ASSERT_FALSE(shapes.empty());
  for (const MeshShape& shape : shapes) {
    SCOPED_TRACE("mesh " + shape.str());
    // Every shape of a single node is valid when tp divides the ranks on the node.
    const MeshShape resolved = resolve_mesh_shape({shape.dp_replicate, shape.dp_shard, shape.tp}, p, p);
    ASSERT_EQ(resolved.world(), p);

    const DeviceMesh mesh(world, shape, Backend::Mpi);
    const MeshCoord c = mesh.coord();
    EXPECT_EQ(mesh_rank(shape, c), me);
    EXPECT_EQ(mesh.dp_rank(), c.replicate * shape.dp_shard + c.shard);
    EXPECT_STREQ(mesh.backend(), "mpi");

    struct Group {
      const char* axis;
      const MeshDim* dim;
      int size;
      int rank;
    };
    const Group groups[] = {
        {"world", &mesh.world(), p, me},
        {"tp", &mesh.tp(), shape.tp, c.tp},
        {"dp_shard", &mesh.dp_shard(), shape.dp_shard, c.shard},
        {"dp_replicate", &mesh.dp_replicate(), shape.dp_replicate, c.replicate},
        {"dp", &mesh.dp(), shape.dp(), mesh.dp_rank()},
    };
    for (const Group& g : groups) {
      SCOPED_TRACE(std::string("group ") + g.axis);
      const MeshDim& d = *g.dim;
      EXPECT_EQ(d.name(), g.axis);
      EXPECT_EQ(mesh.find(g.axis), g.dim);
      ASSERT_TRUE(d.mpi().valid());
      EXPECT_EQ(d.size(), g.size);
      EXPECT_EQ(d.rank(), g.rank);
      EXPECT_EQ(d.mpi().size(), g.size);
      EXPECT_EQ(d.mpi().rank(), g.rank);
      EXPECT_EQ(d.comm().size(), g.size);
      EXPECT_EQ(d.comm().rank(), g.rank);
      const std::vector<int> expect = expected_members(shape, me, g.axis);
      EXPECT_EQ(actual_members(d.mpi(), g.axis, me), expect);

      // A reduction on the dimension's own Communicator sees exactly its members.
      double x[2] = {static_cast<double>(me), 1.0};
      d.comm().all_reduce(x, x, 2, DType::F64, ReduceOp::Sum);
      EXPECT_EQ(x[0], std::accumulate(expect.begin(), expect.end(), 0.0));
      EXPECT_EQ(x[1], static_cast<double>(g.size));

      check_small_collectives(d, expect, me);
    }
    EXPECT_EQ(mesh.find("shard"), nullptr);
    mesh.progress();
  }
}

#if !defined(MESHTRAIN_WITH_CUDA)
TEST(DeviceMesh, NcclNeedsACudaBuild) {
  const MpiComm& world = test::world();
  try {
    const DeviceMesh mesh(world, {1, world.size(), 1}, Backend::Nccl);
    ADD_FAILURE() << "parallel.backend=nccl was accepted by a host build";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.backend=nccl needs a CUDA build"), std::string::npos) << e.what();
  }
}
#endif

}  // namespace
