// gpu.graphs: which runs may replay their steps from a CUDA graph (train/step_graph.hpp,
// graph_decision), every condition alone and the order in which the reasons are reported;
// and when a run captures and replays, per step key (GraphSchedule: packed rows keep one
// graph per graph batch of cuDNN's variable-length attention); and what StepBatch stages for
// them (the step's graph batch, DPO's stored reference).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/views.hpp"
#include "train/step_batch.hpp"
#include "train/step_graph.hpp"

using namespace meshtrain::train;

namespace {

/// A run that may use graphs: a CUDA build, one rank, every fused path on, plain text.
GraphConditions eligible() {
  GraphConditions c;
  c.cuda_build = true;
  c.nccl = true;
  return c;
}

void expect_refused(const GraphConditions& c, const std::string& mentions) {
  const GraphDecision d = graph_decision(c);
  EXPECT_FALSE(d.use) << mentions;
  EXPECT_NE(d.reason.find(mentions), std::string::npos) << "reason: " << d.reason;
}

}  // namespace

TEST(StepGraph, AnEligibleRunUsesGraphs) {
  GraphDecision d = graph_decision(eligible());
  EXPECT_TRUE(d.use) << d.reason;
  // Several ranks over NCCL, LoRA/activation checkpointing/sharding do not matter here.
  GraphConditions c = eligible();
  c.world = 8;
  d = graph_decision(c);
  EXPECT_TRUE(d.use) << d.reason;
}

TEST(StepGraph, EachConditionAloneRulesGraphsOut) {
  GraphConditions c = eligible();
  c.requested = false;
  expect_refused(c, "gpu.graphs=false");
  c = eligible();
  c.cuda_build = false;
  expect_refused(c, "host build");
  c = eligible();
  c.nccl = false;
  c.world = 2;
  expect_refused(c, "MPI");
  c = eligible();
  c.fused_optimizer = false;
  expect_refused(c, "gpu.fused_optimizer=false");
  c = eligible();
  c.fused_loss = false;
  expect_refused(c, "gpu.fused_loss=false");
  c = eligible();
  c.profiler = true;
  expect_refused(c, "Kokkos Tools");
}

TEST(StepGraph, OneRankWithoutNcclIsNotRefusedForItsCommunicator) {
  // A single rank has no collectives the host would wait for.
  GraphConditions c = eligible();
  c.nccl = false;
  c.world = 1;
  EXPECT_TRUE(graph_decision(c).use);
}

TEST(StepGraph, TheFirstReasonIsReported) {
  // The reasons come in a fixed order (the setting a user would change first): with
  // everything wrong, the switch itself; without it, the build.
  GraphConditions c;
  c.requested = false;
  c.cuda_build = false;
  c.fused_optimizer = false;
  c.profiler = true;
  expect_refused(c, "gpu.graphs=false");
  c.requested = true;
  expect_refused(c, "host build");
  c.cuda_build = true;
  c.nccl = true;
  expect_refused(c, "gpu.fused_optimizer");
  c.fused_optimizer = true;
  expect_refused(c, "Kokkos Tools");
  c.profiler = false;
  EXPECT_TRUE(graph_decision(c).use);
}

namespace {
/// The actions of a schedule over steps with these keys, every step graphable unless listed
/// in `eager`; a capture is taken as succeeding. E: eager, C: capture, R: replay.
std::string actions(GraphSchedule& sched, const std::vector<int>& keys, const std::vector<int>& eager = {}) {
  std::string out;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const bool graphable = std::find(eager.begin(), eager.end(), static_cast<int>(i)) == eager.end();
    const GraphAction a = sched.next(keys[i], graphable);
    if (a == GraphAction::Capture) sched.captured(keys[i]);
    out += a == GraphAction::Eager ? 'E' : a == GraphAction::Capture ? 'C' : 'R';
  }
  return out;
}
}  // namespace

TEST(StepGraph, OneKeyCapturesAfterTheWarmupSteps) {
  ASSERT_EQ(kWarmupSteps, 2);
  GraphSchedule sched;
  EXPECT_EQ(actions(sched, std::vector<int>(6, 0)), "EECRRR");
  EXPECT_EQ(sched.graphs(), 1);
  // A step marked eager (an injected NaN) runs eagerly, also after the capture.
  GraphSchedule poisoned;
  EXPECT_EQ(actions(poisoned, std::vector<int>(6, 0), {1, 4}), "EECRER");
}

