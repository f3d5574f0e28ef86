// Topology at 1, 2 and 4 ranks: node-local ranks from MPI_Comm_split_type(SHARED),
// node numbering, host names. The expected values are derived independently with
// MPI calls on the world communicator (host name comparison), not with the same split.
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "runtime/topology.hpp"
#include "test_support.hpp"

using namespace meshtrain;

namespace {

std::string my_host() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

TEST(Topology, MatchesHostNamesOfTheJob) {
  const MpiComm& world = test::world();
  const Topology t = Topology::discover(world);
  EXPECT_EQ(t.world_rank, world.rank());
  EXPECT_EQ(t.world_size, world.size());
  ASSERT_EQ(static_cast<int>(t.host_of_rank.size()), t.world_size);
  EXPECT_EQ(t.host_of_rank[t.world_rank], my_host().substr(0, 63));

  // Reference: group ranks by host name (ranks on one host share memory).
  std::map<std::string, std::vector<int>> by_host;
  std::vector<std::string> first_seen;
  for (int r = 0; r < t.world_size; ++r) {
    if (!by_host.count(t.host_of_rank[r])) first_seen.push_back(t.host_of_rank[r]);
    by_host[t.host_of_rank[r]].push_back(r);
  }
  const auto& mine = by_host[t.host_of_rank[t.world_rank]];
  EXPECT_EQ(t.num_nodes, static_cast<int>(by_host.size()));
  EXPECT_EQ(t.local_size, static_cast<int>(mine.size()));
  // Node-local rank = position among the ranks of this host (split key = world rank).
  int expect_local = 0;
  while (mine[expect_local] != t.world_rank) ++expect_local;
  EXPECT_EQ(t.local_rank, expect_local);
  // Nodes are numbered by their lowest world rank.
  int expect_node = 0;
  while (first_seen[expect_node] != t.host_of_rank[t.world_rank]) ++expect_node;
  EXPECT_EQ(t.node_index, expect_node);

  int min_rpn = t.world_size, max_rpn = 0;
  for (const auto& [host, ranks] : by_host) {
    min_rpn = std::min(min_rpn, static_cast<int>(ranks.size()));
    max_rpn = std::max(max_rpn, static_cast<int>(ranks.size()));
  }
  EXPECT_EQ(t.min_ranks_per_node, min_rpn);
  EXPECT_EQ(t.max_ranks_per_node, max_rpn);
  EXPECT_EQ(t.uniform(), min_rpn == max_rpn);
}

TEST(Topology, RuntimeDiscoveredTheSameTopology) {
  const Topology& rt = test::runtime().topology();
  const Topology t = Topology::discover(test::world());
  EXPECT_EQ(rt.local_rank, t.local_rank);
  EXPECT_EQ(rt.local_size, t.local_size);
  EXPECT_EQ(rt.num_nodes, t.num_nodes);
  EXPECT_EQ(rt.host_of_rank, t.host_of_rank);
  // Host-only builds select no device.
  EXPECT_EQ(test::runtime().device_id(), -1);
}

TEST(MpiComm, SplitAndDuplicateAreIndependentCommunicators) {
  const MpiComm& world = test::world();
  MpiComm dup = MpiComm::duplicate(world.get());
  EXPECT_EQ(dup.size(), world.size());
  EXPECT_EQ(dup.rank(), world.rank());
  int cmp = MPI_IDENT;
  MPI_Comm_compare(dup.get(), world.get(), &cmp);
  EXPECT_EQ(cmp, MPI_CONGRUENT);  // same group, different context: traffic never mixes
  // Even/odd split; ranks passing MPI_UNDEFINED get a null communicator.
  MpiComm half = world.split(world.rank() % 2, world.rank());
  EXPECT_EQ(half.size(), (world.size() + 1 - world.rank() % 2) / 2);
  EXPECT_EQ(half.rank(), world.rank() / 2);
  MpiComm none = world.split(world.rank() == 0 ? 0 : MPI_UNDEFINED, 0);
  EXPECT_EQ(none.valid(), world.rank() == 0);
}

}  // namespace
