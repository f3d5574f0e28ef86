// meshtrain plan: the mesh, and for every strategy the per-rank memory by component, the
// communication per step, whether it fits, and which one `auto` picks — without
// allocating the model, for this job or (with --parallel.world_size etc.) another cluster.
#include <cstdio>
#include <string>
#include <vector>

#include "meshtrain/app/commands.hpp"
#include "meshtrain/config/config.hpp"
#include "meshtrain/core/error.hpp"
#include "meshtrain/core/format.hpp"
#include "meshtrain/core/log.hpp"
#include "meshtrain/model/model_dims.hpp"
#include "meshtrain/parallel/planner.hpp"
#include "meshtrain/runtime/mesh.hpp"
#include "meshtrain/train/cost_model.hpp"
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
  if (cfg.parallel.strategy != "auto") std::printf("configured: parallel.strategy = %s\n", cfg.parallel.strategy.c_str());
  std::printf("\ncost model: GEMM %.1f GFLOP/s per rank (%s), copy %.1f GB/s, bus bandwidth %.2f GB/s intra-node, %.2f GB/s "
              "inter-node, latency %.0f us (%s)\n",
              costs.gemm_flops / 1e9, costs.gemm_source.c_str(), costs.copy_bytes / 1e9, costs.intra_bus_bytes / 1e9, costs.inter_bus_bytes / 1e9,
              costs.latency_s * 1e6, costs.bus_source.c_str());
  if (costs.adamw_s_per_elem > 0)
    std::printf("  elementwise = AdamW %.2f ns/element (measured) + MLP activation fwd+bwd %.2f ns/element (measured) + "
                "other kernels' bytes / copy bandwidth\n",
                costs.adamw_s_per_elem * 1e9, costs.activation_s_per_elem * 1e9);
  std::printf("step s = predicted optimizer-step time with FSDP communication overlapped behind compute "
              "(tensor-parallel all-reduces exposed); see doc/perf.md\n");
}

}  // namespace

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
  const bool other = cfg.parallel.world_size > 0;
  const int world = other ? cfg.parallel.world_size : topo.world_size;
  std::optional<int> rpn;
  if (cfg.parallel.gpus_per_node > 0) rpn = cfg.parallel.gpus_per_node;
  else if (!other && topo.uniform()) rpn = topo.local_size;
  const MeshShape shape = resolve_mesh({cfg.parallel.dp_replicate, cfg.parallel.dp_shard, cfg.parallel.tp}, world, rpn);
  const model::ModelDims dims = model::resolve_dims(cfg.model);
  try {
    model::tp_dims(dims, shape.tp, 0);  // heads, MLP width and vocabulary must split over tp
  } catch (const UserError& e) {
    // Without a config file the model is the default GPT-2 124M (vocabulary 50257, odd):
    // say so, since the user asked about a mesh, not a model.
    if (!cfg.source_file.empty()) throw;
    throw UserError(strprintf("%s (no config file was given, so the model is the default GPT-2 124M with %lld "
                              "tokens; give a config, e.g. `meshtrain plan inputs/tiny-gpt2.ini --parallel.tp=%d`)",
                              e.what(), static_cast<long long>(dims.valid_vocab), shape.tp));
  }
  const double budget = train::memory_budget_per_rank(cfg, topo, other);
  {
    // Planning another machine with some of its ceilings missing: those terms use this
    // machine's measurements, which can be far off (a laptop's copy bandwidth for an HBM GPU).
    const ParallelConfig& p = cfg.parallel;
    const bool target = other || !p.device_memory.empty() || !p.target_gemm_tflops.empty() ||
                        !p.target_bus_gbps.empty() || !p.target_mem_gbps.empty();
    std::vector<std::string> missing;
    if (p.target_gemm_tflops.empty()) missing.push_back("parallel.target_gemm_tflops");
    if (p.target_bus_gbps.empty()) missing.push_back("parallel.target_bus_gbps");
    if (p.target_mem_gbps.empty()) missing.push_back("parallel.target_mem_gbps");
    if (target && !missing.empty() && root)
      log::warn("planning another machine, but %s %s not set: %s measured on this machine (see the cost model lines "
                "at the end)",
                join(missing, ", ").c_str(), missing.size() == 1 ? "is" : "are",
                missing.size() == 1 ? "that ceiling is" : "those ceilings are");
  }
  const parallel::PlanInput in = train::plan_input(cfg, dims, world, rpn.value_or(world), budget);
  const parallel::Plan plan = parallel::make_plan(in);
  const train::CostModelInputs costs = train::cost_model_inputs(cfg, rt, in.bf16, !other, &dims, shape.tp);
  if (root) {
    const int nodes = other ? (rpn ? (world + *rpn - 1) / *rpn : 1) : topo.num_nodes;
    std::printf("topology: %d rank(s) on %d node(s), %s ranks per node%s\n", world, nodes,
                rpn ? std::to_string(*rpn).c_str() : "uneven", other ? " (planned target, not this job)" : "");
    if (world <= 64) std::fputs(describe_mesh(shape, other ? nullptr : &topo).c_str(), stdout);
    else std::printf("mesh: %s = %d ranks (tp fastest-varying; per-rank table omitted above 64 ranks)\n", shape.str().c_str(), world);
    print_plan(cfg, dims, in, plan, costs);
  }
  return 0;
}

}  // namespace meshtrain::app
