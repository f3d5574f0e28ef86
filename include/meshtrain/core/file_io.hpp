#pragma once
/// \brief Checked, durable writes of files (POSIX): every write, fsync and rename checks
/// its result, and a failure becomes one sentence naming the path -- an IoError (exit 74)
/// when the storage failed (disk full, quota, EIO), a UserError (exit 2) when a setting is
/// at fault (permissions, a read-only file system).

#include <cstdint>
#include <string>

#include "meshtrain/core/error.hpp"
#include "meshtrain/core/fault.hpp"

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

/// Writes all of `data` to `fd` at its offset (retrying short writes and EINTR); 0 or the errno.
int write_all(int fd, const char* data, std::size_t n);

/// The directory part of `path` ("." when there is none).
std::string parent_dir(const std::string& path);

}  // namespace meshtrain::file_io
