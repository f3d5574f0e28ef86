#pragma once
/// \brief What a checkpoint records of its run's resolved shape (root attributes): the job it
/// was written on and what the resolution chose there -- what a resume on that job keeps
/// (plan::keeps). A dependency-free header, so plan/ can take one without including the
/// checkpoint module's HDF5 side; read by checkpoint::stored_choices (checkpoint.hpp).

#include <string>

#include "parallel/strategy.hpp"
#include "runtime/mesh.hpp"

namespace meshtrain::checkpoint {

struct StoredChoices {
  bool recorded = false;       ///< false: the file does not open, or predates the attributes
  std::string path;            ///< the checkpoint they were read from
  int world_size = 0;
  int ranks_per_node = 0;      ///< 0: nodes of different sizes
  MeshShape mesh_shape;
  parallel::Strategy strategy = parallel::Strategy::FullShard;
  int micro_batch = 0;
  bool activation_checkpointing = false;
};

}  // namespace meshtrain::checkpoint
