#pragma once
/// \brief The run configuration: INI files (`[section] key = value`) plus
/// `--section.key=value` overrides, parsed with Boost.Program_options. Every key has a
/// default and a help line (`meshtrain <command> --help`); unknown keys and bad values
/// are UserErrors that name the key (and the nearest valid one).

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "config/choices.hpp"

namespace meshtrain {

struct ModelConfig {
  ModelFamily family = ModelFamily::Gpt2;
  std::int64_t vocab_size = 50257;
  int vocab_pad_multiple = 1;         ///< pad the vocabulary up to a multiple (TP needs divisibility)
  int d_model = 768;
  int n_layers = 12;
  int n_heads = 12;
  int n_kv_heads = -1;                ///< -1: = n_heads (no GQA)
  int ffn_dim = -1;                   ///< -1: 4*d_model (gpt2) or the Llama rule
  int max_seq_len = 1024;
  bool tie_embeddings = true;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  double init_std = 0.02;
  int lora_rank = 0;                  ///< >0: train LoRA adapters only (base weights frozen)
  double lora_alpha = 16.0;
  std::string lora_targets = "auto";  ///< comma list of projections; auto = PEFT's default (q,v / c_attn)
  BaseQuant base_quant = BaseQuant::None;  ///< the frozen LoRA base stored quantized (QLoRA)
  bool base_quant_embeddings = true;       ///< with base_quant: the embeddings and LM head quantized too
};

struct ParallelConfig {
  int dp_replicate = 1;
  int dp_shard = -1;
  int tp = 1;
  StrategyChoice strategy = StrategyChoice::Auto;
  Backend backend = Backend::Auto;
  int prefetch = 1;                   ///< gathered blocks prefetched ahead of compute
  ReduceDtype reduce_dtype = ReduceDtype::Fp32;
  std::string memory_limit;           ///< per-rank budget for `auto` on CPU ("8GiB"); empty = node RAM / ranks
  double memory_headroom = 0.15;      ///< fraction of the budget kept free
  double collective_timeout = 600.0;  ///< seconds a rank waits in a collective before aborting the job
};

/// [plan]: the cluster `meshtrain plan` plans for instead of this job. These keys were
/// parallel.world_size, parallel.gpus_per_node, parallel.device_memory and
/// parallel.target_{gemm_tflops,bus_gbps,mem_gbps}; the old names still work with a warning
/// (moved_config_keys).
struct PlanConfig {
  int world_size = 0;                 ///< ranks of the target job (0 = this job)
  int gpus_per_node = 0;              ///< ranks per node of the target (0 = this job's)
  std::string device_memory;          ///< memory per device of the target ("80GiB"; empty = this machine's)
  double gemm_tflops = 0;             ///< per-device GEMM peak, TFLOP/s (0 = measured here)
  std::string bus_gbps;               ///< "intra,inter" node bus bandwidth, GB/s (empty = measured here)
  double mem_gbps = 0;                ///< device memory bandwidth, GB/s (0 = measured here)
};

struct TrainConfig {
  int steps = 100;
  int micro_batch = 4;                ///< 0 = auto (the planner chooses; needs global_batch)
  int seq_len = 256;
  int grad_accum = 1;
  int global_batch = 0;               ///< sequences per optimizer step; 0 = micro_batch*dp*grad_accum
  double lr = 3e-4;
  double min_lr = 3e-5;
  int warmup_steps = 10;
  LrScheduleKind lr_schedule = LrScheduleKind::Cosine;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double adam_eps = 1e-8;
  bool decay_embeddings = false;      ///< apply weight decay to embeddings (never to norms/biases)
  double grad_clip = 1.0;             ///< 0 disables clipping
  Precision precision = Precision::Fp32;
  bool activation_checkpointing = false;
  std::uint64_t seed = 1234;
  int eval_every = 0;                 ///< 0 = only at the end (when val.bin exists)
  int eval_batches = 4;               ///< global batches of validation windows per evaluation
  int log_every = 1;
  double time_limit = 0;              ///< seconds; save and exit before this (0 = none; Slurm end time also used)
  double time_limit_margin = 60;      ///< seconds before the limit at which to save
  int max_skipped_steps = 5;          ///< non-finite steps skipped before aborting
  std::string inject_nan_steps;       ///< debug: comma list of steps whose gradients are made NaN
  int inject_nan_rank = -1;           ///< debug: which rank injects (-1 = all)
  double peak_tflops = 0;             ///< per-rank GEMM peak for MFU (0 = measured at start)
  std::string sample_prompt;          ///< text sampled at the end of training (empty = none)
  int sample_tokens = 0;
  double sample_temperature = 0.8;    ///< 0 = greedy
  int sample_top_k = 40;              ///< 0 = all tokens
  double sample_top_p = 1.0;          ///< nucleus after top-k; 1 = off
  double sample_min_p = 0.0;          ///< min-p after top-p; 0 = off
  Objective objective = Objective::Sft;  ///< sft: cross-entropy on the targets; dpo, simpo: preference pairs (doc/finetuning.md)
  double dpo_beta = 0.1;              ///< DPO's beta: the scale of the log-ratio rewards
  double simpo_beta = 2.0;            ///< SimPO's beta: the scale of the length-normalized rewards
  double simpo_gamma = 1.0;           ///< SimPO's gamma: the target reward margin
};

struct DataConfig {
  std::string dir;                    ///< dataset directory from `meshtrain prepare` ("random" = random tokens)
  bool document_mask = false;         ///< text datasets: attention, positions and loss per end-of-text document
};

struct CheckpointConfig {
  std::string dir;                    ///< empty: <output.dir>/checkpoints
  int every = 0;                      ///< steps between saves (0 = only at the end)
  int keep = 3;
  std::string resume = "auto";        ///< auto | none | PATH
  bool overwrite = false;             ///< a start over another run's checkpoints deletes them (train/earlier_run.hpp)
  std::string init_from;              ///< safetensors file or dir (or .h5 checkpoint) with initial weights
  bool save_final = true;
  bool async = false;                 ///< write saves in the background (checkpoint/async_save.hpp)
};

/// gpu.*: each fused path of the step behind its own switch, defaulting to the fused path,
/// so one that misbehaves on a device can be turned off alone. The same code runs on host
/// builds (its host twin), so the keys mean the same there.
struct GpuConfig {
  bool fused_optimizer = true;        ///< device-resident norm + clip, one AdamW launch per unit
  AttentionChoice attention = AttentionChoice::Cudnn;  ///< cuDNN flash attention where supported, else Kokkos
  bool fused_loss = true;             ///< one-pass online-softmax cross-entropy, loss kept on the device
  bool fused_norms = true;            ///< residual add (+ bias) fused with the block's second norm
  NormFormChoice norm_form = NormFormChoice::Auto;  ///< norm kernels: a team or a warp per row (kernels::NormForm)
  bool row_packs = true;  ///< row kernels move rows in 16-byte packs where the rows allow it
  bool graphs = true;                 ///< replay each step from a CUDA graph where the step allows it
  bool epilogues = true;              ///< bias / GELU / their gradients in the GEMMs (linalg/gemm_epilogue.hpp)
};

struct OutputConfig {
  std::string dir = "runs/default";
  bool log_all_ranks = false;
  LogLevel log_level = LogLevel::Info;
};

struct Config {
  ModelConfig model;
  ParallelConfig parallel;
  PlanConfig plan;
  TrainConfig train;
  DataConfig data;
  CheckpointConfig checkpoint;
  OutputConfig output;
  GpuConfig gpu;
  std::string source_file;            ///< the INI file, if any
  /// Not a key: the weights eval/generate load (their --checkpoint, resolved), set by the
  /// command. model.base_quant=gguf finds its GGUF base there before checkpoint.init_from.
  std::string loaded_weights;
  /// Keys given on the command line, and keys given in the INI file (not defaulted). They
  /// let later stages tell a value the user chose from a default (warnings when one key
  /// overrides another; eval/generate dropping a saved run's mesh that does not fit).
  std::set<std::string> command_line_keys, file_keys;
  /// One line naming each old key that was used and its new name (moved_config_keys), or
  /// empty; the app logs it once, on rank 0.
  std::string deprecation_note;
  bool is_set(const std::string& key) const { return command_line_keys.count(key) || file_keys.count(key); }
};

/// A parse result: the config, the free arguments of the subcommand, and whether help was asked.
struct ParsedArgs {
  Config config;
  bool help = false;
  std::string help_text;
};

/// \brief Parses `args` (after the subcommand): an optional INI path, then overrides.
/// Throws UserError for unknown keys, bad values, or a missing file. `command_options`
/// are the subcommand's own options (e.g. "batches" of eval), offered in the message
/// when an unknown option without a section is given.
ParsedArgs parse_config(const std::string& command, const std::vector<std::string>& args,
                        const std::vector<std::string>& command_options = {});

/// Range/enum checks that need no knowledge of the job (UserError naming the key).
void validate_config(const Config& config);

/// The effective config as INI text (every key, current values) — printed at start and
/// saved with each run.
std::string config_to_ini(const Config& config);
/// One value as config_to_ini writes it: bare, or in double quotes with C escapes
/// (\\ \" \n \r \t \xHH) where the bare text would not read back (a newline, '#', ';',
/// blanks at either end, a leading quote).
std::string quote_ini_value(const std::string& value);
/// The inverse of quote_ini_value for a value written by it (bare text is returned as it
/// is); UserError for broken quoting.
std::string unquote_ini_value(const std::string& written);
/// One line per key: "model.d_model = 768".
std::vector<std::pair<std::string, std::string>> config_entries(const Config& config);

/// Keys that moved: (old name, new name). The old name is still read, with a deprecation
/// note; giving both is a UserError.
const std::vector<std::pair<std::string, std::string>>& moved_config_keys();

/// plan.bus_gbps "intra,inter" (or "both") in GB/s; throws UserError naming `key`.
std::pair<double, double> parse_bus_gbps(const std::string& key, const std::string& text);

/// Parses "8GiB", "512MB", "1.5e9" into bytes; throws UserError naming `key`.
std::uint64_t parse_bytes(const std::string& key, const std::string& text);
/// Parses "1,5,7" into integers; throws UserError naming `key`.
std::vector<long> parse_int_list(const std::string& key, const std::string& text);

}  // namespace meshtrain
