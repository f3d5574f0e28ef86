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
#include <string>
#include <vector>

#include "meshtrain/parallel/fsdp.hpp"
#include "meshtrain/runtime/mesh.hpp"
#include "meshtrain/train/run_setup.hpp"

namespace meshtrain::checkpoint {

/// Version of the file layout written by this build (doc/checkpoints.md). Readers accept
/// versions 1..kFormatVersion.
inline constexpr int kFormatVersion = 1;

/// Training progress stored with the weights. Everything else a resumed run needs
/// (initialisation, data order, sampling) is a pure function of `seed` and `cursor`.
struct TrainState {
  int step = 0;                   ///< optimizer steps completed; a resumed run continues at step + 1
  std::uint64_t cursor = 0;       ///< training windows consumed (global, mesh-independent)
  int updates = 0;                ///< optimizer updates applied (AdamW bias correction)
  int skipped = 0;                ///< steps skipped for non-finite loss or gradient norm
  std::uint64_t seed = 0;         ///< train.seed of the run that wrote the checkpoint
  std::uint64_t tokens_seen = 0;  ///< cursor * train.seq_len
};

/// Time and volume of one save or load, for the log and metrics.jsonl.
struct IoStats {
  std::string path;               ///< the checkpoint file
  double seconds = 0;             ///< wall time, barrier to barrier (the slowest rank)
  std::uint64_t bytes = 0;        ///< tensor bytes moved by all ranks together
  bool written = true;            ///< save only: false when refused (non-finite state)
  double gbps() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0; }
};

/// checkpoint.dir, or <output.dir>/checkpoints when it is empty.
std::string checkpoint_dir(const Config& config);

/// "step_00000042.h5".
std::string checkpoint_file_name(int step);

/// \brief Saves the engine's master weights and AdamW moments plus `state` into
/// `dir`/step_%08d.h5 (commit protocol above) and keeps the newest
/// `setup.config.checkpoint.keep` complete checkpoints. Collective over `mesh.world()`.
///
/// A state holding a non-finite value is never committed: the temporary file is removed
/// and the result has written == false (same on every rank). UserError (every rank alike)
/// when the directory cannot be created or written.
template <class T>
IoStats save(const parallel::FsdpEngine<T>& engine, const Mesh& mesh, const train::RunSetup& setup,
             const TrainState& state, const std::string& dir);

/// \brief Which checkpoint a run resumes from: `setting` is checkpoint.resume.
///   none  -> "" (fresh start)
///   auto  -> the newest complete checkpoint in `dir` via `latest` (falling back to the
///            highest step_*.h5 when there is no `latest`); "" when there is none
///   PATH  -> that .h5 file, or the newest complete checkpoint of that directory
/// UserError for a `latest` that points nowhere, a PATH that does not exist, a directory
/// PATH without checkpoints. Not collective (see the overload).
std::string resolve_resume(const std::string& dir, const std::string& setting);
/// Rank 0 resolves, every rank gets its answer or its UserError. Collective.
std::string resolve_resume(const MpiComm& comm, const std::string& dir, const std::string& setting);

/// \brief Loads master weights and both moments from checkpoint `path` into `engine`
/// (each rank reads the hyperslabs of its state range) and returns the stored progress.
/// Validation (UserError naming the file and the problem, on every rank alike): not an
/// HDF5 file or truncated, unknown format version, a model config that differs from
/// setup.dims (naming each differing key with both values), a missing dataset, a wrong
/// shape or dtype. Nothing in the engine changes when validation fails. Every parameter
/// and moment is read, so the engine needs no init_parameters first. Collective.
template <class T>
TrainState load(parallel::FsdpEngine<T>& engine, const Mesh& mesh, const train::RunSetup& setup,
                const std::string& path, IoStats* stats = nullptr);

/// \brief Initial weights for fine-tuning (checkpoint.init_from): master weights only,
/// from a meshtrain .h5 checkpoint, a .safetensors file, or a directory holding
/// model.safetensors or a sharded model.safetensors.index.json. Moments are zeroed.
/// Tensors are matched by name and shape (see doc/checkpoints.md for the accepted
/// spellings); a missing parameter or a wrong shape is a UserError. Parameters the source
/// does not hold (LoRA adapters of a base model) get their initial values from `seed`
/// (model/init); nothing else is initialised, so the engine needs no init_parameters
/// first. Collective.
template <class T>
void load_weights(parallel::FsdpEngine<T>& engine, const Mesh& mesh, const model::ModelDims& dims,
                  const std::string& path, std::uint64_t seed, IoStats* stats = nullptr);

/// The newest complete checkpoint of directory `dir`: the file `latest` names, or without
/// `latest` the highest step_*.h5; "" when there is none. UserError when `latest` is
/// damaged or points to a file that does not exist.
std::string newest_checkpoint(const std::string& dir);

/// Complete checkpoints (step_*.h5, no .tmp) in `dir`, oldest first; empty when the
/// directory does not exist.
std::vector<std::string> list_checkpoints(const std::string& dir);

}  // namespace meshtrain::checkpoint
