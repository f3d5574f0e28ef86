#pragma once
/// \file
/// \brief Finding the documents of a corpus: expanding input files and directories into a
/// sorted, duplicate-free list, and deciding which files are text.

#include <string>
#include <vector>

namespace meshtrain::data {

/// \brief Expands `inputs` (files and directories, recursed) into regular files sorted
/// by path. Symlinks are followed, but each directory is visited once (by canonical path) and
/// each file listed once (by device and inode, else canonical path), so symlink loops,
/// symlinks and hard links to files already listed add nothing (a hard link or a bind mount is
/// logged as skipped, naming the file kept). `*.dat` files (fortune indexes and other binary
/// tables) are left out.
/// UserError when an input does not exist or a directory cannot be read.
std::vector<std::string> collect_input_files(const std::vector<std::string>& inputs);

/// Why `content` is not a usable text document ("empty", "contains NUL bytes",
/// "is not valid UTF-8"), or "" when it is one.
std::string text_rejection(const std::string& content);

/// The whole file as bytes; UserError naming the file when it cannot be read.
std::string read_file_bytes(const std::string& path);

}  // namespace meshtrain::data
