#pragma once
/// \brief Where the ranks are: node count, node-local rank (from
/// `MPI_Comm_split_type(SHARED)`), and host names.

#include <string>
#include <vector>

#include "runtime/mpi_comm.hpp"

namespace meshtrain {

struct Topology {
  int world_rank = 0;
  int world_size = 1;
  int node_index = 0;          ///< index of this rank's node, 0..num_nodes-1 (by lowest rank)
  int num_nodes = 1;
  int local_rank = 0;          ///< rank within the node
  int local_size = 1;          ///< ranks on this node
  int min_ranks_per_node = 1;  ///< smallest node (nodes may be uneven)
  int max_ranks_per_node = 1;
  std::vector<std::string> host_of_rank;  ///< host name of every world rank

  /// Collective over `world`.
  static Topology discover(const MpiComm& world);
  /// True when every node runs the same number of ranks.
  bool uniform() const { return min_ranks_per_node == max_ranks_per_node; }
};

}  // namespace meshtrain
