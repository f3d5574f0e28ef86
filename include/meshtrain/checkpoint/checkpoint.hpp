#pragma once
/// \brief Collective HDF5 checkpoints (format: doc/checkpoints.md): one file per
/// checkpoint holding every parameter and both AdamW moments as full logical fp32 tensors
/// under their Hugging Face names, written by all ranks at once, each writing the
/// hyperslabs it owns. Because the file holds logical tensors, `load` on any mesh,
/// strategy or world size reads whatever hyperslabs that mesh needs (resharding).
///
/// Commit protocol of `save`: write `step_XXXXXXXX.h5.tmp`, close, fsync, rename to
/// `.h5`, fsync the directory, replace `latest` (temp file + rename + directory fsync),
/// then apply retention. A crash at any point leaves `latest` naming a complete file.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/resume_spec.hpp"
#include "checkpoint/stored_choices.hpp"
#include "config/choices.hpp"
#include "model/model_dims.hpp"
#include "parallel/device_mesh.hpp"
#include "parallel/fsdp.hpp"
#include "parallel/strategy.hpp"
#include "runtime/mesh.hpp"

namespace meshtrain::checkpoint {

/// Version of the file layout written by this build (doc/checkpoints.md). Readers accept
/// versions 1..kFormatVersion.
inline constexpr int kFormatVersion = 1;

/// Where the frozen base weights of a LoRA run come from. Checkpoints of a LoRA run hold
/// the adapters and their optimizer state only, plus this reference; loading one reads the
/// base from it (doc/checkpoints.md).
struct BaseRef {
  std::string path;            ///< absolute path of the weights (checkpoint.init_from); "" = random init
  std::uint64_t bytes = 0;     ///< total size of its weight files when written
  std::int64_t mtime_ns = 0;   ///< newest modification time of those files
  std::uint64_t seed = 0;      ///< path "": the base is the initialisation from this train.seed
  double init_std = 0;         ///< path "": ... with this model.init_std (0: not recorded, older files)
};

/// The tokenizer a checkpoint's model was trained with (attributes of /model; see
/// checkpoint/tokenizer_ref.hpp): how its ids map to text.
struct TokenizerRef {
  bool recorded = false;     ///< false: written before tokenizers were recorded
  std::string spec;          ///< make_tokenizer spec ("byte" or an absolute path); "" = none known (random tokens)
  std::string kind;          ///< "byte", "bpe", "sentencepiece"
  std::int64_t vocab_size = 0;
  std::string hash;          ///< data::Tokenizer::hash(); "" for byte
  /// What a Hugging Face export needs to prompt and stop the model as it was trained (also
  /// attributes of /model; absent in older checkpoints, read as ""/0):
  /// the chat format of its instruction/chat data (meta.json's chat_template: "chatml",
  /// "alpaca"...; "" when it was trained on text only), carried along an init_from/resume
  /// chain until data in another format replaces it...
  std::string chat_format;
  /// ...the system message that data rendered its conversations without one with (meta.json's
  /// chat_system; "" for none), which `generate --chat` and the export's chat_template use when
  /// a conversation has none; absent (nullopt) when the data did not record it (older
  /// datasets and checkpoints), and carried along with chat_format...
  std::optional<std::string> chat_system;
  /// ...and the context length its pretrained source declares (config.json's
  /// max_position_embeddings / n_positions, GGUF llama.context_length; 0 when unknown): a
  /// fine-tune on shorter windows keeps the source's RoPE range.
  std::int64_t source_context = 0;
  bool known() const { return !spec.empty(); }
  /// "the bpe tokenizer /m/SmolLM2.gguf (49152 ids, hash 0123...)"; "no known tokenizer" when unknown.
  std::string str() const;
};

/// \brief What save and load need to know about the run (train::checkpoint_meta makes it
/// from the run's setup): the model, the writer's mesh, strategy and batch split, the
/// schedule's root attributes, the effective configuration and the retention count.
struct CheckpointMeta {
  model::ModelDims dims;      ///< written to /model; load checks the file against it
  MeshShape mesh_shape;             ///< the writer's mesh (root attributes)
  parallel::Strategy strategy = parallel::Strategy::FullShard;
  int seq_len = 0, micro_batch = 0, global_batch = 0, grad_accum = 0;  ///< the resolved batch split
  bool activation_checkpointing = false;  ///< as resolved (root attribute, with the mesh: StoredChoices)
  int ranks_per_node = 0;     ///< the writer's job: ranks per node, 0 when its nodes differ in size
  /// The schedule and numerics (root attributes: what the run trained with).
  LrScheduleKind lr_schedule = LrScheduleKind::Cosine;
  double lr = 0, min_lr = 0;
  int warmup_steps = 0, total_steps = 0;
  Precision precision = Precision::Fp32;
  std::string config_ini;     ///< the effective configuration (root attribute config_ini)
  int keep = 3;               ///< checkpoint.keep: complete checkpoints kept after a save
};

/// Training progress stored with the weights. Everything else a resumed run needs
/// (initialisation, data order, sampling) is a pure function of `seed` and `cursor`.
struct TrainState {
  int step = 0;                   ///< optimizer steps completed; a resumed run continues at step + 1
  std::uint64_t cursor = 0;       ///< training windows consumed (global, mesh-independent)
  int updates = 0;                ///< optimizer updates applied (AdamW bias correction)
  int skipped = 0;                ///< steps skipped for non-finite loss or gradient norm
  std::uint64_t seed = 0;         ///< train.seed of the run that wrote the checkpoint
  std::uint64_t tokens_seen = 0;  ///< cursor * train.seq_len
  BaseRef base;                   ///< LoRA runs (engine.has_frozen()): the frozen base weights
  TokenizerRef tokenizer;         ///< the model's tokenizer, recorded in /model
  /// Save only: the run settings a resume must keep (the trainer's train::RunSettings),
  /// written as the root attribute `run_settings` ("key = value" lines); not written when
  /// empty.
  std::string run_settings;
  /// Save only: the first training window of every data-parallel rank at the next step (the
  /// sampler's position; the dataset rank_first_window of the training-state group, see
  /// doc/checkpoints.md); written as given, one per dp rank.
  std::vector<std::uint64_t> rank_first_windows;
};

/// Time and volume of one save or load, for the log and metrics.jsonl.
struct IoStats {
  std::string path;               ///< the checkpoint file
  double seconds = 0;             ///< wall time, barrier to barrier (the slowest rank)
  std::uint64_t bytes = 0;        ///< tensor bytes moved by all ranks together
  bool written = true;            ///< save only: false when refused (non-finite state)
  // Save only: where the bytes went (checkpoint::reduce_write_stats fills them).
  double data_seconds = 0;        ///< the slowest rank's tensor-data phase (staging + its writes)
  int writer_ranks = 0;           ///< ranks that wrote tensor bytes (each its own pieces)
  int writer_nodes = 0;           ///< nodes holding those ranks
  std::uint64_t max_node_bytes = 0;  ///< tensor bytes written from the busiest node
  double checksum_seconds = 0;    ///< the slowest rank's checksum time (its CRCs and the attribute writes)
  /// Asynchronous saves (checkpoint.async, async_save.hpp): `seconds` runs from the start of
  /// the save to its commit while training went on; `held_seconds` is the part training
  /// waited for (staging, the file's layout, the completion check and the commit).
  bool async = false;
  double held_seconds = 0;
  /// Asynchronous saves: the busiest rank's background thread CPU time (its checksums,
  /// non-finite scan and pwrite copies into the page cache) and its wait in fdatasync. What
  /// a background write can take from training on a machine with no idle core is the CPU part.
  double background_cpu_seconds = 0;
  double background_sync_seconds = 0;
  std::uint64_t direct_bytes = 0;  ///< asynchronous saves: of `bytes`, written with O_DIRECT
  double gbps() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0; }
  /// File-system bandwidth of the data phase: all tensor bytes over the slowest rank's time.
  double data_gbps() const { return data_seconds > 0 ? static_cast<double>(bytes) / data_seconds / 1e9 : 0.0; }
};

