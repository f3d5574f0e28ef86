#include "meshtrain/core/file_io.hpp"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace meshtrain::file_io {

bool is_storage_error(int err) { return err == ENOSPC || err == EDQUOT || err == EIO || err == EFBIG; }

std::string parent_dir(const std::string& path) {
  const std::string p = std::filesystem::path(path).parent_path().string();
  return p.empty() ? "." : p;
}

UserError write_error(const std::string& path, int err, std::uint64_t bytes_needed, const char* what) {
  const std::string target = what ? std::string(what) + " " + path : path;
  // strerror's capital letter reads oddly mid-sentence: "no space left on device".
  std::string cause = std::strerror(err);
  if (!cause.empty()) cause[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(cause[0])));
  if (!is_storage_error(err)) return UserError(strprintf("cannot write %s: %s", target.c_str(), cause.c_str()));
  std::string detail;
  if (bytes_needed > 0 && err != EIO) {  // space matters for ENOSPC, EDQUOT, EFBIG
    const std::string dir = parent_dir(path);
    struct statvfs fs {};
    if (::statvfs(dir.c_str(), &fs) == 0)
      detail = strprintf(" (%s needed, %s free in %s)", format_bytes(static_cast<double>(bytes_needed)).c_str(),
                         format_bytes(static_cast<double>(fs.f_bavail) * fs.f_frsize).c_str(), dir.c_str());
    else
      detail = strprintf(" (%s needed)", format_bytes(static_cast<double>(bytes_needed)).c_str());
  }
  return IoError(strprintf("cannot write %s: %s%s", target.c_str(), cause.c_str(), detail.c_str()));
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw write_error(path, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems do not sync directories (EINVAL); the rename is still atomic there.
  if (rc != 0 && err != EINVAL) throw write_error(path, err);
}

void rename_durably(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    throw UserError(strprintf("cannot rename %s to %s: %s", from.c_str(), to.c_str(), std::strerror(errno)),
                    is_storage_error(errno) ? kExitIoError : kExitUserError);
  fsync_path(parent_dir(to));
}

int write_all(int fd, const char* data, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (w == 0) return EIO;
    data += w;
    n -= static_cast<std::size_t>(w);
  }
  return 0;
}

void replace_file(const std::string& path, const std::string& text, fault::Point point) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw write_error(tmp, errno, text.size());
  int err = fault::pass(point);
  if (err == 0) err = write_all(fd, text.data(), text.size());
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    std::remove(tmp.c_str());
    throw write_error(path, err, text.size());
  }
  try {
    rename_durably(tmp, path);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
}

}  // namespace meshtrain::file_io
