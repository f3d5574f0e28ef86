// The cost model behind `meshtrain plan`: each term is the quantity it claims (FLOPs / rate,
// elements x measured per-element time, bytes / bandwidth), overlap can only hide FSDP
// communication, and the measurements it takes are sane on this machine.
#include <gtest/gtest.h>

#include "linalg/peak.hpp"
#include "model/step_flops.hpp"
#include "plan/planner.hpp"
#include "plan/cost_model.hpp"
#include "plan/measure.hpp"
#include "test_support.hpp"

using namespace meshtrain;
using namespace meshtrain::plan;

namespace {

model::ModelDims small_gpt() { return test::gpt2_dims(8192, 512, 6, 8, 256); }

plan::PlanInput input(const model::ModelDims& d, int world) {
  plan::PlanInput in;
  in.dims = d;
  in.world = world;
  in.ranks_per_node = world;
  in.batch.micro_batch = 4;
  in.batch.seq_len = 256;
  in.memory_budget = 8.0 * 1073741824.0;
  return in;
}

plan::StrategyPlan plan_for(const plan::PlanInput& in, parallel::Strategy s) {
  return plan::plan_strategy(in, s, plan::mesh_shape_for_strategy(in, s));
}

CostModelInputs fixed_costs() {
  CostModelInputs c;
  c.gemm_flops = 1e11;
  c.copy_bytes = 1e10;
  c.intra_bus_bytes = c.inter_bus_bytes = 2e9;
  c.latency_s = 1e-5;
  return c;
}

}  // namespace

TEST(CostModel, GemmTermIsFlopsOverRate) {
  const auto d = small_gpt();
  const auto in = input(d, 1);
  const auto plan = plan_for(in, parallel::Strategy::NoShard);
  CostModelInputs c = fixed_costs();
  const StepPrediction p = predict_step(in, plan, c);
  // Forward, backward (twice forward), and the attention scores backward recomputes (one
  // q k^T per block, counted full: 2 L T C per token).
  const double recompute = 2.0 * d.n_layers * 256 * d.d_model;
  const double flop = (3.0 * d.flops_per_token_forward(256) + recompute) * 4 * 256;
  EXPECT_NEAR(p.gemm_s, flop / c.gemm_flops, 1e-12);
  // A measured model-shape rate replaces the square peak.
  c.model_gemm_flops = 5e10;
  EXPECT_NEAR(predict_step(in, plan, c).gemm_s, flop / 5e10, 1e-12);
  // One rank: nothing to communicate, overlap changes nothing.
  EXPECT_EQ(p.fsdp_comm_s, 0.0);
  EXPECT_EQ(p.tp_comm_s, 0.0);
  EXPECT_DOUBLE_EQ(p.step_seconds_overlap, p.step_seconds_no_overlap);
}

TEST(CostModel, AFusedAttentionKernelIsTimedAtItsOwnRate) {
  // Attention as a kernel class of its own (cuDNN on GPUs): its FLOPs at the attention rate,
  // the rest at the model-GEMM rate; the same rate for both gives the single-class term.
  const auto d = small_gpt();
  const double attention_fwd = d.flops_per_token_forward(256) - d.flops_per_token_forward(0);
  const double recompute = 2.0 * d.n_layers * 256 * d.d_model;
  for (const bool ac : {false, true}) {
    auto in = input(d, 1);
    auto plan = plan_for(in, parallel::Strategy::NoShard);
    plan.activation_checkpointing = ac;
    const model::StepFlops f = model::train_step_flops(d, 256, ac);
    EXPECT_NEAR(f.attention, (3.0 + ac) * attention_fwd + recompute, 1e-6) << "ac " << ac;
    CostModelInputs c = fixed_costs();
    c.model_gemm_flops = 5e10;
    const double single = predict_step(in, plan, c).gemm_s;
    c.attention_flops = 5e10;
    EXPECT_NEAR(predict_step(in, plan, c).gemm_s, single, 1e-12);
    c.attention_flops = 2e11;
    const StepPrediction p = predict_step(in, plan, c);
    const double tokens = 4 * 256;
    EXPECT_NEAR(p.attention_s, f.attention * tokens / 2e11, 1e-12);
    EXPECT_NEAR(p.gemm_s, (f.total() - f.attention) * tokens / 5e10 + p.attention_s, 1e-12);
    EXPECT_LT(p.gemm_s, single);
  }
  // The LoRA base's frozen weights change no attention FLOPs; DPO's reference forward adds one.
  auto lora = d;
  lora.lora_rank = 8;
  EXPECT_DOUBLE_EQ(model::train_step_flops(lora, 256, false).attention, model::train_step_flops(d, 256, false).attention);
  EXPECT_NEAR(model::train_step_flops(lora, 256, false, 1.0, true).attention - model::train_step_flops(lora, 256, false).attention,
              attention_fwd, 1e-6);
}