/// The LoRA settings a checkpoint was written with (stored in /model; part of the model
/// description that resume and eval compare).
struct LoraSettings {
  bool recorded = false;  ///< false: a checkpoint written before the settings were stored
  int rank = 0;           ///< model.lora_rank (0: no adapters)
  double alpha = 16;      ///< model.lora_alpha
  std::string targets;    ///< model.lora_targets, resolved, in the family's order ("q,v")
  /// model.base_quant: how the frozen base is stored (QLoRA); a file without the attribute
  /// predates it and had none. Part of the model: the quantized base is what trained.
  BaseQuant base_quant = BaseQuant::None;
  /// model.base_quant_embeddings (with a quantized base): the embeddings and LM head quantized
  /// too. A file without the attribute predates it and quantized them.
  bool base_quant_embeddings = true;
  std::string str() const;                     ///< "model.lora_rank=4, model.lora_alpha=16, ..."
  bool same(const LoraSettings& other) const;  ///< equal adapters (any two without LoRA are equal)
};

/// The LoRA settings stored in checkpoint file `path` (serial: call on one rank); not
/// `recorded` when the file predates them. UserError when the file cannot be opened.
LoraSettings stored_lora_settings(const std::string& path);

/// The `run_settings` record of checkpoint `path` (the trainer's train::RunSettings), read
/// on rank 0 and shared. `readable` is false when the file does not open as HDF5 (the load that
/// follows reports why); `recorded` is false for a checkpoint written before the record.
struct StoredRunSettings {
  bool readable = false, recorded = false;
  std::string text;
  /// The root attribute `seq_len` (train.seq_len of the run; every checkpoint version has
  /// it): what `eval --checkpoint` evaluates with when no train.seq_len is given. 0 when
  /// the file is not readable or lacks it.
  int seq_len = 0;
};
StoredRunSettings stored_run_settings(const MpiComm& comm, const std::string& path);

