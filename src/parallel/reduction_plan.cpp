#include "parallel/reduction_plan.hpp"

#include <stdexcept>

namespace meshtrain::parallel {

std::size_t ReductionRecipe::recv_buffer_bytes(std::int64_t padded, std::int64_t shard_numel) const {
  const std::size_t n = static_cast<std::size_t>(result_numel(padded, shard_numel));
  switch (recv) {
    case ReduceRecv::GradState:
    case ReduceRecv::SendBuffer: return 0;
    case ReduceRecv::F32Buffer: return n * dtype_size(DType::F32);
    case ReduceRecv::Bf16Buffer: return n * dtype_size(DType::BF16);
  }
  return 0;
}

bool ReductionRecipe::operator==(const ReductionRecipe& o) const {
  return compute == o.compute && grads == o.grads && micro_grads_buffer == o.micro_grads_buffer &&
         local_accum_buffer == o.local_accum_buffer &&
         collective == o.collective && source == o.source && source_dtype == o.source_dtype &&
         cast_before_send == o.cast_before_send && wire == o.wire && recv == o.recv && epilogue == o.epilogue;
}

ReductionRecipe reduction_recipe(const StrategyTraits& traits, DType compute, DType reduce, bool first_micro) {
  if ((compute != DType::F32 && compute != DType::BF16) || (reduce != DType::F32 && reduce != DType::BF16))
    throw std::logic_error("reduction_recipe: compute and reduce dtypes are F32 or BF16");
  ReductionRecipe r;
  r.compute = compute;
  // Gradients are acc_t<T>: fp32 whatever the compute dtype (bf16 A/B, fp32 C GEMMs), so
  // nothing below depends on `compute`.
  r.grads = DType::F32;
  r.wire = reduce;
  // Gradients are accumulated locally (in fp32) over the micro-steps unless the strategy
  // reduces every micro-step; the backward then adds into the accumulation directly.
  const bool accumulate = !traits.reduce_every_micro;
  r.micro_grads_buffer = !accumulate;
  r.local_accum_buffer = accumulate && traits.shard_params;

  if (traits.shard_params) {
    // Reduce-scatter over the shard group; the source is this micro-step's grads
    // (full/hybrid) or the fp32 local accumulation (shard_grad_op, last micro-step).
    r.collective = ReduceCollective::ReduceScatterShard;
    r.source = traits.reduce_every_micro ? ReduceSource::MicroGrads : ReduceSource::LocalAccum;
    r.source_dtype = traits.reduce_every_micro ? r.grads : DType::F32;
    r.cast_before_send = r.source_dtype != reduce;
    // The first reduction into the gradient state of a step overwrites it, later ones add.
    const bool first = !traits.reduce_every_micro || first_micro;
    if (reduce == DType::F32) {
      r.recv = first ? ReduceRecv::GradState : ReduceRecv::F32Buffer;
      r.epilogue = first ? ReduceEpilogue::None : ReduceEpilogue::AddF32;
    } else {
      r.recv = ReduceRecv::Bf16Buffer;
      r.epilogue = first ? ReduceEpilogue::CopyFromBf16 : ReduceEpilogue::AddFromBf16;
    }
  } else {
    // no_shard: all-reduce the fp32 accumulation (the gradient state) over every dp rank,
    // in place, or through a bf16 copy that is reduced in place and copied back.
    r.collective = ReduceCollective::AllReduceDp;
    r.source = ReduceSource::GradState;
    r.source_dtype = DType::F32;
    r.cast_before_send = reduce != DType::F32;
    r.recv = r.cast_before_send ? ReduceRecv::SendBuffer : ReduceRecv::GradState;
    r.epilogue = r.cast_before_send ? ReduceEpilogue::CopyFromBf16 : ReduceEpilogue::None;
  }
  return r;
}

ReductionPlan reduction_plan(const StrategyTraits& traits, DType compute, DType reduce) {
  return {reduction_recipe(traits, compute, reduce, true), reduction_recipe(traits, compute, reduce, false)};
}

const char* collective_name(ReduceCollective c) {
  switch (c) {
    case ReduceCollective::ReduceScatterShard: return "reduce_scatter_shard";
    case ReduceCollective::AllReduceDp: return "all_reduce_dp";
  }
  return "?";
}

const char* source_name(ReduceSource s) {
  switch (s) {
    case ReduceSource::MicroGrads: return "micro_grads";
    case ReduceSource::LocalAccum: return "local_accum";
    case ReduceSource::GradState: return "grad_state";
  }
  return "?";
}

const char* recv_name(ReduceRecv r) {
  switch (r) {
    case ReduceRecv::GradState: return "grad_state";
    case ReduceRecv::SendBuffer: return "send_buffer";
    case ReduceRecv::F32Buffer: return "f32_buffer";
    case ReduceRecv::Bf16Buffer: return "bf16_buffer";
  }
  return "?";
}

const char* epilogue_name(ReduceEpilogue e) {
  switch (e) {
    case ReduceEpilogue::None: return "none";
    case ReduceEpilogue::AddF32: return "add_f32";
    case ReduceEpilogue::CopyFromBf16: return "copy_from_bf16";
    case ReduceEpilogue::AddFromBf16: return "add_from_bf16";
  }
  return "?";
}

}  // namespace meshtrain::parallel
