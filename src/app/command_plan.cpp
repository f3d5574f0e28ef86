// meshtrain plan: the mesh, and for every strategy the per-rank memory by component, the
// communication per step, whether it fits, and which one `auto` picks — without
// allocating the model, for this job or (with --plan.world_size etc.) another cluster.
// When the mesh is left to the planner (mesh keys at -1) it ranks every candidate mesh by
// predicted step time; --json FILE writes the candidates for scripts.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "command_options.hpp"
#include "model/param_spec.hpp"

#include "app/commands.hpp"
#include "app/run_spec_resolve.hpp"
#include "app/source_model_config.hpp"
#include "config/config.hpp"
#include "core/error.hpp"
#include "core/file_io.hpp"
#include "core/format.hpp"
#include "core/log.hpp"
#include "formats/gguf_file.hpp"
#include "model/model_dims.hpp"
#include "plan/cost_model.hpp"
#include "plan/measure.hpp"
#include "plan/mesh_search.hpp"
#include "plan/planner.hpp"
#include "plan/run_setup.hpp"
#include "runtime/mesh.hpp"

namespace meshtrain::app {
namespace {

/// Memory columns print in GiB, or MiB for small models (chosen once per table).
double g_unit = 1073741824.0;
std::string gib(double b) { return strprintf("%.2f", b / g_unit); }

/// The cost model's inputs and where each came from.
void print_costs(const plan::CostModelInputs& costs) {
  std::printf("\ncost model: GEMM %.1f GFLOP/s per rank (%s), copy %.1f GB/s, bus bandwidth %.2f GB/s intra-node, "
              "%.2f GB/s per rank inter-node, ring step latency %.1f us (%s)\n",
              costs.gemm_flops / 1e9, costs.gemm_source.c_str(), costs.copy_bytes / 1e9, costs.intra_bus_bytes / 1e9,
              costs.inter_bus_bytes / 1e9, costs.latency_s * 1e6, costs.bus_source.c_str());
  std::printf("  FSDP communication hidden behind compute: at most %.0f%% (%s); all-reduce as %s\n",
              100.0 * costs.overlap, costs.overlap_source.c_str(), plan::all_reduce_description(costs).c_str());
  if (!costs.sync_s.empty())
    std::printf("  each tensor-parallel all-reduce also waits for its group: %s\n", costs.sync_source.c_str());
}

/// The per-strategy table of a fixed mesh: every strategy's memory, communication and
/// predicted step, the one the resolution took marked.
void print_strategies(const Config& cfg, const plan::PlanInput& in, const std::vector<plan::StrategyPlan>& options,
                      const plan::Resolution& res, const plan::CostModelInputs& costs) {
  const model::ModelDims& dims = in.dims;
  const bool runs = res.refusal.empty();
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
    const char* dtype = in.bf16 ? "bf16" : "fp32";
    // model.base_quant_embeddings=false: the outer unit's matrices are kept in the compute dtype too.
    const char* also_t = dims.base_quant_embeddings ? "" : ", embeddings and LM head (model.base_quant_embeddings=false)";
    std::string held = dims.base_quant == BaseQuant::None
                           ? std::string(dtype)
                           : strprintf("%s (model.base_quant; norm weights%s in %s)", choice_name(dims.base_quant),
                                       also_t, dtype);
    if (dims.base_quant == BaseQuant::Gguf) {
      // Which of the file's block types the matrices keep: "Q4_1 x 210, Q8_0 x 1".
      std::map<std::string, int> types;
      for (const model::ParamSpec& p : model::build_param_specs(dims, 1)) {
        const auto f = dims.base_formats.find(p.name);
        if (f != dims.base_formats.end() && (dims.base_quant_embeddings || p.unit != 0))
          ++types[formats::ggml_type_name(static_cast<formats::GgmlType>(f->second.ggml_type))];
      }
      std::vector<std::string> parts;
      for (const auto& [type, n] : types) parts.push_back(strprintf("%s x %d", type.c_str(), n));
      held = strprintf("the GGUF file's own blocks (model.base_quant=gguf: matrices %s; norm weights%s in %s)",
                       join(parts, ", ").c_str(), also_t, dtype);
    }
    std::printf("LoRA: rank %d, alpha %g, targets %s: %lld trainable parameters (%.3f%% of the model); the frozen "
                "base is held in %s without gradients or optimizer state\n",
                dims.lora_rank, dims.lora_alpha, join(dims.lora_targets, ",").c_str(), trainable,
                100.0 * static_cast<double>(trainable) / static_cast<double>(dims.num_params()), held.c_str());
  }
  std::printf("batch: micro_batch %d x seq_len %d, %s, %s%s\n", in.batch.micro_batch, in.batch.seq_len,
              in.batch.global_batch > 0 ? strprintf("global_batch %d", in.batch.global_batch).c_str()
                                        : strprintf("grad_accum %d", in.batch.grad_accum).c_str(),
              in.bf16 ? "bf16" : "fp32", in.activation_checkpointing ? ", activation checkpointing" : "");
  std::printf("memory budget: %s per rank, %.0f%% kept free\n\n", format_bytes(in.memory_budget).c_str(),
              100 * in.headroom);
  double largest = 0;
  for (const auto& p : options)
    if (p.valid) largest = std::max(largest, p.memory.total());
  g_unit = largest >= 1073741824.0 ? 1073741824.0 : 1048576.0;
  const char* unit = g_unit > 1048576.0 ? "GiB" : "MiB";
  std::printf("per-rank memory (%s) and communication per optimizer step (%s):\n", unit, unit);
  std::printf("  %-14s %-13s %7s %7s %7s %8s %8s %8s %7s %8s  %-4s %10s %10s %9s %9s\n", "strategy", "mesh r x s x t",
              "params", "grads", "optim", "gathered", "grad_buf", "activ", "comm", "total", "fits", "fsdp",
              "tp", "step s", "tok/s");
  for (const plan::StrategyPlan& p : options) {
    if (!p.valid) {
      std::printf("  %-14s not possible: %s\n", parallel::strategy_name(p.strategy), p.note.c_str());
      continue;
    }
    const plan::MemoryEstimate& m = p.memory;
    const plan::StepPrediction pred = plan::predict_step(in, p, costs);
    // The marker names who chose the row: auto's pick, or the configured strategy.
    const bool taken = runs && p.strategy == res.setup.strategy;
    const char* marker = cfg.parallel.strategy == StrategyChoice::Auto ? "   <- auto" : "   <- configured";
    std::printf("  %-14s %-13s %7s %7s %7s %8s %8s %8s %7s %8s  %-4s %10s %10s %9.3f %9.0f%s\n",
                parallel::strategy_name(p.strategy),
                strprintf("%d x %d x %d", p.mesh_shape.dp_replicate, p.mesh_shape.dp_shard, p.mesh_shape.tp).c_str(), gib(m.params).c_str(),
                gib(m.grads).c_str(), gib(m.optimizer).c_str(), gib(m.gathered).c_str(), gib(m.grad_buffers).c_str(),
                gib(m.activations).c_str(), gib(m.comm_buffers).c_str(), gib(m.total()).c_str(), p.fits ? "yes" : "NO",
                gib(p.comm.fsdp_gather + p.comm.fsdp_reduce + p.comm.replicate).c_str(), gib(p.comm.tp).c_str(),
                pred.step_seconds_overlap, pred.tokens_per_s, taken ? marker : "");
  }
  if (dims.lora_rank > 0) {
    // The frozen base alone: its share of 'params' and of the all-gathers ('fsdp').
    // With the per-rank total in bytes: what summary.json's peak_by_category.total_in_use
    // measures (perf/bench_qlora_memory.sh compares the two).
    std::printf("\nfrozen base (%s): per-rank bytes at rest and all-gathered bytes per optimizer step (received per rank), "
                "and the per-rank total:\n",
                dims.base_quant == BaseQuant::None ? (in.bf16 ? "bf16" : "fp32") : choice_name(dims.base_quant));
    for (const plan::StrategyPlan& p : options)
      if (p.valid)
        std::printf("  %-14s frozen %12.0f B (%s)  frozen_gather %12.0f B (%s)  total %12.0f B (%s)\n",
                    parallel::strategy_name(p.strategy), p.memory.frozen, format_bytes(p.memory.frozen).c_str(),
                    p.comm.frozen_gather, format_bytes(p.comm.frozen_gather).c_str(), p.memory.total(),
                    format_bytes(p.memory.total()).c_str());
  }
  std::printf("\npredicted optimizer-step time by term (seconds; the cost model of doc/perf.md):\n");
  std::printf("  %-14s %9s %11s %9s %9s %10s %9s\n", "strategy", "gemm", "elementwise", "fsdp_comm", "tp_comm",
              "no_overlap", "overlap");
  for (const plan::StrategyPlan& p : options) {
    if (!p.valid) continue;
    const plan::StepPrediction pred = plan::predict_step(in, p, costs);
    std::printf("  %-14s %9.4f %11.4f %9.4f %9.4f %10.4f %9.4f\n", parallel::strategy_name(p.strategy), pred.gemm_s,
                pred.elementwise_s, pred.fsdp_comm_s, pred.tp_comm_s, pred.step_seconds_no_overlap,
                pred.step_seconds_overlap);
  }
  if (!runs) std::printf("\ntrain would refuse this job: %s\n", res.refusal.c_str());
  else if (cfg.parallel.strategy == StrategyChoice::Auto)  // a resume's kept choice says "auto: kept ..." itself
    std::printf("\n%s%s\n", res.setup.strategy_reason.rfind("auto: ", 0) == 0 ? "" : "auto: ",
                res.setup.strategy_reason.c_str());
  else std::printf("\nconfigured: parallel.strategy = %s\n", choice_name(cfg.parallel.strategy));
  print_costs(costs);
  if (costs.adamw_s_per_elem > 0)
    std::printf("  elementwise = AdamW %.2f ns/element (measured) + MLP activation fwd+bwd %.2f ns/element (measured) + "
                "other kernels' bytes / copy bandwidth\n",
                costs.adamw_s_per_elem * 1e9, costs.activation_s_per_elem * 1e9);
  std::printf("step s = predicted optimizer-step time with FSDP communication overlapped behind compute "
              "(tensor-parallel all-reduces exposed); see doc/perf.md\n");
}


std::string mesh_shape_text(const MeshShape& m) { return strprintf("%d x %d x %d", m.dp_replicate, m.dp_shard, m.tp); }

std::string candidate_text(const plan::Candidate& c) {
  return strprintf("%s on %s (dp_replicate x dp_shard x tp), micro_batch %d%s", parallel::strategy_name(c.plan.strategy),
                   mesh_shape_text(c.plan.mesh_shape).c_str(), c.plan.batch.micro_batch,
                   c.plan.activation_checkpointing ? ", activation checkpointing" : "");
}

/// The keys that reproduce a candidate (to paste into a config or a command line).
std::string candidate_keys(const plan::Candidate& c) {
  return strprintf("--parallel.strategy=%s --parallel.dp_replicate=%d --parallel.dp_shard=%d --parallel.tp=%d "
                   "--train.micro_batch=%d --train.activation_checkpointing=%s",
                   parallel::strategy_name(c.plan.strategy), c.plan.mesh_shape.dp_replicate, c.plan.mesh_shape.dp_shard,
                   c.plan.mesh_shape.tp, c.plan.batch.micro_batch, c.plan.activation_checkpointing ? "true" : "false");
}

void print_search(const plan::MeshSearch& ms, const plan::PlanInput& in, int top) {
  std::printf("\nmesh search: %zu candidates (strategy x dp_replicate x dp_shard x tp x checkpointing x micro-batch), "
              "fastest predicted first; memory per rank of %s usable:\n",
              ms.candidates.size(), format_bytes(in.memory_budget * (1 - in.headroom)).c_str());
  std::printf("  %4s %-14s %-13s %3s %3s %9s %4s %8s %8s %8s %8s %8s %9s %12s\n", "rank", "strategy", "mesh r x s x t",
              "ac", "mb", "mem GiB", "fits", "compute", "fsdp", "exposed", "replic", "tp", "step s", "tok/s");
  int shown = 0;
  for (std::size_t i = 0; i < ms.candidates.size(); ++i) {
    const bool is_chosen = static_cast<int>(i) == ms.chosen;
    if (shown >= top && !is_chosen) continue;
    const plan::Candidate& c = ms.candidates[i];
    std::printf("  %4zu %-14s %-13s %3s %3d %9.2f %4s %8.3f %8.3f %8.3f %8.3f %8.3f %9.3f %12.0f%s\n", i + 1,
                parallel::strategy_name(c.plan.strategy), mesh_shape_text(c.plan.mesh_shape).c_str(),
                c.plan.activation_checkpointing ? "yes" : "no", c.plan.batch.micro_batch, c.plan.memory.total() / 1073741824.0,
                c.plan.fits ? "yes" : "NO", c.pred.compute_s, c.pred.fsdp_comm_s, c.pred.exposed_fsdp_s,
                c.pred.replicate_comm_s, c.pred.tp_comm_s, c.pred.step_seconds_overlap, c.pred.tokens_per_s,
                is_chosen ? "   <- chosen" : "");
    ++shown;
  }
  std::printf("  (compute = GEMM + elementwise; fsdp = shard-group gathers and reductions, of which 'exposed' does not hide "
              "behind compute; replic = the replicate all-reduce after backward; tp = tensor-parallel all-reduces)\n");
}

nlohmann::json candidate_json(const plan::Candidate& c) {
  return {{"strategy", parallel::strategy_name(c.plan.strategy)},
          {"dp_replicate", c.plan.mesh_shape.dp_replicate},
          {"dp_shard", c.plan.mesh_shape.dp_shard},
          {"tp", c.plan.mesh_shape.tp},
          {"activation_checkpointing", c.plan.activation_checkpointing},
          {"micro_batch", c.plan.batch.micro_batch},
          {"grad_accum", c.plan.batch.grad_accum},
          {"memory_bytes", c.plan.memory.total()},
          {"fits", c.plan.fits},
          {"step_s", c.pred.step_seconds_overlap},
          {"tokens_per_s", c.pred.tokens_per_s},
          {"compute_s", c.pred.compute_s},
          {"gemm_s", c.pred.gemm_s},
          {"attention_s", c.pred.attention_s},
          {"elementwise_s", c.pred.elementwise_s},
          {"fsdp_comm_s", c.pred.fsdp_comm_s},
          {"exposed_fsdp_s", c.pred.exposed_fsdp_s},
          {"replicate_comm_s", c.pred.replicate_comm_s},
          {"tp_comm_s", c.pred.tp_comm_s}};
}

/// Writes the search as JSON: the target, every candidate, the pick under `chosen` (null
/// when nothing fits). Written to FILE.tmp and renamed, so a reader never sees half a file.
void write_json(const std::string& path, int world, int rpn, const plan::PlanInput& in, const plan::MeshSearch& ms,
                const plan::MeshSearch* unrestricted) {
  nlohmann::json j;
  j["world_size"] = world;
  j["ranks_per_node"] = rpn;
  j["memory_budget_bytes"] = in.memory_budget;
  j["memory_usable_bytes"] = in.memory_budget * (1 - in.headroom);
  j["global_batch"] = in.batch.global_batch;
  j["seq_len"] = in.batch.seq_len;
  j["candidates"] = nlohmann::json::array();
  for (const auto& c : ms.candidates) j["candidates"].push_back(candidate_json(c));
  j["chosen"] = ms.chosen >= 0 ? candidate_json(ms.candidates[ms.chosen]) : nlohmann::json(nullptr);
  j["reason"] = ms.reason;
  if (unrestricted != nullptr && unrestricted->chosen >= 0)
    j["best_unrestricted"] = candidate_json(unrestricted->candidates[unrestricted->chosen]);
  file_io::replace_file(path, j.dump(1) + "\n");  // temp + fsync + rename: never a torn file
}

/// The options of `plan` beyond the configuration.
struct PlanOptions {
  std::string json_path;
  int top = 10;
  CommandArgs args;
};

/// Parses the command line; nullopt after printing --help.
std::optional<PlanOptions> parse_plan_options(const Runtime& rt, const Args& args) {
  PlanOptions o;
  namespace po = boost::program_options;
  po::options_description own("Options of plan");
  own.add_options()("json", po::value<std::string>(&o.json_path), "also write every candidate mesh and the pick as JSON to FILE")
      ("top", po::value<int>(&o.top)->default_value(o.top), "candidates printed by the mesh search (the chosen one always)");
  const std::string usage =
      "usage: meshtrain plan [CONFIG.ini] [--json FILE] [--top N] [--section.key=value ...]\n\n"
      "Per-rank memory and predicted step time of every strategy and, with the mesh keys left at -1, of every\n"
      "mesh; for this job or, with --plan.world_size and the other plan.* keys, another cluster.\n";
  o.args = parse_command_args("plan", usage, own, args);
  if (answer_help(rt, o.args.config)) return std::nullopt;
  MESHTRAIN_REQUIRE(o.top >= 0, "--top must be >= 0, not %d", o.top);
  return o;
}

/// A fixed mesh is checked first (a tp larger than a node is a mesh error, whatever the
/// model); with tp left to the planner (-1) only tp values that split the model are
/// candidates. Without a config file the model is the default GPT-2 124M, whose odd
/// vocabulary splits over no tp: the error says so.
void check_mesh_request(const Config& cfg, const plan::RunSpec& spec, const plan::JobShape& job) {
  const MeshRequest& asked = spec.parallel.mesh_request;
  const std::optional<int> rpn = job.ranks_per_node > 0 ? std::optional<int>(job.ranks_per_node) : std::nullopt;
  if (!plan::searches_mesh(spec)) resolve_mesh_shape(asked, job.world, rpn);
  const int fixed_tp = asked.tp > 0 ? asked.tp : 1;
  try {
    model::tp_dims(spec.dims, fixed_tp, 0);  // heads, MLP width and vocabulary must split over tp
  } catch (const UserError& e) {
    if (!cfg.source_file.empty()) throw;
    throw UserError(strprintf("%s (no config file was given, so the model is the default GPT-2 124M with %lld "
                              "tokens; give a config, e.g. `meshtrain plan inputs/tiny-gpt2.ini --parallel.tp=%d`)",
                              e.what(), static_cast<long long>(spec.dims.valid_vocab), fixed_tp));
  }
}

/// Planning another machine with some of its ceilings missing: those terms use this
/// machine's measurements, which can be far off (a laptop's copy bandwidth for an HBM GPU).
void warn_missing_ceilings(const plan::PlanTarget& target) {
  const bool planning_target = target.other_cluster() || target.device_memory || target.gemm_tflops > 0 ||
                               target.has_bus() || target.mem_gbps > 0;
  std::vector<std::string> missing;
  if (target.gemm_tflops <= 0) missing.push_back("plan.gemm_tflops");
  if (!target.has_bus()) missing.push_back("plan.bus_gbps");
  if (target.mem_gbps <= 0) missing.push_back("plan.mem_gbps");
  if (planning_target && !missing.empty())
    log::warn("planning another machine, but %s %s not set: %s measured on this machine (see the cost model lines "
              "at the end)",
              join(missing, ", ").c_str(), missing.size() == 1 ? "is" : "are",
              missing.size() == 1 ? "that ceiling is" : "those ceilings are");
}

/// The candidates `plan` lists and marks: the resolution's own ranking when it consulted the
/// cost model, otherwise (one rank, or a forced strategy on a fixed mesh) the same strategies
/// ranked for display, with the resolution's pick marked as chosen.
plan::MeshSearch shown_ranking(const plan::RunSpec& spec, const plan::Resolution& res, const plan::CostModelInputs& costs) {
  if (!res.ranking.candidates.empty() || res.searched) return res.ranking;
  plan::MeshSearch ms = plan::rank_strategies(res.input, plan::search_space(spec).strategies, costs);
  ms.chosen = -1;
  for (std::size_t i = 0; res.refusal.empty() && i < ms.candidates.size(); ++i)
    if (ms.candidates[i].plan.strategy == res.setup.strategy) ms.chosen = static_cast<int>(i);
  ms.reason = res.refusal.empty() ? res.setup.strategy_reason : res.refusal;
  return ms;
}

/// The best candidate with nothing fixed (strategy, mesh and checkpointing left to the
/// planner), by the same rule: what freeing the keys would buy.
plan::MeshSearch unrestricted_search(const plan::RunSpec& spec, const plan::PlanInput& in,
                                     const plan::CostModelInputs& costs) {
  plan::RunSpec free_spec = spec;
  free_spec.parallel.strategy = StrategyChoice::Auto;
  free_spec.parallel.mesh_request = {-1, -1, -1};
  if (free_spec.batch.micro_batch == 0 && free_spec.batch.global_batch == 0) free_spec.batch.micro_batch = 1;
  plan::PlanInput free_in = in;
  free_in.mesh_request = {-1, -1, -1};
  return plan::search_meshes(free_in, plan::search_space(free_spec), costs);
}


}  // namespace