TEST(StepGraph, PackedBatchesKeepOneGraphPerGraphBatch) {
  // A key is captured the second time it occurs (its first step builds its cuDNN graphs
  // eagerly), once the run has had its warm-up steps; each key's later steps replay it.
  GraphSchedule sched;
  EXPECT_EQ(actions(sched, {64, 64, 128, 64, 128, 64, 256, 128, 256, 256}), "EEECCRERCR");
  EXPECT_EQ(sched.graphs(), 3);
  EXPECT_FALSE(sched.last_eager_was_full());
}

TEST(StepGraph, ReleasedGraphsAreCapturedAgainAtOnce) {
  // Before an evaluation the graphs are released (StepRunner::release_graphs): the next step
  // of each key captures again, without another eager step.
  GraphSchedule sched;
  EXPECT_EQ(actions(sched, {0, 0, 0, 0}), "EECR");
  sched.forget_graphs();
  EXPECT_EQ(sched.graphs(), 0);
  EXPECT_EQ(actions(sched, {0, 0}), "CR");
  GraphSchedule packed;
  EXPECT_EQ(actions(packed, {4, 4, 8, 4, 8}), "EEECC");
  packed.forget_graphs();
  EXPECT_EQ(actions(packed, {8, 8, 4}), "CRC");
}

TEST(StepGraph, AFullScheduleRunsNewKeysEagerly) {
  GraphSchedule sched(2);
  EXPECT_EQ(actions(sched, {1, 1, 1, 2, 2, 4, 4}), "EECECEE");
  EXPECT_TRUE(sched.last_eager_was_full());  // key 4 would have been captured
  EXPECT_EQ(actions(sched, {1, 2}), "RR");   // the kept graphs still replay
  EXPECT_FALSE(sched.last_eager_was_full());
  EXPECT_EQ(sched.graphs(), 2);
}

TEST(StepBatch, StagesAStepsGraphBatchAndItsStoredReference) {
  // Packed rows: the graph batch the step's largest micro-step needs (its document count
  // rounded up to a power of two), which every micro-step's shape then carries; and DPO's
  // stored reference log-probabilities, staged with the tokens.
  const int B = 2, T = 8;
  StepBatch batch(2, B, T, /*documents=*/true, /*token_index=*/false, 0, 256, /*reference=*/true);
  batch.begin();
  // micro-step 0: rows [0..7] and [0..2][3..7]: 3 documents; micro-step 1: 5 documents.
  const std::vector<std::int32_t> docs0 = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 3, 3, 3, 3};
  const std::vector<std::int32_t> docs1 = {0, 1, 1, 3, 3, 3, 3, 3, 0, 0, 0, 0, 4, 4, 4, 4};
  std::copy(docs0.begin(), docs0.end(), batch.host_doc(0));
  std::copy(docs1.begin(), docs1.end(), batch.host_doc(1));
  for (int a = 0; a < 2; ++a) {
    std::fill_n(batch.host_in(a), B * T, 1);
    std::fill_n(batch.host_tgt(a), B * T, 2);
    batch.host_ref(a)[0] = -1.5 - a;
    batch.host_ref(a)[1] = -2.5 - a;
  }
  EXPECT_EQ(batch.ragged_batch_needed(), 8);  // 5 documents
  EXPECT_EQ(batch.shape(0).ragged_batch, 0);  // each call's own until the step fixes it
  batch.set_ragged_batch(8);
  EXPECT_EQ(batch.shape(0).ragged_batch, 8);
  EXPECT_EQ(batch.shape(1).ragged_batch, 8);
  batch.upload();
  meshtrain::ExecSpace().fence();
  std::vector<double> ref(2);
  Kokkos::deep_copy(meshtrain::UView<double, meshtrain::HostMem>(ref.data(), 2),
                    meshtrain::UView<const double>(batch.ref(1), 2));
  EXPECT_EQ(ref, (std::vector<double>{-2.5, -3.5}));
  // Without documents nothing is needed, and without a reference nothing is staged.
  StepBatch plain(1, B, T, false, false, 0, 256);
  plain.begin();
  EXPECT_EQ(plain.ragged_batch_needed(), 0);
  EXPECT_EQ(plain.host_ref(0), nullptr);
  EXPECT_EQ(plain.ref(0), nullptr);
}
