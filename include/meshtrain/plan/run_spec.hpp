#pragma once
/// \brief The run as typed settings: what the app layer resolves once from the parsed
/// configuration (src/app/run_spec_resolve.cpp) and hands down. Code below app/ receives a
/// RunSpec or a part of it, never the Config: every word is an enum, every size a number,
/// every path resolved, and the few places where a key's *presence* matters are booleans.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/resume_spec.hpp"
#include "comm/communicator.hpp"
#include "config/choices.hpp"
#include "data/data_source.hpp"
#include "model/kernel_paths.hpp"
#include "model/model_dims.hpp"
#include "runtime/mesh.hpp"

namespace meshtrain::plan {

/// \brief The batch arithmetic of one optimizer step, in windows (doc/architecture.md,
/// "Names"): micro_batch windows per dp rank and micro-step, grad_accum micro-steps,
/// global_batch = micro_batch x dp x grad_accum windows per step.
struct BatchSpec {
  int micro_batch = 4;   ///< windows per micro-batch; 0 (requested only) = the planner chooses
  int seq_len = 256;     ///< tokens per window, without the shifted target
  int grad_accum = 1;    ///< micro-steps per step
  int global_batch = 0;  ///< windows per step; 0 (requested only) = micro_batch x dp x grad_accum

  /// The batch of a run on `dp` data-parallel ranks: a requested global_batch decides
  /// grad_accum (UserError when it is not a multiple of micro_batch x dp, with the fix),
  /// otherwise grad_accum decides the global batch.
  BatchSpec resolved(int dp) const;
  /// Whether resolved(dp) succeeds: no global_batch, or one that is a multiple of
  /// micro_batch x dp.
  bool splits(int dp) const { return global_batch <= 0 || global_batch % (micro_batch * dp) == 0; }
  /// resolved(dp)'s error when !splits(dp), with the fix.
  std::string split_error(int dp) const;
  /// Tokens of one micro-batch (the host staging buffer of one micro-step).
  std::size_t micro_batch_tokens() const {
    return static_cast<std::size_t>(micro_batch) * static_cast<std::size_t>(seq_len);
  }
  /// Target tokens of one step (every target counted).
  double step_tokens() const { return static_cast<double>(global_batch) * seq_len; }
};

/// A size key: its bytes, and its text as written ("40MiB") for messages.
struct ByteSize {
  std::uint64_t bytes = 0;
  std::string text;
};

/// train.*: the optimisation and the loop.
struct TrainSpec {
  int steps = 100;
  double lr = 3e-4, min_lr = 3e-5;
  int warmup_steps = 10;
  LrScheduleKind lr_schedule = LrScheduleKind::Cosine;
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, adam_eps = 1e-8;
  bool decay_embeddings = false;
  double grad_clip = 1.0;                   ///< 0 = no clipping
  Precision precision = Precision::Fp32;
  bool activation_checkpointing = false;
  std::uint64_t seed = 1234;
  int eval_every = 0, eval_batches = 4, log_every = 1;
  double time_limit = 0, time_limit_margin = 60;  ///< seconds (0 = no limit)
  int max_skipped_steps = 5;
  std::vector<long> inject_nan_steps;       ///< debug: steps whose gradients are made NaN
  int inject_nan_rank = -1;                 ///< debug: -1 = all ranks
  double peak_tflops = 0;                   ///< 0 = measured at start
  std::string sample_prompt;
  int sample_tokens = 0;
  double sample_temperature = 0.8;
  int sample_top_k = 40;
  double sample_top_p = 1.0;
  double sample_min_p = 0.0;
  bool fused_optimizer = true;              ///< gpu.fused_optimizer
  bool graphs = true;                       ///< gpu.graphs (train/step_graph.hpp)
  AttentionChoice attention = AttentionChoice::Cudnn;  ///< gpu.attention
  Objective objective = Objective::Sft;     ///< train.objective
  double dpo_beta = 0.1;                    ///< train.dpo_beta
  double simpo_beta = 2.0, simpo_gamma = 1.0;  ///< train.simpo_beta, train.simpo_gamma
  bool dpo() const { return objective == Objective::Dpo; }
  bool simpo() const { return objective == Objective::Simpo; }
  /// A preference objective (dpo, simpo): the data are pairs, each micro-batch whole pairs, and
  /// the loss is a function of each pair's two sequence log-probabilities (train/dpo.hpp).
  bool preference() const { return objective != Objective::Sft; }
  bool bf16() const { return precision == Precision::Bf16; }
};

/// parallel.*: the mesh asked for (-1 = left to the planner) and how ranks work together.
struct ParallelSpec {
  MeshRequest mesh_request;                         ///< dp_replicate x dp_shard x tp, -1 = infer
  StrategyChoice strategy = StrategyChoice::Auto;
  Backend backend = Backend::Auto;
  int prefetch = 1;
  DType reduce_dtype = DType::F32;           ///< parallel.reduce_dtype: F32 or BF16 gradient reductions
  std::optional<ByteSize> memory_limit;     ///< per rank; unset = node RAM / ranks (or the device)
  double memory_headroom = 0.15;
  double collective_timeout = 600;          ///< seconds; 0 = never
  /// How many mesh degrees are left at -1.
  int free_degrees() const {
    return (mesh_request.dp_replicate == -1) + (mesh_request.dp_shard == -1) + (mesh_request.tp == -1);
  }
};

/// plan.*: the cluster `meshtrain plan` plans for instead of this job; each 0 means "this
/// job's" (or "measured here" for the ceilings).
struct PlanTarget {
  int world_size = 0;
  int gpus_per_node = 0;
  std::optional<ByteSize> device_memory;    ///< per device of the target; unset = this machine's
  double gemm_tflops = 0;                   ///< per-device GEMM peak, TFLOP/s
  double intra_bus_gbps = 0, inter_bus_gbps = 0;  ///< bus bandwidth inside / across nodes, GB/s
  double mem_gbps = 0;                      ///< device memory bandwidth, GB/s
  bool other_cluster() const { return world_size > 0; }
  bool has_bus() const { return intra_bus_gbps > 0; }
};

/// checkpoint.*.
struct CheckpointSpec {
  std::string dir;                          ///< resolved: checkpoint.dir, or <output.dir>/checkpoints
  bool dir_given = false;                   ///< checkpoint.dir was set (messages name it)
  int every = 0, keep = 3;
  checkpoint::ResumeSpec resume;
  bool overwrite = false;                   ///< checkpoint.overwrite (train/earlier_run.hpp)
  std::string init_from;
  bool save_final = true;
  bool async = false;                       ///< checkpoint.async
};

/// output.*.
struct OutputSpec {
  std::string dir = "runs/default";
  bool log_all_ranks = false;
  LogLevel log_level = LogLevel::Info;
};

/// Settings whose meaning depends on whether the user gave the key (warnings only).
struct KeysGiven {
  bool grad_accum = false;                  ///< train.grad_accum was set (in the file or on the command line)
  bool lora_options_on_command_line = false;  ///< model.lora_alpha or model.lora_targets on the command line
};

/// \brief What a command runs the model for, which decides what the planner counts (set by
/// the command, not a key): a training step (train, plan, bench_io), or forward passes only
/// -- eval's micro-batches, generate's one sequence per prompt (train::SessionUse::Inference)
/// -- which hold no gradients, no optimizer state and no activations saved for backward.
enum class ModelUse { Train, Evaluate, Generate };

struct RunSpec {
  model::ModelDims dims;                    ///< model.*, defaults applied and checked
  model::KernelPaths kernel_paths;          ///< gpu.fused_loss, gpu.fused_norms, gpu.epilogues: the model's fused kernels
  BatchSpec batch;                          ///< as requested (RunSetup::batch is the resolved one)
  TrainSpec train;
  ParallelSpec parallel;
  PlanTarget plan_target;                   ///< plan.*: the cluster `meshtrain plan` plans for
  CheckpointSpec checkpoint;
  data::DataSource data;                    ///< data.dir
  OutputSpec output;
  KeysGiven given;
  ModelUse use = ModelUse::Train;
  /// generate: the positions its KV cache holds per sequence (the prompt and the new
  /// tokens, at most model.max_seq_len; `batch` is then one sequence of that many); 0 = no
  /// KV cache (--no_kv_cache).
  int kv_cache_positions = 0;
};

}  // namespace meshtrain::plan
