#pragma once
/// \brief The memory and communication model of one strategy on one mesh, behind
/// `parallel.strategy = auto` and `meshtrain plan`. It builds the same flat layouts the FSDP
/// engine allocates (so the persistent bytes are exact, not estimated) and models the
/// transient peaks (gathered parameters, gradient buffers, activations, communication
/// buffers) of one micro-step. No model memory is allocated: a 70B job can be planned on a
/// laptop. Which candidate `auto` takes is plan/mesh_search.hpp's rule (the fastest predicted
/// that fits); this file only says what each candidate needs.

#include <algorithm>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "model/model_dims.hpp"
#include "parallel/strategy.hpp"
#include "plan/run_spec.hpp"
#include "runtime/mesh.hpp"

namespace meshtrain::plan {

struct PlanInput {
  model::ModelDims dims;
  int world = 1;
  int ranks_per_node = 1;
  MeshRequest mesh_request;            ///< as configured (tp, dp_shard, dp_replicate)
  /// As requested (BatchSpec::resolved splits it for a candidate's dp); micro_batch is the
  /// candidate's (the mesh search sets it).
  BatchSpec batch{1, 1, 1, 0};
  bool bf16 = false;
  bool activation_checkpointing = false;
  bool dpo = false;            ///< train.objective = dpo or simpo: the step's extra forward passes (model/step_flops.hpp)
  bool simpo = false;          ///< train.objective = simpo: no reference forward
  DType reduce_dtype = DType::F32;
  int prefetch = 1;
  double memory_budget = 0;    ///< bytes per rank
  double headroom = 0.15;
  /// Query rows of one attention score strip on the target (kernels::attention_block_rows
  /// there); 0 = this build's.
  int attention_rows = 0;
  /// Packed rows (prepare --pack): the mean tokens of a document (example); 0 = one document
  /// fills each row. The cost model counts the attention the kernels then compute.
  double document_tokens = 0;
  /// eval, generate: forward passes of `batch` only -- the parameters as held on the mesh,
  /// one block's forward transients, the head's logits chunk and generate's KV cache; no
  /// gradients, optimizer state, gradient buffers or saved activations.
  ModelUse use = ModelUse::Train;
  /// generate: positions of its KV cache per sequence (0: none), batch.micro_batch sequences.
  int kv_cache_positions = 0;
  bool forward_only() const { return use != ModelUse::Train; }
  /// The tokens per rank of the forward pass the cost model times for eval and generate (the
  /// "step" they are ranked by): eval's micro-batch of windows; for generate one token of
  /// each sequence -- a position against the KV cache, or without one the whole sequence
  /// again (what each new token costs).
  double forward_tokens() const {
    const double sequences = batch.micro_batch;
    return use == ModelUse::Generate && kv_cache_positions > 0 ? sequences : sequences * batch.seq_len;
  }
};

/// Per-rank bytes by component.
struct MemoryEstimate {
  double params = 0, grads = 0, optimizer = 0;    ///< persistent
  /// Part of params: the frozen (LoRA base) shards, no grads/moments: in the compute dtype,
  /// or quantized (model.base_quant: payload, NF4 group maxima, block runs, and the 1-D
  /// parameters of the whole segment in the compute dtype; parallel/quantized_base.hpp).
  double frozen = 0;
  double gathered = 0, grad_buffers = 0;          ///< transient parameter/gradient copies
  double activations = 0, comm_buffers = 0;       ///< transient
  /// A quantized base under a sharded strategy: what the step's start holds beside the
  /// persistent state -- the outer unit (kept quantized: its payload) and the prefetched
  /// blocks gathered, each with its quantized payload until it is dequantized -- before any
  /// activation or gradient exists.
  double step_start = 0;
  /// The outer unit kept quantized (model.base_quant with its embeddings): what the LM head
  /// holds beside the persistent state -- the steady state less the blocks a resharding
  /// strategy has released by then (only the backward's first block is gathered), plus the
  /// head's weight chunk dequantized into scratch (model::kHeadWeightChunkElements at most,
  /// the whole head when it is smaller).
  double head = 0;
  /// A compute-only engine's load (eval or generate in bf16, parallel::FsdpEngine::
  /// compute_only): beside its bf16 values (no_shard: the persistent compute copy, in
  /// `gathered`) the fp32 master of the one unit being written.
  double load = 0;
  double persistent() const { return params + grads + optimizer; }
  double steady() const { return gathered + grad_buffers + activations + comm_buffers; }
  /// The run's peak is the largest of its load, the step's start, its steady state and the head.
  double total() const { return persistent() + std::max({steady(), step_start, head, load}); }
};

/// Per-step communication volume of one rank (bytes moved per rank on the wire, i.e. the
/// bus volume: (n-1)/n of the buffer for all-gather/reduce-scatter, 2(n-1)/n for all-reduce).
struct CommVolume {
  double fsdp_gather = 0;      ///< parameter all-gathers (overlappable with compute)
  double fsdp_gather_backward = 0;  ///< the part of fsdp_gather re-gathered for backward (reshard after forward)
  double fsdp_reduce = 0;      ///< gradient reduce-scatter / all-reduce over the shard (or dp) group (overlappable)
  double frozen_gather = 0;    ///< the part of fsdp_gather that is frozen segments (quantized with model.base_quant)
  double replicate = 0;        ///< all-reduce across dp_replicate (hybrid); blocking at the end of the step
  double tp = 0;               ///< tensor-parallel all-reduces (on the critical path)
  int fsdp_collectives = 0, tp_collectives = 0;
  int gather_collectives = 0, reduce_collectives = 0, replicate_collectives = 0;  ///< per step, by kind
  /// What cannot hide behind compute (the pipeline fill), bytes per rank: the first gathers
  /// of a micro-step (outer unit and first block) and the outer unit's reduction (the
  /// embedding's gradient is the last one backward produces).
  double fill_gather = 0, fill_reduce = 0;
  bool reduce_is_all_reduce = false;  ///< no_shard: the dp reduction is an all-reduce
  double total() const { return fsdp_gather + fsdp_reduce + replicate + tp; }
};

struct StrategyPlan {
  parallel::Strategy strategy = parallel::Strategy::FullShard;
  MeshShape mesh_shape;
  BatchSpec batch;                     ///< PlanInput::batch resolved for this mesh's dp (when valid)
  bool activation_checkpointing = false;
  /// Bytes of activations one micro-step's forward writes (every block's, whether kept or
  /// recomputed): what the memory-bound kernels stream, independent of checkpointing.
  double activation_traffic = 0;
  /// The part of activation_traffic that is attention scores (B x heads x T x T per block):
  /// streamed by the Kokkos attention's score strips and softmax, never by a fused attention
  /// kernel (cuDNN's flash attention keeps them on chip; its time is its own term), which
  /// the cost model then leaves them out for.
  double attention_score_traffic = 0;
  MemoryEstimate memory;
  CommVolume comm;
  bool valid = true;           ///< mesh/batch possible for this strategy
  bool fits = false;
  std::string note;            ///< why it is invalid or does not fit
};

/// Every strategy on the mesh it runs on for this request (mesh_shape_for_strategy), in the order
/// no_shard, shard_grad_op, hybrid_shard, full_shard (least communication first); one that
/// cannot run here is `valid == false` with the reason in `note`.
std::vector<StrategyPlan> plan_each_strategy(const PlanInput& in);

/// The memory and communication of one strategy on one mesh.
StrategyPlan plan_strategy(const PlanInput& in, parallel::Strategy s, const MeshShape& shape);

/// \brief What would fit when `forced` does not (for the error of a forced strategy): the
/// other strategies that fit on this job with their mesh and per-rank memory, and `forced`
/// (or another strategy) with activation checkpointing. "" when nothing fits.
std::string fit_alternatives(const PlanInput& in, parallel::Strategy forced);

/// For eval and generate (in.forward_only()): the settings that lower a forward pass's
/// memory, as the tail of a refusal ("add ranks ..., or bf16"; bf16 only where some
/// strategy's plan goes down with it). Never activation checkpointing or optimizer
/// settings, which a forward pass has nothing of.
std::string forward_memory_settings(const PlanInput& in);

/// Every mesh a strategy can run on for this job: dp_replicate x dp_shard x tp = world with
/// tp dividing the node (tensor parallelism stays inside a node) and the model's heads (and,
/// when tp is left at -1, a quantized LoRA base's blocks: every slice covers whole blocks), and
/// the dimensions fixed in `in.mesh_request` (not -1) kept. One mesh per distinct behaviour:
/// no_shard and full_shard put all data parallelism in dp_shard (replicas of no_shard are
/// all the same; full_shard with dp_replicate > 1 is hybrid_shard), hybrid_shard needs
/// dp_replicate > 1 and dp_shard > 1.
std::vector<MeshShape> candidate_mesh_shapes(const PlanInput& in, parallel::Strategy s);

/// The mesh a strategy runs on for the configured request (hybrid_shard: replicas across
/// nodes when dp_replicate is left at 1). UserError when impossible.
MeshShape mesh_shape_for_strategy(const PlanInput& in, parallel::Strategy s);

}  // namespace meshtrain::plan