/// The resolved shape checkpoint `path` records (StoredChoices: world_size, ranks_per_node,
/// the mesh, mesh_strategy, micro_batch, activation_checkpointing), read on rank 0 and
/// shared; not `recorded` when the file does not open or predates the ranks_per_node /
/// activation_checkpointing attributes.
StoredChoices stored_choices(const MpiComm& comm, const std::string& path);

/// Collective over `comm`: fills the save-only fields of `stats` from this rank's tensor
/// bytes written and data-phase seconds.
void reduce_write_stats(const MpiComm& comm, std::uint64_t my_bytes, double my_data_seconds, IoStats& stats);

/// The save's log line after "checkpoint PATH: ": size, time, overall rate, then the data
/// phase as the file system saw it and what crossed the network.
std::string describe_save(const IoStats& stats);

/// "step_00000042.h5".
std::string checkpoint_file_name(int step);

/// \brief Saves the engine's trainable master weights and AdamW moments plus `state` into
/// `dir`/step_%08d.h5 (commit protocol above) and keeps the newest `meta.keep` complete
/// checkpoints. Collective over `mesh.world()`.
///
/// With frozen parameters (LoRA) the file holds the trainable parameters (the adapters)
/// and their moments only, and `state.base` as the reference to the base weights.
///
/// A state holding a non-finite value is never committed: the temporary file is removed
/// and the result has written == false (same on every rank). UserError (every rank alike)
/// when the directory cannot be created or written.
template <class T>
IoStats save(const parallel::FsdpEngine<T>& engine, const parallel::DeviceMesh& mesh, const CheckpointMeta& meta,
             const TrainState& state, const std::string& dir);

