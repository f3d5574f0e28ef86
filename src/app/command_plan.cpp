#include <cstdio>

#include "meshtrain/app/commands.hpp"
#include "meshtrain/config/config.hpp"
#include "meshtrain/core/error.hpp"
#include "meshtrain/runtime/mesh.hpp"

namespace meshtrain::app {

int command_plan(Runtime& rt, const Args& args) {
  ParsedArgs parsed = parse_config("plan", args);
  const bool root = rt.topology().world_rank == 0;
  if (parsed.help) {
    if (root) std::fputs(parsed.help_text.c_str(), stdout);
    return 0;
  }
  const Config& cfg = parsed.config;
  validate_config(cfg);
  const Topology& topo = rt.topology();
  const int world = cfg.parallel.world_size > 0 ? cfg.parallel.world_size : topo.world_size;
  std::optional<int> rpn;
  if (cfg.parallel.gpus_per_node > 0) rpn = cfg.parallel.gpus_per_node;
  else if (cfg.parallel.world_size == 0 && topo.uniform()) rpn = topo.local_size;
  const MeshShape shape = resolve_mesh({cfg.parallel.dp_replicate, cfg.parallel.dp_shard, cfg.parallel.tp},
                                       world, rpn);
  if (root) {
    std::printf("topology: %d rank(s) on %d node(s), %s ranks per node\n", world,
                cfg.parallel.world_size > 0 ? (rpn ? (world + *rpn - 1) / *rpn : 1) : topo.num_nodes,
                rpn ? std::to_string(*rpn).c_str() : "uneven");
    std::fputs(describe_mesh(shape, cfg.parallel.world_size > 0 ? nullptr : &topo).c_str(), stdout);
  }
  return 0;
}

}  // namespace meshtrain::app
