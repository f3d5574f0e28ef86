#pragma once
/// \brief The cost model's pure predictor: optimizer-step time from FLOPs / GEMM rate plus
/// memory-bound kernel bytes / copy bandwidth, and communication as alpha-beta (latency +
/// bytes / bus bandwidth) per collective on the links each mesh group crosses, with and
/// without overlap of the FSDP collectives behind compute. Everything it knows about the
/// machine comes in as data (CostModelInputs): measured on the job's ranks by
/// plan/measure.hpp, given for a target cluster (plan.*), or a fixed table in a test. Nothing
/// here runs a kernel or talks to another rank.

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_dims.hpp"
#include "plan/planner.hpp"
#include "runtime/runtime.hpp"

namespace meshtrain::plan {

/// \brief The constants of the predictor that are not measurements of the machine: counts
/// and factors chosen once (where each came from is said at its field; the benchmark runs
/// behind the fitted ones are in perf/notes.md, "Cost model constants"). One table, so a
/// change to the model is a change here and nowhere else.
struct CostConstants {
  /// Reads + writes of every saved activation element by the memory-bound kernels over a
  /// forward and backward (norms, bias, softmax, residual adds and their backward; the MLP
  /// activation is timed on its own when measured). Counted from the kernels' passes, not
  /// fitted.
  double elementwise_passes = 6.0;
  /// Extra passes of those kernels with activation checkpointing (the recomputed forward).
  /// Counted, as above.
  double checkpoint_elementwise_passes = 2.0;
  /// The same kernels' passes in a forward pass alone (eval, generate): the recomputed
  /// forward's count, the same kernels.
  double forward_elementwise_passes = 2.0;
  /// The MLP activation's recomputed forward as a fraction of its measured forward +
  /// backward (checkpointing): the forward is about half of the pair. Estimated.
  double checkpoint_activation_rework = 0.5;
  /// Bytes AdamW moves per fp32 state element when its rate is not measured: reads of
  /// parameter, gradient and both moments, writes of parameter and both moments (7 x 4).
  double adamw_bytes_per_element = 28.0;
  /// An MPI binomial-tree hop inside a node moves at this multiple of the all-gather bus
  /// bandwidth `plan` measures there. Fitted: the one-host sweeps of perf/notes.md.
  double mpi_tree_hop_intra_factor = 2.0;
};

struct CostModelInputs {
  double gemm_flops = 1e11;        ///< per rank, FLOP/s (square GEMM: the peak); default: a typical CPU socket share
  std::string gemm_source;
  /// Per rank FLOP/s of this model's own GEMMs (a block's forward and backward linear layers
  /// and causal attention, and the LM head, at the micro-batch's row count), FLOPs counted as
  /// ModelDims::flops_per_token_forward counts them; 0 = not measured (use gemm_flops).
  double model_gemm_flops = 0;
  /// Per rank FLOP/s of attention (model::StepFlops::attention's count) where the build runs
  /// it as a fused kernel of its own (cuDNN SDPA: measure_attention_flops); then
  /// model_gemm_flops is the rate of the other GEMMs alone. 0 = attention is among this
  /// model's GEMMs (the blocked GEMM + softmax path, as model_gemm_flops times it).
  double attention_flops = 0;
  double copy_bytes = 1e10;        ///< per rank memory bandwidth for elementwise kernels, bytes/s
  /// Measured seconds per element (slowest rank) of the fused AdamW update and of the MLP
  /// activation's forward + backward; 0 = not measured (then both count as bytes / copy_bytes).
  double adamw_s_per_elem = 0, activation_s_per_elem = 0;
  double intra_bus_bytes = 1e10;   ///< bus bandwidth inside a node, bytes/s
  double inter_bus_bytes = 1e9;    ///< network bandwidth of one rank across nodes (its NIC share), bytes/s
  /// Latency of one step of a ring collective (alpha); a collective over n ranks pays it n-1
  /// (all-gather, reduce-scatter) or 2(n-1) (all-reduce) times. The default is a typical
  /// inter-node NCCL step (a few microseconds).
  double latency_s = 5e-6;
  /// How reductions move their bytes. NCCL (GPU builds) runs rings: 2(n-1)/n of the buffer
  /// per rank at the bus bandwidth for an all-reduce, (n-1)/n for a reduce-scatter. The MPI
  /// backend (host builds; `mpi_collectives`) runs Open MPI's libnbc algorithms. Its
  /// MPI_Ireduce_scatter_block is a binomial reduce to rank 0 (ceil(log2 n) hops that each
  /// carry the whole buffer, the hops between nodes at the inter-node rate) followed by rank
  /// 0 sending each rank its block (nbc_ireduce_scatter_block.c). Its MPI_Iallreduce runs
  /// `mpi_all_reduce` (runtime.hpp): Rabenseifner's halving-doubling as the Runtime selects
  /// it, or, where the user chose otherwise, a ring or the binomial reduce plus a binomial
  /// broadcast back (libnbc's own choice for an in-place buffer).
  bool mpi_collectives = false;
  MpiAllReduce mpi_all_reduce = MpiAllReduce::HalvingDoubling;
  /// Fraction of an FSDP collective that can hide behind compute (0..1). NCCL runs on its
  /// own stream: 1. The MPI backend progresses a non-blocking collective only inside MPI
  /// calls (the engine's progress() between kernels), and ranks that share cores compete
  /// with it, so it is measured (measure_overlap) on the job's ranks.
  double overlap = 1.0;
  std::string overlap_source = "assumed: NCCL progresses on its own stream";
  std::string bus_source;
  /// Seconds a blocking collective over a group of g consecutive ranks (a tp group) costs
  /// beyond its transfer when the ranks compute between two of them: `sync_s[g]`, 0 where
  /// not measured. On host builds whose ranks share cores (4 ranks on 2 cores), a rank that
  /// reaches the all-reduce first waits for a peer the scheduler has parked. Measured on the
  /// job's ranks (measure_sync_cost; doc/perf.md); on GPUs it stays 0.
  std::vector<double> sync_s;
  std::string sync_source = "not measured";
  /// The predictor's fixed counts and factors (not measurements).
  CostConstants constants;
  double sync_seconds(int group) const {
    return group >= 0 && group < static_cast<int>(sync_s.size()) ? sync_s[group] : 0.0;
  }
};

/// FLOPs per token of the attention scores that backward computes again (q k^T of every
/// block, counted full like ModelDims::flops_per_token_forward): the kernels keep each
/// row's softmax statistics, not the (T, T) probabilities. The predictor adds them to the
/// step; the GEMM measurement credits them to its rate.
double recompute_flops_per_token(const model::ModelDims& dims, int seq_len);

struct StepPrediction {
  double compute_s = 0;        ///< GEMM FLOPs / (model-shape) GEMM rate + elementwise
  double gemm_s = 0;           ///< every GEMM FLOP, attention's included
  double attention_s = 0;      ///< of gemm_s: attention at its own measured rate (0 when not measured apart)
  double elementwise_s = 0;    ///< optimizer + MLP activation (measured rates) + other kernels' bytes / bandwidth
  double optimizer_s = 0, activation_s = 0;  ///< the measured-rate parts of elementwise_s
  double fsdp_comm_s = 0;      ///< all-gathers + reduce-scatters / all-reduces over the shard group (overlappable)
  double exposed_fsdp_s = 0;   ///< the part of fsdp_comm_s that does not hide behind compute
  double replicate_comm_s = 0; ///< all-reduce across dp_replicate (after backward: exposed)
  double tp_comm_s = 0;        ///< tensor-parallel all-reduces (critical path)
  bool shard_crosses_nodes = false;
  double shard_bus_bytes = 0, replicate_bus_bytes = 0;  ///< bus bandwidth of those groups' rings
  double step_seconds_no_overlap = 0;
  double step_seconds_overlap = 0;
  double tokens_per_s = 0;     ///< global tokens per second with overlap
};

/// The ring of one mesh group: its size, whether it crosses nodes, and its bus bandwidth.
struct GroupLink {
  int ranks = 1;
  bool crosses_nodes = false;
  int members_per_node = 1;
  double bus_bytes = 0;
};

/// A group of `n` ranks `stride` apart (tp groups: 1, shard groups: tp, replicate groups:
/// dp_shard x tp) on nodes of `ranks_per_node`.
GroupLink group_link(int n, int stride, int ranks_per_node, const CostModelInputs& c);

enum class Collective { AllGather, ReduceScatter, AllReduce };

/// Seconds of `collectives` collectives of `kind` over `g` moving `bus_volume` bytes per rank
/// (the ring's volume: (n-1)/n of the buffer, 2(n-1)/n for an all-reduce). Rings, except
/// where CostModelInputs::mpi_collectives says the MPI backend's algorithms run (libnbc's
/// binomial tree for reduce-scatter; CostModelInputs::mpi_all_reduce for all-reduce).
double collective_seconds(const GroupLink& g, int collectives, double bus_volume, Collective kind,
                          const CostModelInputs& c);

/// "halving-doubling (MPI)", "a binomial tree (MPI)", "a ring (MPI)" or "a ring (NCCL)":
/// how `c` times an all-reduce, for plan's report.
std::string all_reduce_description(const CostModelInputs& c);

/// The attention work the kernels do for rows packed with documents of `document_tokens`
/// tokens, as a fraction of one document filling the row: host attention multiplies query
/// block [i0, i0 + rows) only against keys from its first query's document start (masked-out
/// tiles skipped); GPUs (rows >= seq_len) compute and mask whole rows (1). 1 when
/// document_tokens is 0 or at least seq_len. Documents of equal length, back to back.
double document_attention_fraction(int seq_len, double document_tokens, int rows);

/// The same count for actual packed rows: `doc_start` (B, T), each token's document start
/// (model::BatchShape::doc_start, host). For each row and query block [i0, i0 + rows), adds
/// (block rows) x (keys from the block's first document start to i1) to `computed` and
/// (block rows) x i1 to `full`; computed / full is the fraction of the attention the kernels
/// ran (the trainer's MFU). rows = 1 is exact per query: cuDNN's variable-length path.
/// For documents of equal length it is document_attention_fraction.
void add_document_attention_work(const std::int32_t* doc_start, int B, int T, int rows, double& computed,
                                 double& full);

/// The step of `plan` (one strategy on one mesh, from plan_strategy(in, ...)) for the job
/// `in` describes, on the machine `c` describes. For eval and generate (in.forward_only())
/// the "step" is one forward pass of PlanInput::forward_tokens (generate: one new token),
/// which ranks their strategies.
StepPrediction predict_step(const PlanInput& in, const StrategyPlan& plan, const CostModelInputs& c);

}  // namespace meshtrain::plan
