#include "runtime/topology.hpp"

#include <unistd.h>

#include <vector>

#include "core/check.hpp"

namespace meshtrain {

Topology Topology::discover(const MpiComm& world) {
  Topology t;
  t.world_rank = world.rank();
  t.world_size = world.size();

  MpiComm node = world.split_shared();
  t.local_rank = node.rank();
  t.local_size = node.size();

  // Node index: number the nodes by their lowest world rank (the local rank 0).
  int leader = t.local_rank == 0 ? 1 : 0;
  int leader_index = 0;
  MPI_CHECK(MPI_Exscan(&leader, &leader_index, 1, MPI_INT, MPI_SUM, world.get()));
  if (t.world_rank == 0) leader_index = 0;
  int node_index = t.local_rank == 0 ? leader_index : 0;
  MPI_CHECK(MPI_Bcast(&node_index, 1, MPI_INT, 0, node.get()));
  t.node_index = node_index;
  MPI_CHECK(MPI_Allreduce(&leader, &t.num_nodes, 1, MPI_INT, MPI_SUM, world.get()));
  MPI_CHECK(MPI_Allreduce(&t.local_size, &t.min_ranks_per_node, 1, MPI_INT, MPI_MIN, world.get()));
  MPI_CHECK(MPI_Allreduce(&t.local_size, &t.max_ranks_per_node, 1, MPI_INT, MPI_MAX, world.get()));

  constexpr int kHostLen = 64;
  char host[kHostLen] = {0};
  gethostname(host, kHostLen - 1);
  std::vector<char> all(static_cast<std::size_t>(kHostLen) * t.world_size);
  MPI_CHECK(MPI_Allgather(host, kHostLen, MPI_CHAR, all.data(), kHostLen, MPI_CHAR, world.get()));
  t.host_of_rank.resize(t.world_size);
  for (int r = 0; r < t.world_size; ++r) t.host_of_rank[r] = std::string(&all[r * kHostLen]);
  return t;
}

}  // namespace meshtrain
