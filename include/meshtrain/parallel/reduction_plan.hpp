#pragma once
/// \brief The FSDP gradient reduction as data: one `ReductionRecipe` says, for a strategy,
/// a compute dtype, a reduce dtype and whether the reduction is the step's first into the
/// gradient state, what the engine does with a unit's gradients (where the backward writes
/// them, what is sent, on which group, in which dtype, where the result lands and how it
/// is folded into the fp32 gradient state) and which buffers that needs, by size.
///
/// `reduction_recipe` is the only place these choices are made: the FSDP engine
/// (parallel/fsdp.cpp) builds its recipes once and interprets them; the planner
/// (plan/planner.cpp) sizes its gradient and communication buffers from the same
/// recipes, so the two cannot drift apart.
///
/// The backward writes parameter gradients in the accumulation type of the compute dtype
/// (model::Transformer: acc_t<T>), fp32 for both bf16 and fp32 compute, so the compute dtype
/// no longer changes a recipe: accumulating strategies let the backward add straight into the
/// fp32 accumulation (no micro-step buffer, no widening pass), the others give it an fp32
/// micro-step buffer that is sent as it is or cast to the wire dtype.

#include <cstddef>
#include <cstdint>

#include "comm/communicator.hpp"
#include "parallel/strategy.hpp"

namespace meshtrain::parallel {

/// The collective that reduces a unit's gradients over the data-parallel ranks.
enum class ReduceCollective {
  ReduceScatterShard,  ///< reduce-scatter over the dp_shard group: each rank gets its shard
  AllReduceDp,         ///< all-reduce over every dp rank (no_shard): every rank gets the whole
};

/// What the reduction sends (before any cast).
enum class ReduceSource {
  MicroGrads,  ///< this micro-step's gradients, fp32 (StepBuffers::grad_micro)
  LocalAccum,  ///< the fp32 local accumulation of the step's micro-steps (StepBuffers::accum)
  GradState,   ///< the fp32 gradient state itself, where no_shard accumulates (UnitState::grad)
};

/// Where the collective writes its result.
enum class ReduceRecv {
  GradState,   ///< straight into the fp32 gradient state (nothing to finish)
  SendBuffer,  ///< in place, in the (cast) send buffer
  F32Buffer,   ///< a separate fp32 buffer of the result's length
  Bf16Buffer,  ///< a separate bf16 buffer of the result's length
};

/// How a finished reduction's result is folded into the fp32 gradient state.
enum class ReduceEpilogue {
  None,         ///< the result already is the gradient state
  AddF32,       ///< grad += fp32 result (a later micro-step's reduce-scatter)
  CopyFromBf16, ///< grad = widened bf16 result
  AddFromBf16,  ///< grad += widened bf16 result
};

/// One reduction of one unit's trainable segment, as the engine performs it.
struct ReductionRecipe {
  DType compute = DType::F32;  ///< the compute dtype T the recipe was made for
  /// The dtype the backward writes gradients in: acc_t<T>, fp32 for fp32 and bf16 compute.
  DType grads = DType::F32;

  // ---- how the backward's gradients reach the source --------------------------------
  /// The backward writes a micro-step buffer (StepBuffers::grad_micro, in `grads`) that is
  /// reduced every micro-step (full_shard, hybrid_shard); false: it adds into the fp32
  /// accumulation directly (shard_grad_op's local buffer, no_shard's gradient state).
  bool micro_grads_buffer = true;
  /// A sharded strategy accumulates micro-steps locally in an unsharded fp32 buffer
  /// (StepBuffers::accum) until the last micro-step (shard_grad_op).
  bool local_accum_buffer = false;

  // ---- the reduction -----------------------------------------------------------------
  ReduceCollective collective = ReduceCollective::ReduceScatterShard;
  ReduceSource source = ReduceSource::MicroGrads;
  DType source_dtype = DType::F32;  ///< the source's dtype: `grads` for MicroGrads, else F32
  /// The source is cast into a send buffer of the wire dtype (the source buffer is freed at
  /// launch); false: the source itself is sent (and kept alive until the reduction completes).
  bool cast_before_send = false;
  DType wire = DType::F32;          ///< the dtype on the wire (the reduce dtype)
  ReduceRecv recv = ReduceRecv::GradState;
  ReduceEpilogue epilogue = ReduceEpilogue::None;

  // ---- buffer sizes, per unit of `padded` trainable elements and `shard_numel` per rank ----
  /// Elements of the result: the rank's shard (reduce-scatter) or the whole segment.
  std::int64_t result_numel(std::int64_t padded, std::int64_t shard_numel) const {
    return collective == ReduceCollective::ReduceScatterShard ? shard_numel : padded;
  }
  /// Bytes of the cast send buffer (MemCategory::CommBuffers); 0 when the source is sent.
  std::size_t send_buffer_bytes(std::int64_t padded) const {
    return cast_before_send ? static_cast<std::size_t>(padded) * dtype_size(wire) : 0;
  }
  /// Bytes of the separate receive buffer (MemCategory::CommBuffers); 0 when received in
  /// the gradient state or in the send buffer.
  std::size_t recv_buffer_bytes(std::int64_t padded, std::int64_t shard_numel) const;
  /// Both staging buffers: the reduction's MemCategory::CommBuffers bytes while in flight.
  std::size_t comm_buffer_bytes(std::int64_t padded, std::int64_t shard_numel) const {
    return send_buffer_bytes(padded) + recv_buffer_bytes(padded, shard_numel);
  }
  /// Bytes per element of the micro-step gradient buffer (`grads`), 0 without one.
  std::size_t micro_grads_elem_bytes() const { return micro_grads_buffer ? dtype_size(grads) : 0; }
  /// Bytes per element of the unsharded fp32 local accumulation, 0 without one.
  std::size_t local_accum_elem_bytes() const { return local_accum_buffer ? 4 : 0; }
  /// The micro-step gradients stay alive until the reduction completes (they are sent as
  /// they are); false: freed at launch (cast), or there are none.
  bool micro_grads_kept_in_flight() const { return source == ReduceSource::MicroGrads && !cast_before_send; }

  bool operator==(const ReductionRecipe& o) const;
  bool operator!=(const ReductionRecipe& o) const { return !(*this == o); }
};

/// The recipe of a unit's reduction. `first_micro`: the reduction runs in micro-step 0 of
/// the step (strategies reducing every micro-step receive into the gradient state then,
/// and add into it afterwards; the others reduce once, at the last micro-step, and always
/// receive as the first). `compute` and `reduce` are F32 or BF16.
ReductionRecipe reduction_recipe(const StrategyTraits& traits, DType compute, DType reduce, bool first_micro);

/// The recipes of a step: `first` for micro-step 0, `later` for the others (equal for the
/// strategies that reduce once per step). The same for every unit: sizes are functions of
/// the unit's padded and shard sizes.
struct ReductionPlan {
  ReductionRecipe first, later;
  const ReductionRecipe& at(bool first_micro) const { return first_micro ? first : later; }
};
ReductionPlan reduction_plan(const StrategyTraits& traits, DType compute, DType reduce);

/// Names for tests and messages ("reduce_scatter_shard", "micro_grads", ...).
const char* collective_name(ReduceCollective c);
const char* source_name(ReduceSource s);
const char* recv_name(ReduceRecv r);
const char* epilogue_name(ReduceEpilogue e);

}  // namespace meshtrain::parallel