/// \brief Which checkpoint a run resumes from: `setting` is checkpoint.resume.
///   none  -> "" (fresh start)
///   auto  -> the newest complete checkpoint in `dir` via `latest` (falling back to the
///            highest step_*.h5 when there is no `latest`); "" when there is none
///   PATH  -> that .h5 file, or the newest complete checkpoint of that directory
/// UserError for a `latest` that points nowhere, a PATH that does not exist, a directory
/// PATH without checkpoints. Not collective (see the overload).
std::string resolve_resume(const std::string& dir, const ResumeSpec& setting);
/// Rank 0 resolves, every rank gets its answer or its UserError. Collective.
std::string resolve_resume(const MpiComm& comm, const std::string& dir, const ResumeSpec& setting);

/// \brief Loads master weights and both moments from checkpoint `path` into `engine`
/// (each rank reads the hyperslabs of its state range) and returns the stored progress.
/// Validation (UserError naming the file and the problem, on every rank alike): not an
/// HDF5 file or truncated, unknown format version, a model config that differs from
/// meta.dims (naming each differing key with both values), a missing dataset, a wrong
/// shape or dtype. Nothing in the engine changes when validation fails. Every parameter
/// and moment is read (a forward-only engine's: the parameters only), so the engine needs
/// no init_parameters first. A LoRA checkpoint's
/// base weights are read from its reference (UserError naming the path when it moved or
/// changed), or from the file itself when it has none (written before references).
/// Collective.
template <class T>
TrainState load(parallel::FsdpEngine<T>& engine, const parallel::DeviceMesh& mesh, const CheckpointMeta& meta,
                const std::string& path, IoStats* stats = nullptr);

/// \brief Initial weights for fine-tuning (checkpoint.init_from): master weights only,
/// from a meshtrain .h5 checkpoint, a .safetensors file, a GGUF file, or a directory holding
/// model.safetensors or a sharded model.safetensors.index.json. Moments are zeroed (a
/// forward-only engine has none).
/// Tensors are matched by name and shape (see doc/checkpoints.md for the accepted
/// spellings); a missing parameter or a wrong shape is a UserError. A LoRA checkpoint as
/// `path` brings its adapters and reads the base from its reference. Parameters the source
/// does not hold (LoRA adapters of a base model) get their initial values from `seed`
/// (model/init); nothing else is initialised, so the engine needs no init_parameters
/// first. Returns the reference a LoRA run's checkpoints record for the frozen weights.
/// `adapters_loaded` (when given): whether `path` held LoRA adapters of this model, which
/// the run then continues, rather than the adapters being initialised (B = 0, so that the
/// initial policy equals the base). Collective.
template <class T>
BaseRef load_weights(parallel::FsdpEngine<T>& eng, const parallel::DeviceMesh& mesh, const model::ModelDims& dims,
                     const std::string& path, std::uint64_t seed, IoStats* stats = nullptr,
                     bool* adapters_loaded = nullptr);

/// The newest complete checkpoint of directory `dir`: the file `latest` names, or without
/// `latest` the highest step_*.h5; "" when there is none. UserError when `latest` is
/// damaged or points to a file that does not exist.
std::string newest_checkpoint(const std::string& dir);

/// Complete checkpoints (step_*.h5, no .tmp) in `dir`, oldest first; empty when the
/// directory does not exist.
std::vector<std::string> list_checkpoints(const std::string& dir);

/// The complete checkpoints of `dir` of a step above `step`, oldest first (in a run's own
/// directory: the steps a resume of step `step` trains again).
std::vector<std::string> list_checkpoints_after(const std::string& dir, int step);

/// What else a run's saves leave in `dir`: `latest` and the .tmp files of saves that did
/// not finish; empty when the directory does not exist.
std::vector<std::string> list_checkpoint_other_files(const std::string& dir);

}  // namespace meshtrain::checkpoint
