// The reduction recipes (parallel/reduction_plan.hpp) against the table of what the FSDP
// engine's launch_reduction did as a branch tree before the recipes existed, written out by
// hand for every strategy x compute dtype x reduce dtype x first-or-later micro-step, and
// the buffer sizes each recipe asks for.
//
// Issue 33 (fp32 gradient accumulation) changed the bf16-compute rows on purpose: the
// backward writes its gradients in fp32 for bf16 compute too (model::Transformer, acc_t<T>),
// so every bf16 row now equals the fp32 row above it. Before, bf16 compute wrote a bf16
// micro-step buffer (2 bytes an element), which shard_grad_op and no_shard widened into the
// fp32 accumulation after each backward and full/hybrid sent as bf16 or cast to an fp32
// wire; each weight gradient was rounded to bf16 at every GEMM that added into it.
#include <gtest/gtest.h>

#include <string>

#include "parallel/reduction_plan.hpp"

using namespace meshtrain;
using namespace meshtrain::parallel;

namespace {

constexpr DType F = DType::F32, B = DType::BF16;
constexpr auto RS = ReduceCollective::ReduceScatterShard, AR = ReduceCollective::AllReduceDp;
constexpr auto Micro = ReduceSource::MicroGrads, Accum = ReduceSource::LocalAccum, State = ReduceSource::GradState;
constexpr auto InState = ReduceRecv::GradState, InSend = ReduceRecv::SendBuffer, F32Buf = ReduceRecv::F32Buffer,
               Bf16Buf = ReduceRecv::Bf16Buffer;
constexpr auto None = ReduceEpilogue::None, AddF32 = ReduceEpilogue::AddF32, CopyB = ReduceEpilogue::CopyFromBf16,
               AddB = ReduceEpilogue::AddFromBf16;

struct Row {
  Strategy strategy;
  DType compute, reduce;
  bool first;
  // expected
  bool micro_buffer, accum_buffer;
  ReduceCollective collective;
  ReduceSource source;
  DType source_dtype;
  bool cast;
  ReduceRecv recv;
  ReduceEpilogue epilogue;
};

// clang-format off
const Row kTable[] = {
  // strategy              T  R  first  micro  accum  coll src    srcT cast   recv     epilogue
  // full_shard / hybrid_shard: reduce-scatter this micro-step's fp32 grads every micro-step;
  // the first lands in the grad state, later ones in a buffer that is added.
  {Strategy::FullShard,    F, F, true,  true,  false, RS, Micro, F,   false, InState, None},
  {Strategy::FullShard,    F, F, false, true,  false, RS, Micro, F,   false, F32Buf,  AddF32},
  {Strategy::FullShard,    F, B, true,  true,  false, RS, Micro, F,   true,  Bf16Buf, CopyB},
  {Strategy::FullShard,    F, B, false, true,  false, RS, Micro, F,   true,  Bf16Buf, AddB},
  // (before issue 33: source bf16, cast to the fp32 wire)
  {Strategy::FullShard,    B, F, true,  true,  false, RS, Micro, F,   false, InState, None},
  {Strategy::FullShard,    B, F, false, true,  false, RS, Micro, F,   false, F32Buf,  AddF32},
  // (before: source bf16, sent as it was)
  {Strategy::FullShard,    B, B, true,  true,  false, RS, Micro, F,   true,  Bf16Buf, CopyB},
  {Strategy::FullShard,    B, B, false, true,  false, RS, Micro, F,   true,  Bf16Buf, AddB},
  {Strategy::HybridShard,  F, F, true,  true,  false, RS, Micro, F,   false, InState, None},
  {Strategy::HybridShard,  F, F, false, true,  false, RS, Micro, F,   false, F32Buf,  AddF32},
  {Strategy::HybridShard,  F, B, true,  true,  false, RS, Micro, F,   true,  Bf16Buf, CopyB},
  {Strategy::HybridShard,  F, B, false, true,  false, RS, Micro, F,   true,  Bf16Buf, AddB},
  {Strategy::HybridShard,  B, F, true,  true,  false, RS, Micro, F,   false, InState, None},
  {Strategy::HybridShard,  B, F, false, true,  false, RS, Micro, F,   false, F32Buf,  AddF32},
  {Strategy::HybridShard,  B, B, true,  true,  false, RS, Micro, F,   true,  Bf16Buf, CopyB},
  {Strategy::HybridShard,  B, B, false, true,  false, RS, Micro, F,   true,  Bf16Buf, AddB},
  // shard_grad_op: the backward adds into an unsharded fp32 buffer (whatever the compute
  // dtype; before, bf16 compute wrote a bf16 micro buffer widened into it), reduce-scattered
  // once at the last micro-step, which is always the step's first reduction.
  {Strategy::ShardGradOp,  F, F, true,  false, true,  RS, Accum, F,   false, InState, None},
  {Strategy::ShardGradOp,  F, F, false, false, true,  RS, Accum, F,   false, InState, None},
  {Strategy::ShardGradOp,  F, B, true,  false, true,  RS, Accum, F,   true,  Bf16Buf, CopyB},
  {Strategy::ShardGradOp,  F, B, false, false, true,  RS, Accum, F,   true,  Bf16Buf, CopyB},
  {Strategy::ShardGradOp,  B, F, true,  false, true,  RS, Accum, F,   false, InState, None},
  {Strategy::ShardGradOp,  B, F, false, false, true,  RS, Accum, F,   false, InState, None},
  {Strategy::ShardGradOp,  B, B, true,  false, true,  RS, Accum, F,   true,  Bf16Buf, CopyB},
  {Strategy::ShardGradOp,  B, B, false, false, true,  RS, Accum, F,   true,  Bf16Buf, CopyB},
  // no_shard: the backward adds into the fp32 grad state, all-reduced over dp once: in
  // place, or through a bf16 copy reduced in place and copied back.
  {Strategy::NoShard,      F, F, true,  false, false, AR, State, F,   false, InState, None},
  {Strategy::NoShard,      F, F, false, false, false, AR, State, F,   false, InState, None},
  {Strategy::NoShard,      F, B, true,  false, false, AR, State, F,   true,  InSend,  CopyB},
  {Strategy::NoShard,      F, B, false, false, false, AR, State, F,   true,  InSend,  CopyB},
  {Strategy::NoShard,      B, F, true,  false, false, AR, State, F,   false, InState, None},
  {Strategy::NoShard,      B, F, false, false, false, AR, State, F,   false, InState, None},
  {Strategy::NoShard,      B, B, true,  false, false, AR, State, F,   true,  InSend,  CopyB},
  {Strategy::NoShard,      B, B, false, false, false, AR, State, F,   true,  InSend,  CopyB},
};
// clang-format on

std::string label(const Row& r) {
  return std::string(strategy_name(r.strategy)) + " compute=" + dtype_name(r.compute) + " reduce=" +
         dtype_name(r.reduce) + (r.first ? " first" : " later");
}

}  // namespace

