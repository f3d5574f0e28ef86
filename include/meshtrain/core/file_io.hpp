#pragma once
/// \brief Checked, durable writes of files (POSIX): every write, fsync and rename checks
/// its result, and a failure becomes one sentence naming the path -- an IoError (exit 74)
/// when the storage failed (disk full, quota, EIO), a UserError (exit 2) when a setting is
/// at fault (permissions, a read-only file system).

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/fault.hpp"

namespace meshtrain::file_io {

/// True for the errno values of a failing storage: ENOSPC, EDQUOT, EIO, EFBIG.
bool is_storage_error(int err);

/// \brief The error to throw for a write of `path` that failed with errno `err`: an IoError
/// for a storage error ("cannot write P: no space left on device (N bytes needed, M free
/// in DIR)"; the byte counts when `bytes_needed` > 0 and the file system says how much is
/// free), a UserError naming the path and strerror(err) otherwise. `what` ("checkpoint")
/// goes before the path.
UserError write_error(const std::string& path, int err, std::uint64_t bytes_needed = 0, const char* what = nullptr);

/// fsync(2) of a file or a directory; write_error on failure (EINVAL, a file system that
/// cannot sync directories, is not one: a rename there is still atomic).
void fsync_path(const std::string& path);

/// rename(2), then fsync of the target's directory.
void rename_durably(const std::string& from, const std::string& to);

/// \brief Replaces `path` by `text` atomically: writes path.tmp in one write(2), fsyncs it,
/// renames it over `path` and fsyncs the directory. On failure the .tmp is removed and
/// `path` is as it was. `point` is passed before the write (fault.hpp): an injected errno
/// fails the write as the disk would.
void replace_file(const std::string& path, const std::string& text, fault::Point point = fault::Point::None);

/// \brief Flushes, fsyncs and closes `f`, a file written through stdio (closed on every
/// path, so the caller drops its pointer); write_error(path, errno, bytes_needed) when any
/// of the three fails -- the one copy of "the data is on disk" for stdio writers.
void close_durably(std::FILE* f, const std::string& path, std::uint64_t bytes_needed = 0);

/// \brief Writes `text` to `path` (created or truncated, not atomically: for files inside a
/// directory that is renamed into place whole) and close_durably's it; write_error on failure.
void write_file(const std::string& path, const std::string& text);

/// Writes all of `data` to `fd` at its offset (retrying short writes and EINTR); 0 or the errno.
int write_all(int fd, const char* data, std::size_t n);
/// As write_all, at file offset `offset` (pwrite: the descriptor's offset is left alone, so
/// threads may write one file at once).
int pwrite_all(int fd, const void* data, std::size_t n, std::uint64_t offset);

/// \brief Creates or truncates `path` (0644), passes fault point `point` (eio/enospc act as
/// the write's result), writes `text`, fsyncs and closes it: the one copy of that sequence on
/// a descriptor. Returns 0 or the errno of the first failure, without throwing (the
/// peers-lost handler calls it on its way out); a file left behind is the caller's to
/// remove. replace_file renames it into place.
int write_synced(const std::string& path, const std::string& text, fault::Point point = fault::Point::None);

/// The directory part of `path` ("." when there is none).
std::string parent_dir(const std::string& path);

// ---- reading files by name ------------------------------------------------------------
// Every file meshtrain opens by name for reading (configs, token and mask files, meta.json,
// tokenizer files, checkpoints and `latest`, --text, --prompt_file) goes through one of
// these two, so that a FIFO, a device (/dev/zero) or a socket where a file belongs is one
// clear error instead of a read that blocks for a writer or never ends.

/// The largest text file read whole into memory (--text, --prompt_file, `tokenize` files,
/// each `prepare` input file, JSON metadata): 1 GiB (doc/data.md). Larger corpora are given
/// to `prepare` as several files.
inline constexpr std::uint64_t kMaxTextFileBytes = std::uint64_t{1} << 30;

/// \brief UserError when `path` exists and is not a regular file (stat, following links):
/// "WHAT PATH is not a regular file but a named pipe (FIFO)". With `max_bytes` > 0 also when
/// it is larger ("WHAT PATH is 3.00 GiB, larger than the 1.00 GiB ..."). A path that does
/// not exist passes (the caller's open names it). Returns the file's size (0 when absent).
std::uint64_t require_regular_file(const std::string& path, const std::string& what, std::uint64_t max_bytes = 0);

/// The directories that creating `dir` (with its parents) would make: absolute, normalised
/// ("a/b/" and "a/./b" are "a/b"), deepest first; empty when `dir` exists. Removing them in
/// this order (each only if empty) undoes the creation: what a failed command does to leave
/// no empty output directory behind.
std::vector<std::string> missing_directories(const std::string& dir);

/// What `path` is when it exists (stat, following links) and is not a regular file: "a named
/// pipe (FIFO)", "a directory", ...; "" for a regular file or a path that does not exist.
std::string non_regular_kind(const std::string& path);

/// \brief open(2) of `path` for reading that cannot block: O_NONBLOCK (a FIFO without a
/// writer would block an ordinary open), then fstat, then O_NONBLOCK cleared. Returns the
/// descriptor; -1 with errno set when open(2) fails (the caller names the missing file);
/// UserError as require_regular_file when it is not a regular file.
int open_regular_file(const std::string& path, const std::string& what);

/// \brief The whole of text file `path`, read through open_regular_file: UserError when it
/// cannot be opened ("cannot read WHAT PATH: <strerror>"), is not a regular file, or is
/// larger than `max_bytes` or than the memory available.
std::string read_text_file(const std::string& path, const std::string& what,
                           std::uint64_t max_bytes = kMaxTextFileBytes);

}  // namespace meshtrain::file_io
