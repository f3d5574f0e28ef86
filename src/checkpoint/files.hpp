#pragma once
// Checkpoint file names. The durable-write steps of the commit protocol (fsync, atomic
// rename, replacing `latest`) are core/file_io.hpp.

#include <optional>
#include <string>

namespace meshtrain::checkpoint::files {

/// The step of "step_00000042.h5" or "step_100000001.h5" (any number of digits; or of its
/// .tmp when `tmp`); nullopt for other names and for steps beyond int.
std::optional<int> step_of(const std::string& file_name, bool tmp = false);

/// Parent directory of a path ("." when it has none).
std::string parent_dir(const std::string& path);

}  // namespace meshtrain::checkpoint::files
