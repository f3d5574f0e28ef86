#pragma once
/// \brief The cost model: predicted optimizer-step time from FLOPs / GEMM peak plus
/// memory-bound kernel bytes / copy bandwidth, and communication as alpha-beta
/// (latency + bytes / bus bandwidth) per collective, with and without overlap of the FSDP
/// collectives behind compute. Inputs are measured in the same run (GEMM peak, copy
/// bandwidth, bus bandwidth of an all-gather) or given for a target cluster.

#include <string>

#include "meshtrain/config/config.hpp"
#include "meshtrain/parallel/planner.hpp"
#include "meshtrain/runtime/runtime.hpp"

namespace meshtrain::train {

struct CostModelInputs {
  double gemm_flops = 1e11;        ///< per rank, FLOP/s
  std::string gemm_source;
  double copy_bytes = 1e10;        ///< per rank memory bandwidth for elementwise kernels, bytes/s
  double intra_bus_bytes = 1e10;   ///< bus bandwidth inside a node, bytes/s
  double inter_bus_bytes = 1e9;    ///< bus bandwidth across nodes, bytes/s
  double latency_s = 2e-5;         ///< per-collective latency (alpha)
  std::string bus_source;
};

/// Measures (collectively over the job's world) or takes from parallel.target_* keys.
CostModelInputs cost_model_inputs(const Config& cfg, const Runtime& rt, bool bf16, bool measure_here);

struct StepPrediction {
  double compute_s = 0;        ///< GEMM FLOPs / peak + elementwise bytes / bandwidth
  double gemm_s = 0, elementwise_s = 0;
  double fsdp_comm_s = 0;      ///< all-gathers + reduce-scatters / all-reduces (overlappable)
  double tp_comm_s = 0;        ///< tensor-parallel all-reduces (critical path)
  double step_seconds_no_overlap = 0;
  double step_seconds_overlap = 0;
  double tokens_per_s = 0;     ///< global tokens per second with overlap
};

StepPrediction predict_step(const model::ModelDims& dims, const parallel::PlanInput& in,
                            const parallel::StrategyPlan& plan, const CostModelInputs& c);

}  // namespace meshtrain::train
