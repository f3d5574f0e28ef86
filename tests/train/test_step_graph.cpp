// gpu.graphs: which runs may replay their steps from a CUDA graph (train/step_graph.hpp,
// graph_decision), every condition alone and the order in which the reasons are reported.
#include <gtest/gtest.h>

#include <string>

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
  c.dpo = true;
  expect_refused(c, "train.objective=dpo");
  c = eligible();
  c.documents = true;
  expect_refused(c, "packed rows");
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
  c.dpo = true;
  c.documents = true;
  c.profiler = true;
  expect_refused(c, "gpu.graphs=false");
  c.requested = true;
  expect_refused(c, "host build");
  c.cuda_build = true;
  c.nccl = true;
  expect_refused(c, "gpu.fused_optimizer");
  c.fused_optimizer = true;
  expect_refused(c, "dpo");
  c.dpo = false;
  expect_refused(c, "packed rows");
  c.documents = false;
  expect_refused(c, "Kokkos Tools");
  c.profiler = false;
  EXPECT_TRUE(graph_decision(c).use);
}
