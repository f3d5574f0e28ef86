#pragma once
/// \brief The cost model's measurements of the machine: GEMM rates (square and this model's
/// shapes), copy bandwidth, the AdamW and activation kernels' rates, the links' bus
/// bandwidth and latency, the overlap of an FSDP collective behind GEMMs and the
/// synchronisation cost of a blocking tp all-reduce. Everything here runs kernels or talks
/// MPI (collective over the world); the result is plain data (CostModelInputs) for the pure
/// predictor of plan/cost_model.hpp.

#include <optional>

#include "config/choices.hpp"
#include "kernels/attention.hpp"
#include "model/model_dims.hpp"
#include "plan/cost_model.hpp"
#include "plan/run_spec.hpp"
#include "runtime/runtime.hpp"

namespace meshtrain::plan {

/// What to measure for which run (named, so a call reads as what it asks).
struct MeasureRequest {
  PlanTarget target;          ///< plan.*: a rate given there is taken, not measured
  BatchSpec batch;            ///< the micro-batch whose GEMM shapes are timed
  Backend backend = Backend::Auto;
  bool bf16 = false;          ///< the compute dtype of the timed GEMMs and kernels
  /// Measure on this job's ranks (links, overlap, sync cost, model GEMMs); false when
  /// planning another cluster, whose links this job does not have.
  bool on_this_job = true;
  std::optional<model::ModelDims> model;  ///< the model whose own shapes are timed; none: square GEMMs only
  int tp = 1;                 ///< the tensor-parallel degree those shapes are split over
  /// gpu.attention: where it names a fused kernel this build runs (kernels::attention_is_fused),
  /// attention is timed on its own (CostModelInputs::attention_flops).
  kernels::AttentionPath attention = kernels::AttentionPath::Kokkos;
};

/// The request a run of `spec` makes: its target, batch, backend, precision and model, on
/// this job's ranks, at the configured tp (1 when the planner chooses it).
MeasureRequest measure_request(const RunSpec& spec);

/// Measures (collectively over the job's world) or takes from `req.target` (plan.gemm_tflops,
/// plan.bus_gbps, plan.mem_gbps) every input of the predictor.
CostModelInputs measure_cost_inputs(const MeasureRequest& req, const Runtime& rt);

/// Measured on the job's ranks (collective over the world): an all-gather of one block's
/// parameters alone, GEMMs of about the same duration alone, then both at once with
/// progress() between the GEMMs, as the model polls between its kernels (one GEMM of the
/// model's linear-layer size, `rows` = micro_batch x seq_len, between two polls; shrunk to
/// ~50 ms at `gemm_flops` for large models). Returns the hidden fraction, (t_comm + t_gemm -
/// t_both) / min of the two, in [0, 1], from the slowest rank's times, the median of three.
double measure_overlap(const Runtime& rt, Backend backend, const model::ModelDims& dims, int rows, int tp,
                       double gemm_flops);

/// Measured on the job's ranks (collective over the world), in groups of `group` consecutive
/// ranks: ten rounds of (two GEMMs of the model's linear-layer size, then a blocking
/// all-reduce of one micro-batch's activations in the group), against the GEMMs alone and
/// the all-reduces alone. Returns the extra seconds per round (>= 0; the slowest rank's
/// times, the median of three): what each synchronising collective costs beyond its bytes.
/// 0 for group < 2 or a group that does not divide the world.
double measure_sync_cost(const Runtime& rt, Backend backend, const model::ModelDims& dims, int rows, int group,
                         double gemm_flops);

/// Effective FLOP/s of one micro-step's GEMMs of `dims` (see CostModelInputs::model_gemm_flops);
/// 0 when one block's GEMMs exceed `max_flop` (then too slow to time here: big models run
/// their GEMMs near the square peak anyway).
/// `with_attention` false: the attention GEMMs left out, and their FLOPs (model::StepFlops::attention)
/// not credited; the rate of the other GEMMs, where attention is timed on its own.
double measure_model_gemm_flops(const model::ModelDims& dims, int micro_batch, int seq_len, int tp, bool bf16,
                                double max_flop = 4e10, bool with_attention = true);

/// Effective FLOP/s of one micro-step's attention, forward and backward of every block, as the
/// kernels run it on `path` (kernels::attention_forward/backward, tp rank 0's heads), FLOPs as
/// model::StepFlops::attention counts them (without checkpointing). Runs on any build (the
/// Kokkos path where the fused one is absent: the tests' host twin of the device measurement).
double measure_attention_flops(const model::ModelDims& dims, int micro_batch, int seq_len, int tp, bool bf16,
                               kernels::AttentionPath path);

}  // namespace meshtrain::plan
