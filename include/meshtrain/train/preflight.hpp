#pragma once
/// \brief Start-up checks of the places a run will write, made before it writes anything:
/// a run that cannot write its checkpoints must fail at start-up, not after training every
/// step, and a failed start-up must leave output.dir and checkpoint.dir as they were.

#include <string>

namespace meshtrain::train {

/// \brief UserError unless files can be created in `dir` (named `key`, e.g. "output.dir",
/// in the message): when `dir` exists it must be a directory in which a probe file can be
/// created and removed; when it does not exist yet, the same holds for its nearest existing
/// ancestor (where it will be created). Nothing is left behind, nothing is created.
void require_writable_dir(const std::string& key, const std::string& dir);

/// \brief UserError when `path` (a file the run appends to, e.g. output.dir/metrics.jsonl)
/// exists and is not a regular file: a named pipe would block the run at its first record,
/// a directory fail it after the first step. Names `key` and what the path is.
void require_appendable_file(const std::string& key, const std::string& path);

}  // namespace meshtrain::train