TEST(ReductionPlan, EveryCombinationGivesItsRecipe) {
  ASSERT_EQ(sizeof(kTable) / sizeof(kTable[0]), 4u * 2 * 2 * 2);
  for (const Row& row : kTable) {
    const ReductionRecipe r = reduction_recipe(traits(row.strategy), row.compute, row.reduce, row.first);
    const std::string what = label(row);
    EXPECT_EQ(r.compute, row.compute) << what;
    EXPECT_EQ(r.grads, DType::F32) << what << ": gradients are fp32 for every compute dtype";
    EXPECT_EQ(r.micro_grads_buffer, row.micro_buffer) << what;
    EXPECT_EQ(r.local_accum_buffer, row.accum_buffer) << what;
    EXPECT_STREQ(collective_name(r.collective), collective_name(row.collective)) << what;
    EXPECT_STREQ(source_name(r.source), source_name(row.source)) << what;
    EXPECT_EQ(r.source_dtype, row.source_dtype) << what;
    EXPECT_EQ(r.cast_before_send, row.cast) << what;
    EXPECT_EQ(r.wire, row.reduce) << what;
    EXPECT_STREQ(recv_name(r.recv), recv_name(row.recv)) << what;
    EXPECT_STREQ(epilogue_name(r.epilogue), epilogue_name(row.epilogue)) << what;
    // The plan's variants are these recipes.
    EXPECT_EQ(reduction_plan(traits(row.strategy), row.compute, row.reduce).at(row.first), r) << what;
    // The compute dtype changes nothing but the field that records it.
    ReductionRecipe other = reduction_recipe(traits(row.strategy), row.compute == F ? B : F, row.reduce, row.first);
    other.compute = r.compute;
    EXPECT_EQ(other, r) << what;
  }
}