TEST(CostModel, AFusedAttentionStreamsNoScores) {
  // The Kokkos attention streams every block's (B, heads, T, T) scores through its strips and
  // softmax: part of the activation traffic the memory-bound term counts. A fused attention
  // kernel (cuDNN's flash attention, timed on its own) keeps them on chip: the term then
  // leaves them out, and only then.
  const auto d = small_gpt();  // 6 layers, 8 heads; micro-batch 4 x 256 tokens, fp32
  for (const bool bf16 : {false, true}) {
    auto in = input(d, 1);
    in.bf16 = bf16;
    const auto plan = plan_for(in, parallel::Strategy::NoShard);
    const double scores = (bf16 ? 2.0 : 4.0) * 6 * 4 * 8 * 256.0 * 256.0;
    EXPECT_DOUBLE_EQ(plan.attention_score_traffic, scores) << "bf16 " << bf16;
    EXPECT_GT(plan.activation_traffic, 2 * scores) << "the scores are a part of the traffic, not all of it";
    CostModelInputs c = fixed_costs();
    c.model_gemm_flops = 5e10;
    const StepPrediction unfused = predict_step(in, plan, c);
    c.attention_flops = 5e10;  // the same rate: only the streamed bytes differ
    const StepPrediction fused = predict_step(in, plan, c);
    EXPECT_NEAR(fused.gemm_s, unfused.gemm_s, 1e-12);
    const CostConstants k;
    EXPECT_NEAR(unfused.elementwise_s - fused.elementwise_s, k.elementwise_passes * scores / 2.0 / c.copy_bytes, 1e-12)
        << "bf16 " << bf16;
  }
}

TEST(CostModel, ActualPackedRowsCountTheAttentionTheKernelsRun) {
  // Uniform documents: the same count as document_attention_fraction, for any block size.
  const int T = 256;
  std::vector<std::int32_t> uniform(2 * T);
  for (int i = 0; i < 2 * T; ++i) uniform[i] = (i % T) / 64 * 64;
  for (const int rows : {1, 64, 128, 256}) {
    double computed = 0, full = 0;
    add_document_attention_work(uniform.data(), 2, T, rows, computed, full);
    EXPECT_DOUBLE_EQ(computed / full, document_attention_fraction(T, 64, rows)) << "rows " << rows;
  }
  // Uneven documents by hand, T = 8: row 0 = [0..2] [3] [4..7], row 1 = one document.
  const std::vector<std::int32_t> docs = {0, 0, 0, 3, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0};
  double computed = 0, full = 0;
  add_document_attention_work(docs.data(), 2, 8, 1, computed, full);
  // Per query (rows = 1): keys i + 1 - doc_start(i); row 0: 1+2+3 + 1 + 1+2+3+4 = 17, row 1: 36.
  EXPECT_DOUBLE_EQ(computed, 17 + 36);
  EXPECT_DOUBLE_EQ(full, 2 * 36);
  computed = full = 0;
  // Blocks of 4: row 0's block [0,4) keys [0,4) (4 x 4), block [4,8) keys [4,8) (4 x 4);
  // row 1: 4 x 4 + 4 x 8. Whole rows: 2 x (4 x 4 + 4 x 8).
  add_document_attention_work(docs.data(), 2, 8, 4, computed, full);
  EXPECT_DOUBLE_EQ(computed, 16 + 16 + 16 + 32);
  EXPECT_DOUBLE_EQ(full, 2 * (16 + 32));
}

