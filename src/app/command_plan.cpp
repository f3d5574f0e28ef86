// meshtrain plan: the mesh, and for every strategy the per-rank memory by component, the
// communication per step, whether it fits, and which one `auto` picks — without
// allocating the model, for this job or (with --plan.world_size etc.) another cluster.
// When the mesh is left to the planner (mesh keys at -1) it ranks every candidate mesh by
// predicted step time; --json FILE writes the candidates for scripts.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "command_options.hpp"
#include "meshtrain/model/param_spec.hpp"

#include "meshtrain/app/commands.hpp"
#include "meshtrain/app/run_spec_resolve.hpp"
#include "meshtrain/app/source_model_config.hpp"
#include "meshtrain/config/config.hpp"
#include "meshtrain/core/error.hpp"
#include "meshtrain/core/file_io.hpp"
#include "meshtrain/core/format.hpp"
#include "meshtrain/core/log.hpp"
#include "meshtrain/model/model_dims.hpp"
#include "meshtrain/parallel/planner.hpp"
#include "meshtrain/runtime/mesh.hpp"
#include "meshtrain/train/cost_model.hpp"
#include "meshtrain/train/mesh_search.hpp"
#include "meshtrain/train/run_setup.hpp"

namespace meshtrain::app {
namespace {

/// Memory columns print in GiB, or MiB for small models (chosen once per table).
double g_unit = 1073741824.0;
std::string gib(double b) { return strprintf("%.2f", b / g_unit); }

void print_plan(const Config& cfg, const model::ModelDims& dims, const parallel::PlanInput& in,
                const parallel::Plan& plan, const train::CostModelInputs& costs) {
  std::printf("\nmodel: %s, %lld parameters (%.1f M), d_model %d, %d layers, %d heads (%d kv), ffn %d, vocab %lld%s\n",
              model::family_name(dims.family), static_cast<long long>(dims.num_params()), dims.num_params() / 1e6,
              dims.d_model, dims.n_layers, dims.n_heads, dims.n_kv_heads, dims.ffn_dim,
              static_cast<long long>(dims.vocab), dims.vocab != dims.valid_vocab ? " (padded)" : "");
  if (dims.lora_rank > 0) {
    // Trainable = the adapters: only they have fp32 master weights, gradients and AdamW
    // moments (the 'grads' and 'optim' columns); 'params' adds the frozen base in the compute dtype.
    long long trainable = 0;
    for (const model::ParamSpec& p : model::build_param_specs(dims, 1))
      if (!p.frozen) trainable += p.numel();
    std::printf("LoRA: rank %d, alpha %g, targets %s: %lld trainable parameters (%.3f%% of the model); the frozen "
                "base is held in %s without gradients or optimizer state\n",
                dims.lora_rank, dims.lora_alpha, join(dims.lora_targets, ",").c_str(), trainable,
                100.0 * static_cast<double>(trainable) / static_cast<double>(dims.num_params()), in.bf16 ? "bf16" : "fp32");
  }
  std::printf("batch: micro_batch %d x seq_len %d, %s, %s%s\n", in.micro_batch, in.seq_len,
              in.global_batch > 0 ? strprintf("global_batch %d", in.global_batch).c_str()
                                  : strprintf("grad_accum %d", in.grad_accum).c_str(),
              in.bf16 ? "bf16" : "fp32", in.activation_checkpointing ? ", activation checkpointing" : "");
  std::printf("memory budget: %s per rank, %.0f%% kept free\n\n", format_bytes(in.memory_budget).c_str(),
              100 * in.headroom);
  double largest = 0;
  for (const auto& p : plan.options)
    if (p.valid) largest = std::max(largest, p.memory.total());
  g_unit = largest >= 1073741824.0 ? 1073741824.0 : 1048576.0;
  const char* unit = g_unit > 1048576.0 ? "GiB" : "MiB";
  std::printf("per-rank memory (%s) and communication per optimizer step (%s):\n", unit, unit);
  std::printf("  %-14s %-13s %7s %7s %7s %8s %8s %8s %7s %8s  %-4s %10s %10s %9s %9s\n", "strategy", "mesh r x s x t",
              "params", "grads", "optim", "gathered", "grad_buf", "activ", "comm", "total", "fits", "fsdp",
              "tp", "step s", "tok/s");
  for (std::size_t i = 0; i < plan.options.size(); ++i) {
    const parallel::StrategyPlan& p = plan.options[i];
    if (!p.valid) {
      std::printf("  %-14s not possible: %s\n", parallel::strategy_name(p.strategy), p.note.c_str());
      continue;
    }
    const parallel::MemoryEstimate& m = p.memory;
    const train::StepPrediction pred = train::predict_step(dims, in, p, costs);
    std::printf("  %-14s %-13s %7s %7s %7s %8s %8s %8s %7s %8s  %-4s %10s %10s %9.3f %9.0f%s\n",
                parallel::strategy_name(p.strategy),
                strprintf("%d x %d x %d", p.mesh.dp_replicate, p.mesh.dp_shard, p.mesh.tp).c_str(), gib(m.params).c_str(),
                gib(m.grads).c_str(), gib(m.optimizer).c_str(), gib(m.gathered).c_str(), gib(m.grad_buffers).c_str(),
                gib(m.activations).c_str(), gib(m.comm_buffers).c_str(), gib(m.total()).c_str(), p.fits ? "yes" : "NO",
                gib(p.comm.fsdp_gather + p.comm.fsdp_reduce + p.comm.replicate).c_str(), gib(p.comm.tp).c_str(),
                pred.step_seconds_overlap, pred.tokens_per_s, static_cast<int>(i) == plan.chosen ? "   <- auto" : "");
  }
  std::printf("\npredicted optimizer-step time by term (seconds; the cost model of doc/perf.md):\n");
  std::printf("  %-14s %9s %11s %9s %9s %10s %9s\n", "strategy", "gemm", "elementwise", "fsdp_comm", "tp_comm",
              "no_overlap", "overlap");
  for (const parallel::StrategyPlan& p : plan.options) {
    if (!p.valid) continue;
    const train::StepPrediction pred = train::predict_step(dims, in, p, costs);
    std::printf("  %-14s %9.4f %11.4f %9.4f %9.4f %10.4f %9.4f\n", parallel::strategy_name(p.strategy), pred.gemm_s,
                pred.elementwise_s, pred.fsdp_comm_s, pred.tp_comm_s, pred.step_seconds_no_overlap,
                pred.step_seconds_overlap);
  }
  std::printf("\nauto: %s\n", plan.reason.c_str());
  if (cfg.parallel.strategy != StrategyChoice::Auto)
    std::printf("configured: parallel.strategy = %s\n", choice_name(cfg.parallel.strategy));
  std::printf("\ncost model: GEMM %.1f GFLOP/s per rank (%s), copy %.1f GB/s, bus bandwidth %.2f GB/s intra-node, %.2f GB/s "
              "inter-node, latency %.0f us (%s)\n",
              costs.gemm_flops / 1e9, costs.gemm_source.c_str(), costs.copy_bytes / 1e9, costs.intra_bus_bytes / 1e9, costs.inter_bus_bytes / 1e9,
              costs.latency_s * 1e6, costs.bus_source.c_str());
  std::printf("  FSDP communication hidden behind compute: at most %.0f%% (%s); all-reduce as %s\n", 100.0 * costs.overlap,
              costs.overlap_source.c_str(), train::all_reduce_description(costs).c_str());
  if (!costs.sync_s.empty())
    std::printf("  each tensor-parallel all-reduce also waits for its group: %s\n", costs.sync_source.c_str());
  if (costs.adamw_s_per_elem > 0)
    std::printf("  elementwise = AdamW %.2f ns/element (measured) + MLP activation fwd+bwd %.2f ns/element (measured) + "
                "other kernels' bytes / copy bandwidth\n",
                costs.adamw_s_per_elem * 1e9, costs.activation_s_per_elem * 1e9);
  std::printf("step s = predicted optimizer-step time with FSDP communication overlapped behind compute "
              "(tensor-parallel all-reduces exposed); see doc/perf.md\n");
}


std::string mesh_text(const MeshShape& m) { return strprintf("%d x %d x %d", m.dp_replicate, m.dp_shard, m.tp); }

std::string candidate_text(const train::Candidate& c) {
  return strprintf("%s on %s (dp_replicate x dp_shard x tp), micro_batch %d%s", parallel::strategy_name(c.plan.strategy),
                   mesh_text(c.plan.mesh).c_str(), c.plan.micro_batch,
                   c.plan.activation_checkpointing ? ", activation checkpointing" : "");
}

/// The keys that reproduce a candidate (to paste into a config or a command line).
std::string candidate_keys(const train::Candidate& c) {
  return strprintf("--parallel.strategy=%s --parallel.dp_replicate=%d --parallel.dp_shard=%d --parallel.tp=%d "
                   "--train.micro_batch=%d --train.activation_checkpointing=%s",
                   parallel::strategy_name(c.plan.strategy), c.plan.mesh.dp_replicate, c.plan.mesh.dp_shard,
                   c.plan.mesh.tp, c.plan.micro_batch, c.plan.activation_checkpointing ? "true" : "false");
}

void print_search(const train::MeshSearch& ms, const parallel::PlanInput& in, int top) {
  std::printf("\nmesh search: %zu candidates (strategy x dp_replicate x dp_shard x tp x checkpointing x micro-batch), "
              "fastest predicted first; memory per rank of %s usable:\n",
              ms.candidates.size(), format_bytes(in.memory_budget * (1 - in.headroom)).c_str());
  std::printf("  %4s %-14s %-13s %3s %3s %9s %4s %8s %8s %8s %8s %8s %9s %12s\n", "rank", "strategy", "mesh r x s x t",
              "ac", "mb", "mem GiB", "fits", "compute", "fsdp", "exposed", "replic", "tp", "step s", "tok/s");
  int shown = 0;
  for (std::size_t i = 0; i < ms.candidates.size(); ++i) {
    const bool is_chosen = static_cast<int>(i) == ms.chosen;
    if (shown >= top && !is_chosen) continue;
    const train::Candidate& c = ms.candidates[i];
    std::printf("  %4zu %-14s %-13s %3s %3d %9.2f %4s %8.3f %8.3f %8.3f %8.3f %8.3f %9.3f %12.0f%s\n", i + 1,
                parallel::strategy_name(c.plan.strategy), mesh_text(c.plan.mesh).c_str(),
                c.plan.activation_checkpointing ? "yes" : "no", c.plan.micro_batch, c.plan.memory.total() / 1073741824.0,
                c.plan.fits ? "yes" : "NO", c.pred.compute_s, c.pred.fsdp_comm_s, c.pred.exposed_fsdp_s,
                c.pred.replicate_comm_s, c.pred.tp_comm_s, c.pred.step_seconds_overlap, c.pred.tokens_per_s,
                is_chosen ? "   <- chosen" : "");
    ++shown;
  }
  std::printf("  (compute = GEMM + elementwise; fsdp = shard-group gathers and reductions, of which 'exposed' does not hide "
              "behind compute; replic = the replicate all-reduce after backward; tp = tensor-parallel all-reduces)\n");
}

nlohmann::json candidate_json(const train::Candidate& c) {
  return {{"strategy", parallel::strategy_name(c.plan.strategy)},
          {"dp_replicate", c.plan.mesh.dp_replicate},
          {"dp_shard", c.plan.mesh.dp_shard},
          {"tp", c.plan.mesh.tp},
          {"activation_checkpointing", c.plan.activation_checkpointing},
          {"micro_batch", c.plan.micro_batch},
          {"grad_accum", c.plan.grad_accum},
          {"memory_bytes", c.plan.memory.total()},
          {"fits", c.plan.fits},
          {"step_s", c.pred.step_seconds_overlap},
          {"tokens_per_s", c.pred.tokens_per_s},
          {"compute_s", c.pred.compute_s},
          {"fsdp_comm_s", c.pred.fsdp_comm_s},
          {"exposed_fsdp_s", c.pred.exposed_fsdp_s},
          {"replicate_comm_s", c.pred.replicate_comm_s},
          {"tp_comm_s", c.pred.tp_comm_s}};
}

/// Writes the search as JSON: the target, every candidate, the pick under `chosen` (null
/// when nothing fits). Written to FILE.tmp and renamed, so a reader never sees half a file.
void write_json(const std::string& path, int world, int rpn, const parallel::PlanInput& in, const train::MeshSearch& ms,
                const train::MeshSearch* unrestricted) {
  nlohmann::json j;
  j["world_size"] = world;
  j["ranks_per_node"] = rpn;
  j["memory_budget_bytes"] = in.memory_budget;
  j["memory_usable_bytes"] = in.memory_budget * (1 - in.headroom);
  j["global_batch"] = in.global_batch;
  j["seq_len"] = in.seq_len;
  j["candidates"] = nlohmann::json::array();
  for (const auto& c : ms.candidates) j["candidates"].push_back(candidate_json(c));
  j["chosen"] = ms.chosen >= 0 ? candidate_json(ms.candidates[ms.chosen]) : nlohmann::json(nullptr);
  j["reason"] = ms.reason;
  if (unrestricted != nullptr && unrestricted->chosen >= 0)
    j["best_unrestricted"] = candidate_json(unrestricted->candidates[unrestricted->chosen]);
  file_io::replace_file(path, j.dump(1) + "\n");  // temp + fsync + rename: never a torn file
}

}  // namespace

int command_plan(Runtime& rt, const Args& args) {
  std::string json_path;
  int top = 10;
  namespace po = boost::program_options;
  po::options_description own("Options of plan");
  own.add_options()("json", po::value<std::string>(&json_path), "also write every candidate mesh and the pick as JSON to FILE")
      ("top", po::value<int>(&top)->default_value(top), "candidates printed by the mesh search (the chosen one always)");
  const std::string usage =
      "usage: meshtrain plan [CONFIG.ini] [--json FILE] [--top N] [--section.key=value ...]\n\n"
      "Per-rank memory and predicted step time of every strategy and, with the mesh keys left at -1, of every\n"
      "mesh; for this job or, with --plan.world_size and the other plan.* keys, another cluster.\n";
  CommandArgs ca = parse_command_args("plan", usage, own, args);
  const bool root = rt.topology().world_rank == 0;
  if (ca.config.help) {
    if (root) std::fputs(ca.config.help_text.c_str(), stdout);
    return 0;
  }
  MESHTRAIN_REQUIRE(top >= 0, "--top must be >= 0, not %d", top);
  Config& cfg = ca.config.config;
  // Planning a fine-tune: pretrained weights bring their model's shape, as in `train`.
  if (!cfg.checkpoint.init_from.empty()) adopt_source_model(cfg, cfg.checkpoint.init_from, "checkpoint.init_from");
  if (root && !cfg.deprecation_note.empty()) log::warn("%s", cfg.deprecation_note.c_str());
  const train::RunSpec spec = resolve_spec(cfg);
  const train::PlanTarget& target = spec.plan;
  const Topology& topo = rt.topology();
  const bool other = target.other_cluster();
  const int world = other ? target.world_size : topo.world_size;
  std::optional<int> rpn;
  if (target.gpus_per_node > 0) rpn = target.gpus_per_node;
  else if (!other && topo.uniform()) rpn = topo.local_size;
  const model::ModelDims& dims = spec.dims;
  const MeshRequest& asked = spec.parallel.mesh;
  // A fixed mesh is checked first (a tp larger than a node is a mesh error, whatever the
  // model); with tp left to the planner (-1) only tp values that split the model are candidates.
  if (!train::searches_mesh(spec)) resolve_mesh(asked, world, rpn);
  const int fixed_tp = asked.tp > 0 ? asked.tp : 1;
  try {
    model::tp_dims(dims, fixed_tp, 0);  // heads, MLP width and vocabulary must split over tp
  } catch (const UserError& e) {
    // Without a config file the model is the default GPT-2 124M (vocabulary 50257, odd):
    // say so, since the user asked about a mesh, not a model.
    if (!cfg.source_file.empty()) throw;
    throw UserError(strprintf("%s (no config file was given, so the model is the default GPT-2 124M with %lld "
                              "tokens; give a config, e.g. `meshtrain plan inputs/tiny-gpt2.ini --parallel.tp=%d`)",
                              e.what(), static_cast<long long>(dims.valid_vocab), fixed_tp));
  }
  const double budget = train::memory_budget_per_rank(spec, topo, other);
  {
    // Planning another machine with some of its ceilings missing: those terms use this
    // machine's measurements, which can be far off (a laptop's copy bandwidth for an HBM GPU).
    const bool planning_target = other || target.device_memory || target.gemm_tflops > 0 || target.has_bus() ||
                                 target.mem_gbps > 0;
    std::vector<std::string> missing;
    if (target.gemm_tflops <= 0) missing.push_back("plan.gemm_tflops");
    if (!target.has_bus()) missing.push_back("plan.bus_gbps");
    if (target.mem_gbps <= 0) missing.push_back("plan.mem_gbps");
    if (planning_target && !missing.empty() && root)
      log::warn("planning another machine, but %s %s not set: %s measured on this machine (see the cost model lines "
                "at the end)",
                join(missing, ", ").c_str(), missing.size() == 1 ? "is" : "are",
                missing.size() == 1 ? "that ceiling is" : "those ceilings are");
  }
  const parallel::PlanInput in = train::plan_input(spec, world, rpn.value_or(world), budget);
  const bool search = train::searches_mesh(spec);
  MeshShape shape;
  if (!search) shape = resolve_mesh(asked, world, rpn);
  const train::CostModelInputs costs = train::cost_model_inputs(spec.plan, spec.batch, spec.parallel.backend, rt, in.bf16,
                                                                !other, &dims, search ? 1 : shape.tp);

  // The user's space (their fixed keys), and the whole space for comparison.
  train::MeshSearch ms;
  if (search) ms = train::search_meshes(dims, in, train::search_space(spec), costs);
  train::RunSpec free_spec = spec;
  free_spec.parallel.strategy = StrategyChoice::Auto;
  free_spec.parallel.mesh = {-1, -1, -1};
  if (free_spec.batch.micro_batch == 0 && free_spec.batch.global_batch == 0) free_spec.batch.micro_batch = 1;
  parallel::PlanInput free_in = in;
  free_in.mesh = {-1, -1, -1};
  const train::MeshSearch best = train::search_meshes(dims, free_in, train::search_space(free_spec), costs);
  const bool restricted = !search || spec.parallel.strategy != StrategyChoice::Auto || asked.dp_replicate != -1 ||
                          asked.dp_shard != -1 || asked.tp != -1 || spec.train.activation_checkpointing;

  if (root) {
    const int nodes = other ? (rpn ? (world + *rpn - 1) / *rpn : 1) : topo.num_nodes;
    std::printf("topology: %d rank(s) on %d node(s), %s ranks per node%s\n", world, nodes,
                rpn ? std::to_string(*rpn).c_str() : "uneven", other ? " (planned target, not this job)" : "");
    if (search) {
      print_search(ms, in, top);
      std::printf("\nchosen: %s\n  why: %s\n", ms.chosen >= 0 ? candidate_text(ms.candidates[ms.chosen]).c_str() : "none",
                  ms.reason.c_str());
    } else {
      if (world <= 64) std::fputs(describe_mesh(shape, other ? nullptr : &topo).c_str(), stdout);
      else std::printf("mesh: %s = %d ranks (tp fastest-varying; per-rank table omitted above 64 ranks)\n", shape.str().c_str(), world);
      const parallel::Plan plan = parallel::make_plan(in);
      print_plan(cfg, dims, in, plan, costs);
    }
    if (restricted && best.chosen >= 0) {
      const train::Candidate& b = best.candidates[best.chosen];
      std::printf("\nwith nothing fixed (strategy, mesh and checkpointing left to the planner) the best is %s: %.3f s per "
                  "step, %s per rank\n  keys: %s\n",
                  candidate_text(b).c_str(), b.pred.step_seconds_overlap, format_bytes(b.plan.memory.total()).c_str(),
                  candidate_keys(b).c_str());
      if (search && ms.chosen >= 0)
        std::printf("  your settings' pick takes %.3f s (%+.1f%%)\n", ms.candidates[ms.chosen].pred.step_seconds_overlap,
                    100.0 * (ms.candidates[ms.chosen].pred.step_seconds_overlap / b.pred.step_seconds_overlap - 1.0));
    }
    if (search)
      std::printf("\ncost model: GEMM %.1f GFLOP/s per rank (%s), copy %.1f GB/s, bus bandwidth %.2f GB/s intra-node, "
                  "%.2f GB/s per rank inter-node, ring step latency %.1f us (%s)\n",
                  costs.gemm_flops / 1e9, costs.gemm_source.c_str(), costs.copy_bytes / 1e9, costs.intra_bus_bytes / 1e9,
                  costs.inter_bus_bytes / 1e9, costs.latency_s * 1e6, costs.bus_source.c_str());
    if (search)
      std::printf("  FSDP communication hidden behind compute: at most %.0f%% (%s); all-reduce as %s\n",
                  100.0 * costs.overlap, costs.overlap_source.c_str(),
                  train::all_reduce_description(costs).c_str());
    if (search && !costs.sync_s.empty())
      std::printf("  each tensor-parallel all-reduce also waits for its group: %s\n", costs.sync_source.c_str());
    if (!json_path.empty()) {
      if (!search) {
        // A fixed mesh: the candidates are the configured strategy (or, for auto, every
        // strategy) on it, and `chosen` is what `train` runs: the forced strategy, or auto's
        // pick on a fixed mesh (make_plan's rule), never the unrestricted best.
        ms = train::search_meshes(dims, in, train::search_space(spec), costs);
        if (spec.parallel.strategy == StrategyChoice::Auto) {
          const parallel::Plan plan = parallel::make_plan(in);
          ms.chosen = -1;
          for (std::size_t i = 0; plan.chosen >= 0 && i < ms.candidates.size(); ++i)
            if (ms.candidates[i].plan.strategy == plan.options[plan.chosen].strategy) {
              ms.chosen = static_cast<int>(i);
              break;
            }
          ms.reason = plan.reason;
        }
      }
      write_json(json_path, world, rpn.value_or(world), in, ms, restricted ? &best : nullptr);
    }
  }
  return 0;
}

}  // namespace meshtrain::app
