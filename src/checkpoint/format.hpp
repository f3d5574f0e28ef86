#pragma once
// The checkpoint file layout (doc/checkpoints.md): group and attribute names, the model
// description stored in /model, and the validation every reader runs before it reads.

#include <hdf5.h>

#include <string>
#include <vector>

#include "h5.hpp"
#include "checkpoint/checkpoint.hpp"
#include "model/model_dims.hpp"
#include "model/param_spec.hpp"

namespace meshtrain::checkpoint::format {

inline constexpr const char* kFormatName = "meshtrain-checkpoint";
// The file's groups (doc/checkpoints.md); a dataset's path is its group's, "/", its name
// (dataset_path).
inline constexpr const char* kModelGroup = "/model";
inline constexpr const char* kOptimGroup = "/optim";
inline constexpr const char* kExpAvgGroup = "/optim/exp_avg";
inline constexpr const char* kExpAvgSqGroup = "/optim/exp_avg_sq";
inline constexpr const char* kTrainGroup = "/train";  ///< the training state beside the root attributes
inline constexpr const char* kRankFirstWindow = "rank_first_window";  ///< a dataset of kTrainGroup

/// "/model/transformer.wte.weight".
inline std::string dataset_path(const char* group, const std::string& name) { return std::string(group) + "/" + name; }

/// True for the tensors whose rows are the (padded) vocabulary: the token embedding and an
/// untied LM head. Exports drop their padding rows; imports accept them without.
inline bool has_vocab_rows(const model::ParamSpec& p, const model::ModelDims& d) {
  return p.shape.size() == 2 && p.shape[0] == d.vocab && p.split_dim == 0 && (p.is_embedding || p.role == "lm_head.weight");
}

/// Writes the model description as attributes of `group` (/model). Collective under MPI-IO.
void write_model_attrs(hid_t group, const model::ModelDims& dims);

/// The model description of an open checkpoint; UserError naming `path` and the missing key.
model::ModelDims read_model_dims(hid_t file, const std::string& path);

/// "d_model: 64 in the checkpoint, 128 in this run" for every key that differs.
std::vector<std::string> model_differences(const model::ModelDims& in_file, const model::ModelDims& run);

/// The LoRA settings of /model (attributes lora_rank, lora_alpha, lora_targets); not
/// `recorded` in checkpoints written before they were stored.
LoraSettings read_lora(hid_t file);
/// The settings of a resolved model.
LoraSettings lora_settings(const model::ModelDims& dims);

/// What a reader needs from a checkpoint.
struct Requirements {
  bool optimizer = true;                      ///< /optim/exp_avg and /optim/exp_avg_sq too
  const model::ModelDims* same_model = nullptr;  ///< model description (LoRA included) must equal this
  bool lora_optional = false;                 ///< LoRA adapters may be absent (base weights for fine-tuning)
  const model::ModelDims* lora_of = nullptr;  ///< with lora_optional: adapters in the file must match this model's
};

/// \brief Opens checkpoint `path` read-only (serial), or a UserError that says what the file
/// is: missing, not a regular file, not HDF5 at all ("is not an HDF5 file (N bytes; no HDF5
/// signature)"), or HDF5 that does not open ("truncated or damaged (N bytes)"). Every reader
/// that opens a checkpoint before validate() (eval's and generate's early reads of the LoRA
/// settings, the tokenizer, the model keys) opens it through here, so a bad file gets the
/// same message on every path. HDF5's error stack is not printed.
h5::Handle open_checked(const std::string& path);

/// \brief Serial validation of checkpoint `path` (call on one rank, under agree_on_errors):
/// it exists, is an HDF5 file that opens (not truncated), is a meshtrain checkpoint of a
/// known format version, describes the required model, and holds every dataset of `specs`
/// as float32 with the parameter's logical shape. UserError naming the file and the
/// problem; HDF5's error stack is not printed.
void validate(const std::string& path, const std::vector<model::ParamSpec>& specs, const Requirements& req);

}  // namespace meshtrain::checkpoint::format