int command_plan(Runtime& rt, const Args& args) {
  // 1. Options and the run's settings, as `train` reads them.
  std::optional<PlanOptions> o = parse_plan_options(rt, args);
  if (!o) return 0;
  const bool root = rt.topology().world_rank == 0;
  Config& cfg = o->args.config.config;
  // Planning a fine-tune: pretrained weights bring their model's shape, as in `train`.
  if (!cfg.checkpoint.init_from.empty()) adopt_source_model(cfg, cfg.checkpoint.init_from, "checkpoint.init_from");
  if (root && !cfg.deprecation_note.empty()) log::warn("%s", cfg.deprecation_note.c_str());
  const plan::RunSpec spec = resolve_spec(cfg);
  const Topology& topo = rt.topology();
  const plan::JobShape job = plan::planned_job(spec, topo);
  check_mesh_request(cfg, spec, job);
  if (root) warn_missing_ceilings(spec.plan_target);

  // 2. The machine's measurements (or plan.*), then the resolution `train` runs: the same
  // call with the same inputs, so the two cannot disagree.
  plan::MeasureRequest req = plan::measure_request(spec);
  req.on_this_job = !job.other_cluster;
  const plan::CostModelInputs costs = plan::measure_cost_inputs(req, rt);
  // A resume of this run on this job keeps its checkpoint's choices, as `train` does.
  const std::optional<checkpoint::StoredChoices> kept = job.other_cluster ? std::nullopt : resumed_choices(spec, rt);
  const plan::Resolution res =
      plan::resolve(spec, job, plan::needs_costs(spec, job) ? &costs : nullptr, kept ? &*kept : nullptr);
  const plan::MeshSearch shown = shown_ranking(spec, res, costs);
  const plan::PlanInput& in = res.input;
  if (in.document_tokens > 0 && root)
    log::info("data.dir is packed: %.1f tokens per example, attention counted per example (%.0f%% of whole rows)",
              in.document_tokens,
              100.0 * plan::document_attention_fraction(in.batch.seq_len, in.document_tokens, in.attention_rows));
  const MeshRequest& asked = spec.parallel.mesh_request;
  const bool restricted = !res.searched || spec.parallel.strategy != StrategyChoice::Auto || asked.dp_replicate != -1 ||
                          asked.dp_shard != -1 || asked.tp != -1 || spec.train.activation_checkpointing;
  const plan::MeshSearch best = unrestricted_search(spec, in, costs);

  // 3. The report (rank 0).
  if (!root) return 0;
  const int nodes = job.other_cluster ? (job.ranks_per_node > 0 ? (job.world + job.ranks_per_node - 1) / job.ranks_per_node : 1)
                                      : topo.num_nodes;
  std::printf("topology: %d rank(s) on %d node(s), %s ranks per node%s\n", job.world, nodes,
              job.ranks_per_node > 0 ? std::to_string(job.ranks_per_node).c_str() : "uneven",
              job.other_cluster ? " (planned target, not this job)" : "");
  if (res.searched) {
    print_search(shown, in, o->top);
    std::printf("\nchosen: %s\n  why: %s\n", shown.chosen >= 0 ? candidate_text(shown.candidates[shown.chosen]).c_str() : "none",
                res.refusal.empty() ? shown.reason.c_str() : res.refusal.c_str());
  } else {
    // The request the resolution planned (a resume's kept mesh, or the configured one).
    const MeshShape shape = resolve_mesh_shape(in.mesh_request, job.world,
                                         job.ranks_per_node > 0 ? std::optional<int>(job.ranks_per_node) : std::nullopt);
    if (job.world <= 64) std::fputs(describe_mesh_shape(shape, job.other_cluster ? nullptr : &topo).c_str(), stdout);
    else std::printf("mesh: %s = %d ranks (tp fastest-varying; per-rank table omitted above 64 ranks)\n", shape.str().c_str(), job.world);
    print_strategies(cfg, in, plan::plan_each_strategy(in), res, costs);
  }
  if (restricted && best.chosen >= 0) {
    const plan::Candidate& b = best.candidates[best.chosen];
    std::printf("\nwith nothing fixed (strategy, mesh and checkpointing left to the planner) the best is %s: %.3f s per "
                "step, %s per rank\n  keys: %s\n",
                candidate_text(b).c_str(), b.pred.step_seconds_overlap, format_bytes(b.plan.memory.total()).c_str(),
                candidate_keys(b).c_str());
    if (res.searched && shown.chosen >= 0)
      std::printf("  your settings' pick takes %.3f s (%+.1f%%)\n", shown.candidates[shown.chosen].pred.step_seconds_overlap,
                  100.0 * (shown.candidates[shown.chosen].pred.step_seconds_overlap / b.pred.step_seconds_overlap - 1.0));
  }
  if (res.searched) print_costs(costs);
  // `chosen` is what `train` runs on this job (null when it would refuse it).
  if (!o->json_path.empty()) write_json(o->json_path, job.world, job.ranks_per_node > 0 ? job.ranks_per_node : job.world,
                                        in, shown, restricted ? &best : nullptr);
  return 0;
}

}  // namespace meshtrain::app
