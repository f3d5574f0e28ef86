#include "runtime/mesh.hpp"

#include <vector>

#include "core/error.hpp"
#include "core/format.hpp"

namespace meshtrain {
namespace {

std::string divisors_of(int n) {
  std::vector<std::string> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(std::to_string(i));
  return "{" + join(d, ", ") + "}";
}

}  // namespace

std::string MeshShape::str() const {
  return strprintf("%d (dp_replicate) x %d (dp_shard) x %d (tp)", dp_replicate, dp_shard, tp);
}

MeshShape resolve_mesh_shape(const MeshRequest& request, int world_size, std::optional<int> ranks_per_node) {
  const char* names[3] = {"parallel.dp_replicate", "parallel.dp_shard", "parallel.tp"};
  int dims[3] = {request.dp_replicate, request.dp_shard, request.tp};
  MESHTRAIN_REQUIRE(world_size >= 1, "the world size must be at least 1 (got %d)", world_size);
  int infer = -1;
  int known = 1;
  for (int i = 0; i < 3; ++i) {
    if (dims[i] == -1) {
      MESHTRAIN_REQUIRE(infer < 0,
                        "%s and %s are both -1; at most one mesh dimension can be inferred — "
                        "give the other a value",
                        names[infer], names[i]);
      infer = i;
    } else {
      MESHTRAIN_REQUIRE(dims[i] >= 1, "%s must be a positive integer or -1 (infer), got %d",
                        names[i], dims[i]);
      known *= dims[i];
    }
  }
  if (infer >= 0) {
    if (world_size % known != 0) {
      // Name the given dimensions (> 1) whose product does not divide the world: those
      // are the keys to change.
      std::vector<std::string> culprits;
      std::vector<std::string> culprit_keys;
      for (int i = 0; i < 3; ++i) {
        if (i == infer || dims[i] == 1) continue;
        culprits.push_back(strprintf("%s=%d", names[i], dims[i]));
        culprit_keys.push_back(names[i]);
      }
      if (culprits.size() == 1) {
        throw UserError(strprintf(
            "%s does not divide the %d ranks of this job, so %s cannot be inferred; use %s in %s, "
            "or launch a multiple of %d ranks",
            culprits[0].c_str(), world_size, names[infer], culprit_keys[0].c_str(),
            divisors_of(world_size).c_str(), known));
      }
      throw UserError(strprintf(
          "%s = %d does not divide the %d ranks of this job, so %s cannot be inferred; choose %s "
          "so that their product is one of %s, or launch a multiple of %d ranks",
          join(culprits, " x ").c_str(), known, world_size, names[infer],
          join(culprit_keys, " and ").c_str(), divisors_of(world_size).c_str(), known));
    }
    dims[infer] = world_size / known;
  } else {
    MESHTRAIN_REQUIRE(known == world_size,
                      "parallel.dp_replicate x parallel.dp_shard x parallel.tp = %d x %d x %d = %d, "
                      "but the job has %d ranks; set one of them to -1 to infer it, or launch %d "
                      "ranks",
                      dims[0], dims[1], dims[2], known, world_size, known);
  }
  MeshShape s{dims[0], dims[1], dims[2]};
  if (ranks_per_node && *ranks_per_node > 0) {
    const int rpn = *ranks_per_node;
    MESHTRAIN_REQUIRE(s.tp <= rpn,
                      "parallel.tp=%d is larger than a node (%d ranks per node); tensor-parallel "
                      "all-reduces are on the critical path and must stay inside a node: use "
                      "parallel.tp <= %d and scale across nodes with dp_shard/dp_replicate",
                      s.tp, rpn, rpn);
    MESHTRAIN_REQUIRE(rpn % s.tp == 0,
                      "parallel.tp=%d does not divide the %d ranks per node, so a tensor-parallel "
                      "group would straddle two nodes; choose tp in %s",
                      s.tp, rpn, divisors_of(rpn).c_str());
  }
  return s;
}

MeshCoord mesh_coord(const MeshShape& s, int r) {
  MeshCoord c;
  c.tp = r % s.tp;
  c.shard = (r / s.tp) % s.dp_shard;
  c.replicate = r / (s.tp * s.dp_shard);
  return c;
}

int mesh_rank(const MeshShape& s, const MeshCoord& c) {
  return (c.replicate * s.dp_shard + c.shard) * s.tp + c.tp;
}

std::string describe_mesh_shape(const MeshShape& s, const Topology* topo) {
  std::string out = strprintf("mesh: %s = %d ranks (tp fastest-varying)\n", s.str().c_str(), s.world());
  out += "  rank  host              replicate shard tp   tp_group       shard_group    replicate_group\n";
  auto group = [&](int r, int which) {
    const MeshCoord c = mesh_coord(s, r);
    std::vector<std::string> ranks;
    const int n = which == 0 ? s.tp : which == 1 ? s.dp_shard : s.dp_replicate;
    for (int i = 0; i < n; ++i) {
      MeshCoord o = c;
      (which == 0 ? o.tp : which == 1 ? o.shard : o.replicate) = i;
      ranks.push_back(std::to_string(mesh_rank(s, o)));
    }
    return "[" + join(ranks, ",") + "]";
  };
  for (int r = 0; r < s.world(); ++r) {
    const MeshCoord c = mesh_coord(s, r);
    const std::string host =
        topo && r < static_cast<int>(topo->host_of_rank.size()) ? topo->host_of_rank[r] : "-";
    out += strprintf("  %4d  %-16.16s  %9d %5d %2d   %-14s %-14s %s\n", r, host.c_str(), c.replicate,
                     c.shard, c.tp, group(r, 0).c_str(), group(r, 1).c_str(), group(r, 2).c_str());
  }
  return out;
}

}  // namespace meshtrain
