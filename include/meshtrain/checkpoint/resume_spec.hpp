#pragma once
/// \brief checkpoint.resume as checkpoint::resolve_resume takes it: which checkpoint a run
/// continues from. A dependency-free header, so the run settings (plan/run_spec.hpp) can
/// hold one without including the checkpoint module's HDF5 side.

#include <string>

namespace meshtrain::checkpoint {

/// checkpoint.resume: the newest checkpoint of checkpoint.dir, none, or a path.
struct ResumeSpec {
  enum class Kind { Auto, None, Path };
  Kind kind = Kind::Auto;
  std::string path;  ///< Kind::Path: a step_*.h5 file or a checkpoint directory
};

}  // namespace meshtrain::checkpoint