TEST(CostModel, PackedRowsCountTheAttentionComputed) {
  // T = 256 in blocks of 128, documents of 64: block [0,128) multiplies keys [0,128), block
  // [128,256) keys [128,256) -> 2 x 128^2 of the whole row's 128^2 + 128 x 256.
  EXPECT_DOUBLE_EQ(document_attention_fraction(256, 64, 128), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(document_attention_fraction(256, 0, 128), 1.0);    // not packed
  EXPECT_DOUBLE_EQ(document_attention_fraction(256, 300, 128), 1.0);  // a document fills the row
  EXPECT_DOUBLE_EQ(document_attention_fraction(256, 64, 256), 1.0);   // GPUs: whole rows, masked
  const auto d = small_gpt();
  auto in = input(d, 1);
  in.attention_rows = 128;
  const auto plan = plan_for(in, parallel::Strategy::NoShard);
  const CostModelInputs c = fixed_costs();
  const double whole = predict_step(in, plan, c).gemm_s;
  in.document_tokens = 64;
  // The attention term (linear in seq_len: 4 L T C forward, 2 L T C recomputed) shrinks to 2/3.
  const double attn = 4.0 * d.n_layers * 256 * d.d_model, recompute = 2.0 * d.n_layers * 256 * d.d_model;
  const double saved = (3.0 * attn + recompute) / 3.0 * 4 * 256 / c.gemm_flops;
  EXPECT_NEAR(predict_step(in, plan, c).gemm_s, whole - saved, 1e-12);
}

TEST(CostModel, MeasuredElementRatesEnterTheElementwiseTerm) {
  const auto d = small_gpt();
  const auto in = input(d, 1);
  const auto plan = plan_for(in, parallel::Strategy::NoShard);
  CostModelInputs c = fixed_costs();
  const StepPrediction bytes_only = predict_step(in, plan, c);
  EXPECT_EQ(bytes_only.activation_s, 0.0);
  c.adamw_s_per_elem = 4e-9;
  c.activation_s_per_elem = 8e-9;
  const StepPrediction p = predict_step(in, plan, c);
  EXPECT_NEAR(p.optimizer_s, plan.memory.params / 4.0 * 4e-9, 1e-12);
  EXPECT_NEAR(p.activation_s, 4.0 * 256 * d.n_layers * d.ffn_dim * 8e-9, 1e-12);
  EXPECT_NEAR(p.elementwise_s - p.optimizer_s - p.activation_s,
              bytes_only.elementwise_s - bytes_only.optimizer_s, 1e-12);
}

TEST(CostModel, OverlapHidesOnlyFsdpCommunication) {
  const auto d = small_gpt();
  auto in = input(d, 4);
  for (auto s : {parallel::Strategy::FullShard, parallel::Strategy::ShardGradOp, parallel::Strategy::NoShard}) {
    const auto plan = plan_for(in, s);
    ASSERT_TRUE(plan.valid);
    const StepPrediction p = predict_step(in, plan, fixed_costs());
    EXPECT_GT(p.fsdp_comm_s, 0.0) << parallel::strategy_name(s);
    EXPECT_LE(p.step_seconds_overlap, p.step_seconds_no_overlap);
    EXPECT_GE(p.step_seconds_overlap, p.compute_s + p.tp_comm_s);
    // Half the bus bandwidth: the communication term (beyond latency) doubles.
    CostModelInputs slow = fixed_costs();
    slow.intra_bus_bytes /= 2;
    slow.inter_bus_bytes /= 2;
    const StepPrediction q = predict_step(in, plan, slow);
    // Latency: every ring collective over the 4 ranks pays 3 steps (6 for an all-reduce).
    const double lat = (plan.comm.gather_collectives + plan.comm.reduce_collectives * (plan.comm.reduce_is_all_reduce ? 2 : 1)) *
                       3 * 1e-5;
    EXPECT_NEAR(q.fsdp_comm_s - lat, 2 * (p.fsdp_comm_s - lat), 1e-9);
  }
  // full_shard gathers the parameters again for backward: never cheaper in communication than
  // shard_grad_op, which gathers once.
  const auto fs = plan_for(in, parallel::Strategy::FullShard);
  const auto sg = plan_for(in, parallel::Strategy::ShardGradOp);
  EXPECT_GE(predict_step(in, fs, fixed_costs()).fsdp_comm_s, predict_step(in, sg, fixed_costs()).fsdp_comm_s);
}

TEST(CostModel, ModelGemmRateIsMeasuredAndBelowTwiceThePeak) {
  auto d = small_gpt();
  d.n_layers = 1;  // quick: one block's GEMMs
  const double rate = measure_model_gemm_flops(d, 1, 256, 1, false);
  EXPECT_GT(rate, 1e8);                          // it ran and took time
  EXPECT_LT(rate, 2.0 * linalg::measure_gemm_flops(512, 0.2, false));  // not an absurd number
  // Too large to time: 0, the caller falls back to the square-GEMM peak.
  EXPECT_EQ(measure_model_gemm_flops(small_gpt(), 4, 256, 1, false, 1.0), 0.0);
  // Without attention's GEMMs: fewer FLOPs credited for fewer GEMMs, a rate of the same order.
  const double linear = measure_model_gemm_flops(d, 1, 256, 1, false, 4e10, false);
  EXPECT_GT(linear, 1e8);
  EXPECT_LT(linear, 2.0 * linalg::measure_gemm_flops(512, 0.2, false));
}

TEST(CostModel, AttentionRateIsMeasuredThroughTheKernels) {
  // The measurement a GPU build takes of its fused attention, here on the host path (its twin):
  // the kernels ran (a finite, positive rate) for MHA and for GQA under tp = 2.
  auto d = small_gpt();
  d.n_layers = 1;
  EXPECT_FALSE(kernels::attention_is_fused(kernels::AttentionPath::Kokkos, true));
  for (const bool bf16 : {false, true}) {
    const double rate = measure_attention_flops(d, 2, 128, 1, bf16, kernels::AttentionPath::Kokkos);
    EXPECT_GT(rate, 1e7) << "bf16 " << bf16;
    EXPECT_LT(rate, 4.0 * linalg::measure_gemm_flops(512, 0.2, bf16)) << "bf16 " << bf16;
  }
  const model::ModelDims g = test::llama_dims(1024, 256, 1, 8, 4, 512);  // GQA (8 query, 4 kv heads), split over tp = 2
  EXPECT_GT(measure_attention_flops(g, 1, 128, 2, false, kernels::AttentionPath::Cudnn), 1e7);
  // A host build has no fused kernel: attention stays with the model's GEMMs.
  EXPECT_EQ(kernels::attention_is_fused(kernels::AttentionPath::Cudnn, true), !kernels::fused_attention_version().empty());
}

TEST(CostModel, EachMeshGroupRunsOnTheLinksItCrosses) {
  CostModelInputs c = fixed_costs();
  c.intra_bus_bytes = 150e9;
  c.inter_bus_bytes = 25e9;
  // 8 ranks per node. A tp group of 8 and a shard group of 8 (tp 1) stay inside a node.
  EXPECT_FALSE(group_link(8, 1, 8, c).crosses_nodes);
  EXPECT_EQ(group_link(8, 1, 8, c).bus_bytes, 150e9);
  // hybrid_shard 128 x 8 x 1: the replicate group (stride 8) has one member per node, so its
  // ring runs on one rank's network link.
  const GroupLink rep = group_link(128, 8, 8, c);
  EXPECT_TRUE(rep.crosses_nodes);
  EXPECT_EQ(rep.members_per_node, 1);
  EXPECT_EQ(rep.bus_bytes, 25e9);
  // A flat shard group of 64 over 8 nodes: 8 members per node import through 8 links, capped by
  // the node's own fabric; with tp 8 (stride 8) only one member per node is left.
  EXPECT_EQ(group_link(64, 1, 8, c).bus_bytes, 150e9);
  EXPECT_EQ(group_link(64, 2, 8, c).bus_bytes, 100e9);
  EXPECT_EQ(group_link(8, 8, 8, c).bus_bytes, 25e9);
  // A group of 6 on nodes of 8 does not divide the node: some of those groups straddle two.
  EXPECT_TRUE(group_link(6, 1, 8, c).crosses_nodes);
  // Latency: n-1 ring steps per all-gather, 2(n-1) per all-reduce.
  EXPECT_DOUBLE_EQ(collective_seconds(group_link(4, 1, 8, c), 10, 0, Collective::AllGather, c), 10 * 3 * c.latency_s);
  EXPECT_DOUBLE_EQ(collective_seconds(group_link(4, 1, 8, c), 10, 0, Collective::AllReduce, c), 10 * 6 * c.latency_s);
}

TEST(CostModel, MpiBinomialAllReduceIsATreeOfWholeBufferHops) {
  CostModelInputs c = fixed_costs();
  c.intra_bus_bytes = 1e9;
  c.inter_bus_bytes = 0.04e9;
  c.latency_s = 0;
  const double buffer = 12e6;  // bytes all-reduced
  const auto bus_volume = [&](int n) { return 2.0 * (n - 1) / n * buffer; };
  c.mpi_collectives = false;
  const double ring2 = collective_seconds(group_link(2, 2, 2, c), 1, bus_volume(2), Collective::AllReduce, c);
  c.mpi_collectives = true;
  c.mpi_all_reduce = MpiAllReduce::BinomialTree;  // the user's OMPI_MCA_coll_libnbc_iallreduce_algorithm
  // 2 ranks on 2 nodes of 2 (one member per node): one hop up and one down, each carrying
  // the whole buffer at the group's share of the node's network: twice the ring's time.
  EXPECT_NEAR(collective_seconds(group_link(2, 2, 2, c), 1, bus_volume(2), Collective::AllReduce, c), 2 * ring2, 1e-12);
  EXPECT_NEAR(ring2, buffer / 0.04e9, 1e-12);
  // 4 ranks on 2 nodes of 2: per tree one hop inside a node (at 2 x busbw), one across (the
  // node's whole network: 2 members x busbw); up and down.
  const GroupLink flat = group_link(4, 1, 2, c);
  ASSERT_TRUE(flat.crosses_nodes);
  EXPECT_NEAR(collective_seconds(flat, 1, bus_volume(4), Collective::AllReduce, c), buffer / 1e9 + buffer / 0.04e9, 1e-9);
  // One node of 8: three hops each way, all inside.
  EXPECT_NEAR(collective_seconds(group_link(8, 1, 8, c), 1, bus_volume(8), Collective::AllReduce, c), 3 * buffer / 1e9, 1e-9);
  // Reduce-scatter: the same reduce tree, then rank 0 sends 3 blocks of buffer/4 (one to
  // its node's other member, two across).
  EXPECT_NEAR(collective_seconds(flat, 1, 0.75 * buffer, Collective::ReduceScatter, c),
              buffer / 2e9 + buffer / 0.08e9 + buffer / 4 * (1 / 2e9 + 2 / 0.08e9), 1e-9);
  // The tree never applies to all-gathers (rings in both backends' model).
  EXPECT_NEAR(collective_seconds(flat, 1, 0.75 * buffer, Collective::AllGather, c), 0.75 * buffer / flat.bus_bytes, 1e-9);
}

TEST(CostModel, MpiAllReduceIsHalvingDoublingWhoseFarExchangesCrossNodes) {
  CostModelInputs c = fixed_costs();
  c.intra_bus_bytes = 1e9;
  c.inter_bus_bytes = 0.04e9;
  c.latency_s = 1e-5;
  c.mpi_collectives = true;
  c.mpi_all_reduce = MpiAllReduce::HalvingDoubling;  // what the Runtime selects
  const double buffer = 12e6;
  const auto bus_volume = [&](int n) { return 2.0 * (n - 1) / n * buffer; };
  // 2 ranks on 2 nodes: one exchange of half the buffer each way, twice (reduce-scatter,
  // all-gather): the bench's busbw is that exchange's rate.
  EXPECT_NEAR(collective_seconds(group_link(2, 2, 2, c), 1, bus_volume(2), Collective::AllReduce, c),
              2 * 1e-5 + 2 * (buffer / 2) / 0.04e9, 1e-9);
  // 4 ranks on 2 nodes of 2: the partner 1 away is on the node (half the buffer), the one 2
  // away is not (a quarter): the far exchange carries the smaller part.
  const GroupLink flat = group_link(4, 1, 2, c);
  EXPECT_NEAR(collective_seconds(flat, 3, bus_volume(4), Collective::AllReduce, c),
              3 * 4 * 1e-5 + 2 * (buffer / 2 / 1e9 + buffer / 4 / 0.04e9), 1e-9);
  // About half the binomial tree's whole-buffer hop across and back (at twice the rate).
  c.mpi_all_reduce = MpiAllReduce::BinomialTree;
  const double tree = collective_seconds(flat, 3, bus_volume(4), Collective::AllReduce, c);
  c.mpi_all_reduce = MpiAllReduce::HalvingDoubling;
  EXPECT_LT(collective_seconds(flat, 3, bus_volume(4), Collective::AllReduce, c), 0.6 * tree);
  // 3 ranks on one node: 2 fold into 1 (half each way and half back, then the whole result
  // back at the end: twice the buffer), and the pair exchanges as above.
  EXPECT_NEAR(collective_seconds(group_link(3, 1, 4, c), 1, bus_volume(3), Collective::AllReduce, c),
              5 * 1e-5 + 2 * buffer / 1e9 + 2 * (buffer / 2) / 1e9, 1e-9);
  // Reduce-scatter stays libnbc's binomial tree: halving-doubling is the all-reduce alone.
  c.mpi_all_reduce = MpiAllReduce::BinomialTree;
  const double rs_tree = collective_seconds(flat, 1, 0.75 * buffer, Collective::ReduceScatter, c);
  c.mpi_all_reduce = MpiAllReduce::HalvingDoubling;
  EXPECT_DOUBLE_EQ(collective_seconds(flat, 1, 0.75 * buffer, Collective::ReduceScatter, c), rs_tree);
  // A user-chosen ring is timed as a ring.
  c.mpi_all_reduce = MpiAllReduce::Ring;
  EXPECT_NEAR(collective_seconds(flat, 1, bus_volume(4), Collective::AllReduce, c),
              6 * 1e-5 + bus_volume(4) / flat.bus_bytes, 1e-9);
}

TEST(CostModel, HybridReplicateAllReduceIsExposedAndCheckpointingRecomputesForward) {
  const auto d = small_gpt();
  auto in = input(d, 16);
  in.ranks_per_node = 4;
  const MeshShape hybrid{4, 4, 1};
  const auto hp = plan::plan_strategy(in, parallel::Strategy::HybridShard, hybrid);
  ASSERT_TRUE(hp.valid);
  const StepPrediction p = predict_step(in, hp, fixed_costs());
  EXPECT_GT(p.replicate_comm_s, 0.0);
  // FsdpEngine::finish_step all-reduces the replicas after backward: nothing hides it.
  EXPECT_NEAR(p.step_seconds_overlap, p.compute_s + p.tp_comm_s + p.exposed_fsdp_s + p.replicate_comm_s, 1e-12);
  EXPECT_LE(p.exposed_fsdp_s, p.fsdp_comm_s);
  // Checkpointing: one more forward of GEMMs. Without it the GEMMs are 3 forwards plus the
  // recomputed scores, `ratio` forwards' worth; with it 4 plus the same.
  in.activation_checkpointing = true;
  const auto ac = plan::plan_strategy(in, parallel::Strategy::HybridShard, hybrid);
  const double ratio = 2.0 * d.n_layers * 256 * d.d_model / d.flops_per_token_forward(256);
  EXPECT_NEAR(predict_step(in, ac, fixed_costs()).gemm_s, p.gemm_s * (4.0 + ratio) / (3.0 + ratio), 1e-12);
}

TEST(CostModel, EveryTensorParallelAllReducePaysItsGroupsMeasuredSyncCost) {
  const auto d = small_gpt();
  auto in = input(d, 4);
  const MeshShape tp2{1, 2, 2};
  const auto p = plan::plan_strategy(in, parallel::Strategy::NoShard, tp2);
  ASSERT_TRUE(p.valid);
  ASSERT_GT(p.comm.tp_collectives, 0);
  const StepPrediction base = predict_step(in, p, fixed_costs());
  CostModelInputs c = fixed_costs();
  c.sync_s = {0.0, 0.0, 2e-3, 0.0, 7e-3};  // by group size: 2 ranks 2 ms, 4 ranks 7 ms
  const StepPrediction q = predict_step(in, p, c);
  EXPECT_NEAR(q.tp_comm_s - base.tp_comm_s, p.comm.tp_collectives * 2e-3, 1e-12);  // the tp=2 group's cost
  EXPECT_NEAR(q.step_seconds_overlap - base.step_seconds_overlap, p.comm.tp_collectives * 2e-3, 1e-12);
  EXPECT_EQ(q.fsdp_comm_s, base.fsdp_comm_s);  // FSDP collectives are not charged it
  // No tensor parallelism: no tp collectives, nothing to pay.
  const auto p1 = plan_for(in, parallel::Strategy::NoShard);
  ASSERT_EQ(p1.mesh_shape.tp, 1);
  EXPECT_EQ(predict_step(in, p1, c).tp_comm_s, 0.0);
  EXPECT_EQ(c.sync_seconds(8), 0.0);  // a group size not measured
}

TEST(CostModel, AForwardPassHasNoBackwardReductionOrOptimizer) {
  // eval and generate are ranked by one forward pass (PlanInput::use): its GEMMs, its gathers
  // once each, no gradient reduction, replication or optimizer.
  const auto d = small_gpt();
  auto train_in = input(d, 4);
  auto in = train_in;
  in.use = ModelUse::Evaluate;
  const CostModelInputs c = fixed_costs();
  const double tokens = 4.0 * 256;  // the eval batch per rank: micro_batch x seq_len
  ASSERT_EQ(in.forward_tokens(), tokens);
  const double forward_flops = model::train_step_flops(d, 256, false).forward;
  for (auto s : {parallel::Strategy::FullShard, parallel::Strategy::ShardGradOp, parallel::Strategy::NoShard}) {
    const auto plan = plan_for(in, s);
    ASSERT_TRUE(plan.valid);
    const StepPrediction p = predict_step(in, plan, c);
    EXPECT_DOUBLE_EQ(p.gemm_s, forward_flops * tokens / c.gemm_flops) << parallel::strategy_name(s);
    EXPECT_EQ(p.optimizer_s, 0.0);
    EXPECT_EQ(p.replicate_comm_s, 0.0);
    EXPECT_EQ(plan.comm.fsdp_reduce, 0.0);
    EXPECT_EQ(plan.comm.reduce_collectives, 0);
    EXPECT_LT(p.step_seconds_overlap, predict_step(train_in, plan_for(train_in, s), c).step_seconds_overlap / 2);
  }
  // Replicated parameters: a forward pass communicates nothing.
  const auto ns = plan_for(in, parallel::Strategy::NoShard);
  EXPECT_EQ(ns.comm.total(), 0.0);
  EXPECT_EQ(predict_step(in, ns, c).fsdp_comm_s, 0.0);
  // Sharded: every unit gathered once (full_shard does not re-gather for a backward), the
  // volume shard_grad_op's training step gathers for its one forward.
  const auto fs = plan_for(in, parallel::Strategy::FullShard);
  const auto sg_train = plan_for(train_in, parallel::Strategy::ShardGradOp);
  const int accum = sg_train.batch.grad_accum;
  EXPECT_DOUBLE_EQ(fs.comm.fsdp_gather, sg_train.comm.fsdp_gather / accum);
  EXPECT_EQ(fs.comm.gather_collectives, sg_train.comm.gather_collectives / accum);
  EXPECT_EQ(fs.comm.fsdp_gather_backward, 0.0);
  EXPECT_GT(predict_step(in, fs, c).fsdp_comm_s, 0.0);
}

TEST(CostModel, AGeneratedTokenIsOneForwardPositionThatStillGathersEveryUnit) {
  const auto d = small_gpt();
  auto in = input(d, 2);
  in.use = ModelUse::Generate;
  in.batch = BatchSpec{1, 512, 1, 0};  // one sequence of 512 positions
  in.kv_cache_positions = 512;
  const CostModelInputs c = fixed_costs();
  ASSERT_EQ(in.forward_tokens(), 1.0);  // against the KV cache: the new position only
  const auto fs = plan_for(in, parallel::Strategy::FullShard);
  const auto ns = plan_for(in, parallel::Strategy::NoShard);
  const StepPrediction f = predict_step(in, fs, c), n = predict_step(in, ns, c);
  EXPECT_DOUBLE_EQ(n.gemm_s, model::train_step_flops(d, 512, false).forward / c.gemm_flops);
  // A token's forward is far shorter than the gathers of the whole model it waits for:
  // sharding costs them every token, holding the parameters nothing.
  EXPECT_EQ(n.step_seconds_overlap, n.compute_s);
  EXPECT_GT(f.fsdp_comm_s, 10 * f.compute_s);
  EXPECT_GT(f.step_seconds_overlap, 10 * n.step_seconds_overlap);
  // Both ranks run the same sequence: one token per step, not one per rank.
  EXPECT_DOUBLE_EQ(n.tokens_per_s, 1.0 / n.step_seconds_overlap);
  // Without the cache each token runs the whole sequence again.
  in.kv_cache_positions = 0;
  EXPECT_EQ(in.forward_tokens(), 512.0);
  EXPECT_GT(predict_step(in, plan_for(in, parallel::Strategy::NoShard), c).gemm_s, 500 * n.gemm_s);
}

TEST(CostModel, TensorParallelForwardRunsTwoAllReducesPerBlock) {
  const auto d = small_gpt();
  auto in = input(d, 2);
  in.mesh_request = {1, 1, 2};
  in.use = ModelUse::Evaluate;
  const auto plan = plan_for(in, parallel::Strategy::NoShard);
  ASSERT_TRUE(plan.valid) << plan.note;
  ASSERT_EQ(plan.mesh_shape.tp, 2);
  // attention out and MLP out per block, the embedding and the head
  EXPECT_EQ(plan.comm.tp_collectives, 2 * d.n_layers + 2);
  auto train_in = in;
  train_in.use = ModelUse::Train;
  const auto train_plan = plan_for(train_in, parallel::Strategy::NoShard);
  EXPECT_EQ(train_plan.comm.tp_collectives, train_plan.batch.grad_accum * (4 * d.n_layers + 2));
}
