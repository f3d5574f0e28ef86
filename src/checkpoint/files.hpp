#pragma once
// File-system steps of the commit protocol (POSIX): fsync of files and directories,
// atomic replacement of small text files, checkpoint names.

#include <optional>
#include <string>

namespace meshtrain::checkpoint::files {

/// fsync of a file or a directory; UserError naming the path when it fails.
void fsync_path(const std::string& path);

/// Replaces `path` by `text` atomically: path.tmp, fsync, rename, fsync of the directory.
void replace_file(const std::string& path, const std::string& text);

/// rename(2) + fsync of the directory; UserError naming both paths on failure.
void rename_durably(const std::string& from, const std::string& to);

/// The step of "step_00000042.h5" (or of its .tmp when `tmp`); nullopt for other names.
std::optional<int> step_of(const std::string& file_name, bool tmp = false);

/// Parent directory of a path ("." when it has none).
std::string parent_dir(const std::string& path);

}  // namespace meshtrain::checkpoint::files
