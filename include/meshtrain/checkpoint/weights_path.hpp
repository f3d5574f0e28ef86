#pragma once
/// \brief What a weights path names (checkpoint.init_from, eval/generate --checkpoint, a
/// LoRA checkpoint's base): the one place these rules live.

#include <string>

namespace meshtrain::checkpoint {

enum class WeightsKind {
  Hdf5,         ///< a meshtrain checkpoint (step_*.h5)
  Safetensors,  ///< a Hugging Face directory (model.safetensors or its index) or a .safetensors file
  Gguf,         ///< a GGUF file
};

struct WeightsPath {
  WeightsKind kind = WeightsKind::Hdf5;
  std::string path;  ///< as given; for a checkpoint directory, its newest committed checkpoint
  /// Weights of a model trained elsewhere: no meshtrain settings or optimizer state come with them.
  bool pretrained() const { return kind != WeightsKind::Hdf5; }
};

/// Classifies `path`:
///  - a directory with model.safetensors or model.safetensors.index.json: Safetensors;
///  - any other directory: a checkpoint directory, its newest committed checkpoint (Hdf5);
///  - a file with the HDF5 signature: Hdf5; with the GGUF magic: Gguf;
///  - any other file: Safetensors when its name ends in .safetensors, else Hdf5 (the
///    checkpoint validation that follows then says it is not an HDF5 file).
/// `what` starts every message, e.g. "--checkpoint PATH" or "checkpoint.init_from=PATH".
/// UserError when the path does not exist or a directory holds no weights. Reads the file
/// system only, not collective: decide on one rank and share the answer.
WeightsPath classify_weights_path(const std::string& path, const std::string& what);

}  // namespace meshtrain::checkpoint
