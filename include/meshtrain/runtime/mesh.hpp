#pragma once
/// \brief The mesh's arithmetic: world = dp_replicate × dp_shard × tp, tp fastest-varying so
/// that a tensor-parallel group is a run of consecutive ranks (inside one node). The live
/// mesh -- its sub-communicators and Communicators -- is parallel::DeviceMesh.
///
/// world rank = (replicate * dp_shard + shard) * tp + tp_rank

#include <optional>
#include <string>

#include "runtime/topology.hpp"

namespace meshtrain {

/// Requested sizes; -1 means "infer from the world size" (at most one of them).
struct MeshRequest {
  int dp_replicate = 1;
  int dp_shard = -1;
  int tp = 1;
};

struct MeshShape {
  int dp_replicate = 1;
  int dp_shard = 1;
  int tp = 1;
  int world() const { return dp_replicate * dp_shard * tp; }
  int dp() const { return dp_replicate * dp_shard; }  ///< data-parallel degree
  std::string str() const;                            ///< "1 (dp_replicate) x 2 (dp_shard) x 2 (tp)"
};

/// \brief Resolves -1 entries and validates; throws UserError naming the key to change.
/// `ranks_per_node` (when known and uniform) bounds tp and requires tp groups not to
/// straddle nodes.
MeshShape resolve_mesh_shape(const MeshRequest& request, int world_size,
                       std::optional<int> ranks_per_node);

/// Coordinates of a rank in the mesh.
struct MeshCoord {
  int replicate = 0;
  int shard = 0;
  int tp = 0;
};
MeshCoord mesh_coord(const MeshShape& shape, int world_rank);
int mesh_rank(const MeshShape& shape, const MeshCoord& c);

/// Multi-line description: the shape and, for every world rank, its coordinates,
/// host and groups (as rank lists).
std::string describe_mesh_shape(const MeshShape& shape, const Topology* topology);

}  // namespace meshtrain