TEST(ReductionPlan, BufferSizesFollowTheRecipe) {
  // A unit of 1024 trainable elements over a shard group of 4: 256 per rank.
  const std::int64_t padded = 1024, shard = 256;
  const auto recipe = [](Strategy s, DType t, DType r, bool first) { return reduction_recipe(traits(s), t, r, first); };
  struct Case {
    Strategy s;
    DType t, r;
    bool first;
    std::size_t send, recv, micro_elem, accum_elem;
    bool kept;
  };
  const Case cases[] = {
      // full_shard fp32/fp32: the micro-step grads are sent as they are and kept in flight;
      // a later micro-step receives its shard in an fp32 buffer.
      {Strategy::FullShard, F, F, true, 0, 0, 4, 0, true},
      {Strategy::FullShard, F, F, false, 0, 4 * shard, 4, 0, true},
      // bf16 wire from fp32 grads: a bf16 copy of the unit, a bf16 shard received.
      {Strategy::FullShard, F, B, true, 2 * padded, 2 * shard, 4, 0, false},
      // bf16 compute, fp32 wire: the fp32 micro-step grads are sent as they are (before
      // issue 33: a bf16 micro buffer cast into an fp32 copy of the unit, 4 * padded).
      {Strategy::FullShard, B, F, false, 0, 4 * shard, 4, 0, true},
      // bf16 compute and wire: the fp32 micro-step grads cast to bf16 (before: a bf16 micro
      // buffer, 2 bytes an element, sent as it was and kept in flight).
      {Strategy::HybridShard, B, B, true, 2 * padded, 2 * shard, 4, 0, false},
      {Strategy::ShardGradOp, F, F, false, 0, 0, 0, 4, false},
      // The backward adds into the fp32 accumulation (before: a bf16 micro buffer too).
      {Strategy::ShardGradOp, B, B, true, 2 * padded, 2 * shard, 0, 4, false},
      // no_shard: the whole unit is the result; a bf16 wire reduces a bf16 copy in place.
      {Strategy::NoShard, F, F, true, 0, 0, 0, 0, false},
      {Strategy::NoShard, B, B, true, 2 * padded, 0, 0, 0, false},
  };
  for (const Case& c : cases) {
    const ReductionRecipe r = recipe(c.s, c.t, c.r, c.first);
    const std::string what = label(Row{c.s, c.t, c.r, c.first});
    EXPECT_EQ(r.result_numel(padded, shard), c.s == Strategy::NoShard ? padded : shard) << what;
    EXPECT_EQ(r.send_buffer_bytes(padded), c.send) << what;
    EXPECT_EQ(r.recv_buffer_bytes(padded, shard), c.recv) << what;
    EXPECT_EQ(r.comm_buffer_bytes(padded, shard), c.send + c.recv) << what;
    EXPECT_EQ(r.micro_grads_elem_bytes(), c.micro_elem) << what;
    EXPECT_EQ(r.local_accum_elem_bytes(), c.accum_elem) << what;
    EXPECT_EQ(r.micro_grads_kept_in_flight(), c.kept) << what;
  }
}

TEST(ReductionPlan, OnlyFp32AndBf16AreRecipes) {
  EXPECT_THROW(reduction_recipe(traits(Strategy::FullShard), DType::F64, DType::F32, true), std::logic_error);
  EXPECT_THROW(reduction_recipe(traits(Strategy::FullShard), DType::F32, DType::I32, true), std::logic_error);
}
