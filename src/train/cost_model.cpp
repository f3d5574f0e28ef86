#include "meshtrain/train/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "meshtrain/comm/bench.hpp"
#include "meshtrain/comm/mpi_communicator.hpp"
#include "meshtrain/core/error.hpp"
#include "meshtrain/linalg/peak.hpp"
#include "meshtrain/model/layout.hpp"
#include "meshtrain/parallel/comm_groups.hpp"

namespace meshtrain::train {
namespace {

/// Reads+writes of every saved activation element by the memory-bound kernels over a
/// forward and backward (norms, bias, GELU/SwiGLU, softmax, residual adds and their
/// backward). Calibrated against the CPU sweep (perf/README.md).
constexpr double kElementwisePasses = 6.0;

double min_over_world(const Runtime& rt, double v) {
  double out = v;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MIN, rt.world().get());
  return out;
}

}  // namespace

CostModelInputs cost_model_inputs(const Config& cfg, const Runtime& rt, bool bf16, bool measure_here) {
  CostModelInputs c;
  const auto& p = cfg.parallel;
  if (!p.target_gemm_tflops.empty()) {
    c.gemm_flops = std::stod(p.target_gemm_tflops) * 1e12;
    c.gemm_source = "parallel.target_gemm_tflops";
  } else {
    c.gemm_flops = min_over_world(rt, linalg::measure_gemm_flops(1024, 0.3, bf16));
    c.gemm_source = strprintf("measured here, %s GEMM 1024^3, slowest rank", bf16 ? "bf16" : "fp32");
  }
  if (!p.target_mem_gbps.empty()) {
    c.copy_bytes = std::stod(p.target_mem_gbps) * 1e9;
  } else {
    c.copy_bytes = min_over_world(rt, linalg::measure_copy_bandwidth(64.0 * 1024 * 1024, 0.2));
  }
  if (!p.target_bus_gbps.empty()) {
    std::stringstream ss(p.target_bus_gbps);
    std::string a, b;
    std::getline(ss, a, ',');
    std::getline(ss, b, ',');
    try {
      c.intra_bus_bytes = std::stod(a) * 1e9;
      c.inter_bus_bytes = (b.empty() ? std::stod(a) : std::stod(b)) * 1e9;
    } catch (...) {
      throw UserError("parallel.target_bus_gbps must be 'intra,inter' in GB/s, e.g. 150,25");
    }
    c.bus_source = "parallel.target_bus_gbps";
  } else if (measure_here && rt.topology().world_size > 1) {
    auto comm = parallel::make_communicator(rt.world(), "cost_model", cfg.parallel.backend);
    const CollectiveResult big = bench_collective(*comm, CollectiveKind::AllGather, 16u << 20, DType::F32, 1, 3);
    const CollectiveResult small = bench_collective(*comm, CollectiveKind::AllReduce, 64, DType::F32, 2, 20);
    c.intra_bus_bytes = c.inter_bus_bytes = big.busbw;
    c.latency_s = small.time_max;
    c.bus_source = strprintf("measured here: all_gather 16 MiB bus bandwidth over %d ranks, all_reduce latency",
                             rt.topology().world_size);
  } else {
    c.bus_source = "defaults (1 rank: nothing to measure; set parallel.target_bus_gbps for a cluster)";
  }
  return c;
}

StepPrediction predict_step(const model::ModelDims& d, const parallel::PlanInput& in, const parallel::StrategyPlan& p,
                            const CostModelInputs& c) {
  StepPrediction r;
  if (!p.valid) return r;
  const int dp = p.mesh.dp(), tp = p.mesh.tp;
  const double global = in.global_batch > 0 ? in.global_batch : static_cast<double>(in.micro_batch) * dp * p.grad_accum;
  const double tokens = global * in.seq_len;
  const double tokens_per_rank = tokens / dp;
  r.gemm_s = 3.0 * d.flops_per_token_forward(in.seq_len) * tokens_per_rank / tp / c.gemm_flops;
  // Memory-bound kernels: activations (per micro-batch) times micro-batches, plus the
  // optimizer's pass over the state (4 arrays read, 3 written, fp32).
  const double sT = in.bf16 ? 2.0 : 4.0;
  const double act_bytes = p.memory.activations * p.grad_accum;
  const double state_elems = p.memory.params / 4.0;
  r.elementwise_s = (kElementwisePasses * act_bytes / 2.0 + 7.0 * 4.0 * state_elems) / c.copy_bytes;
  (void)sT;
  r.compute_s = r.gemm_s + r.elementwise_s;

  const int ranks_per_node = std::max(1, in.ranks_per_node);
  const bool dp_in_node = p.mesh.dp_shard * tp <= ranks_per_node;
  const double fsdp_bw = dp_in_node ? c.intra_bus_bytes : c.inter_bus_bytes;
  const double fsdp_bytes = p.comm.fsdp_gather + p.comm.fsdp_reduce;
  r.fsdp_comm_s = p.comm.fsdp_collectives * c.latency_s + fsdp_bytes / fsdp_bw + p.comm.replicate / c.inter_bus_bytes;
  r.tp_comm_s = p.comm.tp_collectives * c.latency_s + p.comm.tp / c.intra_bus_bytes;
  r.step_seconds_no_overlap = r.compute_s + r.fsdp_comm_s + r.tp_comm_s;
  // With overlap only the pipeline fill (first gather, last reduction: ~2 units' worth)
  // and whatever exceeds the compute stay exposed.
  const double units = model::num_units(d);
  const double fill = r.fsdp_comm_s * std::min(1.0, 2.0 / units);
  r.step_seconds_overlap = r.compute_s + r.tp_comm_s + std::max(fill, r.fsdp_comm_s - r.compute_s + fill);
  r.tokens_per_s = r.step_seconds_overlap > 0 ? tokens / r.step_seconds_overlap : 0;
  return r;
}

}  // namespace meshtrain::train
