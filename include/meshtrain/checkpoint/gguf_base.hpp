#pragma once
/// \brief The GGUF file a model.base_quant=gguf run keeps its frozen base in (issue 32), and
/// the block type of each of its matrices: what the planner and the FSDP engine lay the
/// shards out by, before anything is loaded (checkpoint::load reads the blocks themselves).

#include <string>

#include "model/model_dims.hpp"

namespace meshtrain::checkpoint {

/// The GGUF file a LoRA run's frozen base is read from when the run loads `weights`
/// (checkpoint.init_from, eval/generate --checkpoint): `weights` itself when it is a GGUF
/// file, the base a LoRA checkpoint (or a checkpoint directory's newest) names when that is
/// one; "" otherwise. `what` starts a message about a path that does not exist. Reads the
/// file system only; not collective (every rank reaches the same answer).
std::string gguf_base_of(const std::string& weights, const std::string& what);

/// The ggml type and the rows of every frozen matrix of `dims` (a LoRA model) in GGUF file
/// `path`, validated as checkpoint.init_from is (every parameter present with its shape, a
/// type meshtrain reads; UserError naming the tensor otherwise). Not collective.
model::BaseFormats gguf_base_formats(const std::string& path, const model::ModelDims& dims);

}  // namespace meshtrain::checkpoint
