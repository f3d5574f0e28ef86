#include "plan/run_setup.hpp"

#include <filesystem>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/log.hpp"
#include "core/memory.hpp"
#include "data/dataset.hpp"
#include "data/text_files.hpp"
#include "kernels/attention.hpp"
#include "plan/measure.hpp"
#include "plan/mesh_search.hpp"

namespace meshtrain::plan {

namespace {

/// A rank's memory on this machine: the device's (GPU), else node RAM / ranks per node.
double this_machine_per_rank(const RunSpec& spec, const Topology& topo, bool other) {
  const double device = static_cast<double>(device_memory_bytes());
  if (device > 0) return device;
  const int per_node = other && spec.plan_target.gpus_per_node > 0 ? spec.plan_target.gpus_per_node : topo.local_size;
  return static_cast<double>(host_total_memory_bytes()) / std::max(1, per_node);
}

struct Budget {
  double bytes = 0;
  std::string source;  ///< where the number comes from, in words for messages
};

/// The cluster `plan` is asked about: plan.device_memory is its devices' memory. This job:
/// its own limit (parallel.memory_limit) first, and plan.device_memory -- the target's, as
/// in a config written for planning -- never above what this machine has, so that a run
/// is not planned into memory it does not have.
Budget budget_of(const RunSpec& spec, const Topology& topo, bool other) {
  const auto& target = spec.plan_target.device_memory;
  const auto& limit = spec.parallel.memory_limit;
  if (other && target) return {static_cast<double>(target->bytes), "plan.device_memory=" + target->text};
  if (limit) return {static_cast<double>(limit->bytes), "parallel.memory_limit=" + limit->text};
  const double here = this_machine_per_rank(spec, topo, other);
  const std::string here_source = device_memory_bytes() > 0 ? "the device's memory"
                                                             : "node memory / ranks per node; parallel.memory_limit sets it";
  if (target) {
    if (here > 0 && static_cast<double>(target->bytes) > here)
      return {here, here_source + " (plan.device_memory=" + target->text + " is more than this machine has per rank)"};
    return {static_cast<double>(target->bytes), "plan.device_memory=" + target->text};
  }
  return {here, here_source};
}

}  // namespace

double memory_budget_per_rank(const RunSpec& spec, const Topology& topo, bool other) {
  return budget_of(spec, topo, other).bytes;
}

namespace {

/// A packed dataset's mean tokens per example (from its meta.json), for the cost model's
/// attention term; 0 for random data, a dataset that is not packed, or none yet (plan runs
/// before prepare too).
double packed_document_tokens(const data::DataSource& src) {
  if (src.is_random() || src.dir.empty()) return 0;
  const std::string path = (std::filesystem::path(src.dir) / "meta.json").string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return 0;
  const data::DatasetMeta m = data::meta_from_json(data::read_file_bytes(path), path);
  const double examples = static_cast<double>(m.train_examples + m.val_examples);
  if (!m.packed || examples <= 0) return 0;
  return m.fill_fraction * static_cast<double>(m.train_rows + m.val_rows) * m.row_tokens / examples;
}

}  // namespace

PlanInput plan_input(const RunSpec& spec, const JobShape& job) {
  PlanInput in;
  in.dims = spec.dims;
  in.world = job.world;
  in.ranks_per_node = job.ranks_per_node;
  in.mesh_request = spec.parallel.mesh_request;
  in.batch = spec.batch;
  in.bf16 = spec.train.bf16();
  in.activation_checkpointing = spec.train.activation_checkpointing;
  in.reduce_dtype = spec.parallel.reduce_dtype;
  in.prefetch = spec.parallel.prefetch;
  in.memory_budget = job.memory_budget;
  in.headroom = spec.parallel.memory_headroom;
  // The attention's scratch strips are as tall as the kernels' row blocks where the run
  // goes: this build's, unless `plan` is given a GPU target (plan.gemm_tflops), whose
  // kernels take the whole sequence at once.
  in.attention_rows = spec.plan_target.gemm_tflops > 0 ? spec.batch.seq_len : kernels::attention_block_rows(spec.batch.seq_len);
  // Packed rows compute only each document's attention (train and plan alike).
  in.document_tokens = packed_document_tokens(spec.data);
  in.dpo = spec.train.preference();
  in.simpo = spec.train.simpo();
  in.use = spec.use;
  in.kv_cache_positions = spec.kv_cache_positions;
  return in;
}

JobShape this_job(const RunSpec& spec, const Topology& topo) {
  JobShape j;
  j.world = topo.world_size;
  j.ranks_per_node = topo.uniform() ? topo.local_size : 0;
  const Budget b = budget_of(spec, topo, false);
  j.memory_budget = b.bytes;
  j.memory_source = b.source;
  return j;
}

JobShape planned_job(const RunSpec& spec, const Topology& topo) {
  const PlanTarget& target = spec.plan_target;
  if (!target.other_cluster()) {
    JobShape j = this_job(spec, topo);
    if (target.gpus_per_node > 0) j.ranks_per_node = target.gpus_per_node;
    // `plan` on this job's ranks for devices of plan.device_memory: the target's, as given.
    if (target.device_memory) {
      j.memory_budget = static_cast<double>(target.device_memory->bytes);
      j.memory_source = "plan.device_memory=" + target.device_memory->text;
    }
    return j;
  }
  JobShape j;
  j.world = target.world_size;
  j.ranks_per_node = target.gpus_per_node > 0 ? target.gpus_per_node : target.world_size;
  const Budget b = budget_of(spec, topo, true);
  j.memory_budget = b.bytes;
  j.memory_source = b.source;
  j.other_cluster = true;
  return j;
}

namespace {

StrategyChoice choice_of(parallel::Strategy s) {
  switch (s) {
    case parallel::Strategy::FullShard: return StrategyChoice::FullShard;
    case parallel::Strategy::ShardGradOp: return StrategyChoice::ShardGradOp;
    case parallel::Strategy::NoShard: return StrategyChoice::NoShard;
    case parallel::Strategy::HybridShard: return StrategyChoice::HybridShard;
  }
  return StrategyChoice::Auto;
}

/// Whether the search chooses activation checkpointing (a search, and the key not forced on).
bool checkpointing_open(const RunSpec& spec) { return searches_mesh(spec) && !spec.train.activation_checkpointing; }

/// Whether the spec leaves anything to the resolution that a checkpoint recorded.
bool leaves_open(const RunSpec& spec) {
  const MeshRequest& asked = spec.parallel.mesh_request;
  return spec.parallel.strategy == StrategyChoice::Auto || asked.dp_replicate < 0 || asked.dp_shard < 0 ||
         asked.tp < 0 || spec.batch.micro_batch == 0 || checkpointing_open(spec);
}

/// Whether every key the user fixed still says what the checkpoint's run used: a key changed
/// at resume is a new request, which is planned afresh.
bool agrees_with_fixed_keys(const RunSpec& spec, const checkpoint::StoredChoices& k) {
  const MeshRequest& asked = spec.parallel.mesh_request;
  const bool strategy =
      spec.parallel.strategy == StrategyChoice::Auto || parallel::forced_strategy(spec.parallel.strategy) == k.strategy;
  const bool shape = (asked.dp_replicate < 0 || asked.dp_replicate == k.mesh_shape.dp_replicate) &&
                     (asked.dp_shard < 0 || asked.dp_shard == k.mesh_shape.dp_shard) &&
                     (asked.tp < 0 || asked.tp == k.mesh_shape.tp);
  const bool micro = spec.batch.micro_batch == 0 || spec.batch.micro_batch == k.micro_batch;
  const bool ac = checkpointing_open(spec) || spec.train.activation_checkpointing == k.activation_checkpointing;
  return strategy && shape && micro && ac;
}

}  // namespace

bool keeps(const RunSpec& spec, const JobShape& job, const checkpoint::StoredChoices* kept) {
  return kept != nullptr && kept->recorded && !job.other_cluster && kept->world_size == job.world &&
         kept->ranks_per_node == job.ranks_per_node && kept->mesh_shape.world() == job.world && leaves_open(spec) &&
         agrees_with_fixed_keys(spec, *kept);
}

RunSpec kept_spec(const RunSpec& spec, const checkpoint::StoredChoices& kept) {
  RunSpec k = spec;
  k.parallel.strategy = choice_of(kept.strategy);
  k.parallel.mesh_request = {kept.mesh_shape.dp_replicate, kept.mesh_shape.dp_shard, kept.mesh_shape.tp};
  k.batch.micro_batch = kept.micro_batch;
  if (checkpointing_open(spec)) k.train.activation_checkpointing = kept.activation_checkpointing;
  return k;
}

bool needs_costs(const RunSpec& spec, const JobShape& job, const checkpoint::StoredChoices* kept) {
  if (keeps(spec, job, kept)) return false;  // nothing is chosen (unless it no longer fits: resolve_run)
  // On one rank every strategy moves nothing and predicts the same step, whatever the
  // machine: the rule's tie-break decides without a measurement.
  return searches_mesh(spec) || (spec.parallel.strategy == StrategyChoice::Auto && job.world > 1);
}

namespace {

/// The error of a forced strategy that needs more than the whole budget: the numbers and
/// what would fit.
std::string over_budget_refusal(const RunSpec& spec, const PlanInput& in, const StrategyPlan& chosen, double budget,
                                const std::string& budget_source) {
  const std::string alternatives = fit_alternatives(in, chosen.strategy);
  if (in.forward_only()) {
    // A forward pass holds no gradients or optimizer state: they are not named.
    return strprintf(
        "parallel.strategy=%s on mesh %s needs %s per rank for a forward pass (parameters %s, activations %s%s, "
        "gathered buffers %s), more than the %s available per rank (%s); %s%s",
        choice_name(spec.parallel.strategy), chosen.mesh_shape.str().c_str(), format_bytes(chosen.memory.total()).c_str(),
        format_bytes(chosen.memory.params).c_str(), format_bytes(chosen.memory.activations).c_str(),
        in.kv_cache_positions > 0 ? " with the KV cache" : "",
        format_bytes(chosen.memory.gathered + chosen.memory.comm_buffers).c_str(), format_bytes(budget).c_str(),
        budget_source.c_str(), alternatives.empty() ? "" : ("what would fit: " + alternatives + "; or ").c_str(),
        forward_memory_settings(in).c_str());
  }
  return strprintf(
      "parallel.strategy=%s on mesh %s needs %s per rank (parameters %s, gradients %s, optimizer %s, "
      "activations %s, gathered/communication buffers %s), more than the %s available per rank (%s); %s%s",
      choice_name(spec.parallel.strategy), chosen.mesh_shape.str().c_str(), format_bytes(chosen.memory.total()).c_str(),
      format_bytes(chosen.memory.params).c_str(), format_bytes(chosen.memory.grads).c_str(),
      format_bytes(chosen.memory.optimizer).c_str(), format_bytes(chosen.memory.activations).c_str(),
      format_bytes(chosen.memory.gathered + chosen.memory.grad_buffers + chosen.memory.comm_buffers).c_str(),
      format_bytes(budget).c_str(), budget_source.c_str(),
      alternatives.empty() ? "nothing fits this job: use more ranks, bf16, a smaller train.micro_batch or "
                             "train.seq_len, or a smaller model"
                           : "what would fit: ",
      alternatives.c_str());
}

/// Why no strategy runs on the configured mesh: none is possible, or the smallest does not fit.
std::string no_fit_reason(const std::vector<StrategyPlan>& each, const PlanInput& in) {
  const StrategyPlan* least = nullptr;
  for (const auto& p : each)
    if (p.valid && (!least || p.memory.total() < least->memory.total())) least = &p;
  if (least == nullptr) return "no strategy can run this configuration: " + each.back().note;
  if (in.forward_only())
    return strprintf("no strategy fits the memory budget (the smallest, %s, needs %s per rank of %s usable for a "
                     "forward pass): %s",
                     parallel::strategy_name(least->strategy), format_bytes(least->memory.total()).c_str(),
                     format_bytes(in.memory_budget * (1 - in.headroom)).c_str(), forward_memory_settings(in).c_str());
  return strprintf("no strategy fits the memory budget (the smallest, %s, needs %s per rank of %s usable): "
                   "add ranks, use train.activation_checkpointing=true, a smaller train.micro_batch, or bf16",
                   parallel::strategy_name(least->strategy), format_bytes(least->memory.total()).c_str(),
                   format_bytes(in.memory_budget * (1 - in.headroom)).c_str());
}

/// The candidate the resolution takes, or the refusal: by the `auto` rule over `ranking`
/// (a mesh search, or auto on a fixed mesh), or the forced strategy on the configured mesh.
std::optional<StrategyPlan> choose(const RunSpec& spec, const JobShape& job, const PlanInput& in,
                                   const MeshSearch* ranking, Resolution& res) {
  if (res.searched) {
    if (ranking->chosen < 0) {
      res.refusal = strprintf("the planner found no mesh for this job: %s", ranking->reason.c_str());
      return std::nullopt;
    }
    res.setup.strategy_reason = "planner: " + ranking->reason;
    return ranking->candidates[ranking->chosen].plan;
  }
  if (spec.parallel.strategy == StrategyChoice::Auto) {
    if (ranking != nullptr && ranking->chosen >= 0) {
      res.setup.strategy_reason = ranking->reason;
      return ranking->candidates[ranking->chosen].plan;
    }
    const std::vector<StrategyPlan> each = plan_each_strategy(in);
    if (ranking == nullptr) {
      // One rank, nothing measured: every strategy predicts the same step, so the rule's
      // tie-break decides -- the first that fits in the least-communication order.
      for (std::size_t i = 0; i < each.size(); ++i) {
        if (!each[i].valid || !each[i].fits) continue;
        std::string& why = res.setup.strategy_reason;
        why = strprintf("%s is the least-communication strategy that fits: %s per rank of %s usable",
                        parallel::strategy_name(each[i].strategy), format_bytes(each[i].memory.total()).c_str(),
                        format_bytes(in.memory_budget * (1 - in.headroom)).c_str());
        for (std::size_t j = 0; j < i; ++j)
          if (each[j].valid)
            why += strprintf("; %s does not fit (%s)", parallel::strategy_name(each[j].strategy), each[j].note.c_str());
        return each[i];
      }
    }
    res.refusal = "parallel.strategy=auto: " + no_fit_reason(each, in);
    return std::nullopt;
  }
  const parallel::Strategy s = parallel::forced_strategy(spec.parallel.strategy);
  StrategyPlan chosen = plan_strategy(in, s, mesh_shape_for_strategy(in, s));
  if (!chosen.valid) {
    res.refusal = strprintf("parallel.strategy=%s: %s", choice_name(spec.parallel.strategy), chosen.note.c_str());
    return std::nullopt;
  }
  res.setup.strategy_reason = "set by parallel.strategy";
  // Allocating more than the whole budget would end in std::bad_alloc (or an out-of-memory
  // kill) on some rank part-way through start-up; refuse it now, with the numbers.
  if (in.memory_budget > 0 && chosen.memory.total() > in.memory_budget) {
    res.refusal = over_budget_refusal(spec, in, chosen, in.memory_budget, job.memory_source);
    return std::nullopt;
  }
  return chosen;
}

}  // namespace

namespace {

/// The resolution with every open choice fixed to the checkpoint's (the forced-strategy
/// path: nothing measured); nullopt when that no longer fits the usable memory, as `auto`
/// requires of its own picks (a smaller parallel.memory_limit, a device with less).
std::optional<Resolution> resolve_kept(const RunSpec& spec, const JobShape& job, const checkpoint::StoredChoices& kept) {
  Resolution k = resolve(kept_spec(spec, kept), job, nullptr, nullptr);
  if (!k.refusal.empty() || !plan_strategy(k.input, k.setup.strategy, k.setup.mesh_shape).fits) return std::nullopt;
  k.setup.spec = spec;  // the settings as asked stay as asked (config.ini, run.json)
  k.setup.strategy_reason =
      strprintf("%s: kept from the checkpoint %s, written on this job's shape (%d rank(s), %s per node); a resume on "
                "another rank count plans afresh",
                spec.parallel.strategy == StrategyChoice::Auto ? "auto" : "planner", kept.path.c_str(), job.world,
                job.ranks_per_node > 0 ? std::to_string(job.ranks_per_node).c_str() : "uneven");
  return k;
}

}  // namespace

Resolution resolve(const RunSpec& spec, const JobShape& job, const CostModelInputs* costs,
                   const checkpoint::StoredChoices* kept) {
  if (keeps(spec, job, kept))
    if (std::optional<Resolution> k = resolve_kept(spec, job, *kept)) return *k;
  // No choices to keep, or they no longer fit (a smaller memory limit): planned afresh.
  Resolution res;
  RunSetup& r = res.setup;
  r.spec = spec;
  MESHTRAIN_REQUIRE(spec.batch.seq_len <= spec.dims.max_seq_len, "train.seq_len=%d is longer than model.max_seq_len=%d",
                    spec.batch.seq_len, spec.dims.max_seq_len);
  r.memory_budget = job.memory_budget;
  r.ranks_per_node = job.ranks_per_node;
  res.input = plan_input(spec, job);
  res.searched = searches_mesh(spec);
  MESHTRAIN_REQUIRE(costs != nullptr || !needs_costs(spec, job), "internal: choosing the strategy needs the cost model's inputs");

  // 1. The candidates, ranked by the one `auto` rule (when the cost model is at hand).
  const MeshSearch* ranking = nullptr;
  if (costs != nullptr) {
    if (res.searched) {
      res.ranking = search_meshes(res.input, search_space(spec), *costs);
    } else {
      res.ranking = rank_strategies(res.input, search_space(spec).strategies, *costs);
    }
    ranking = &res.ranking;
  }
  // 2. The pick (or why nothing runs).
  const std::optional<StrategyPlan> chosen = choose(spec, job, res.input, ranking, res);
  if (!chosen) return res;
  // 3. The resolved block, each value once.
  r.strategy = chosen->strategy;
  r.mesh_shape = chosen->mesh_shape;
  r.batch = chosen->batch;
  r.activation_checkpointing = chosen->activation_checkpointing;
  r.memory_planned = chosen->memory.total();
  model::tp_dims(spec.dims, r.mesh_shape.tp, 0);  // the TP slice (heads, vocabulary) splits on the resolved mesh
  return res;
}

RunSetup resolve_run(const RunSpec& spec, const Topology& topo, const CostModelInputs* costs,
                     const checkpoint::StoredChoices* kept) {
  const Resolution res = resolve(spec, this_job(spec, topo), costs, kept);
  if (!res.refusal.empty()) throw UserError(res.refusal);
  const RunSetup& r = res.setup;
  if (spec.parallel.strategy != StrategyChoice::Auto && !res.searched) {
    const StrategyPlan p = plan_strategy(res.input, r.strategy, r.mesh_shape);
    if (!p.fits)
      log::warn("parallel.strategy=%s may not fit in memory: %s (parallel.memory_limit or the device size sets the budget)",
                choice_name(spec.parallel.strategy), p.note.c_str());
  }
  return r;
}

RunSetup resolve_run(const RunSpec& spec, const Runtime& rt, const checkpoint::StoredChoices* kept) {
  const JobShape job = this_job(spec, rt.topology());
  if (keeps(spec, job, kept)) {
    if (std::optional<Resolution> k = resolve_kept(spec, job, *kept)) return k->setup;
    log::info("the checkpoint %s ran %s on mesh %s, which no longer fits this job's memory: planning afresh",
              kept->path.c_str(), parallel::strategy_name(kept->strategy), kept->mesh_shape.str().c_str());
  }
  if (!needs_costs(spec, job)) return resolve_run(spec, rt.topology());
  const CostModelInputs costs = measure_cost_inputs(measure_request(spec), rt);
  return resolve_run(spec, rt.topology(), &costs);
}

}  // namespace meshtrain::plan
