#include "core/file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/memory.hpp"

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

void close_durably(std::FILE* f, const std::string& path, std::uint64_t bytes_needed) {
  const bool synced = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const int sync_err = errno;
  const bool closed = std::fclose(f) == 0;
  const int close_err = errno;
  if (!synced || !closed) throw write_error(path, synced ? close_err : sync_err, bytes_needed);
}

void write_file(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw write_error(path, errno, text.size());
  if (std::fwrite(text.data(), 1, text.size(), f) != text.size()) {
    const int err = errno;
    std::fclose(f);
    throw write_error(path, err, text.size());
  }
  close_durably(f, path, text.size());
}

void rename_durably(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    throw UserError(strprintf("cannot rename %s to %s: %s", from.c_str(), to.c_str(), std::strerror(errno)),
                    is_storage_error(errno) ? kExitIoError : kExitUserError);
  fsync_path(parent_dir(to));
}

namespace {

/// The loop of write_all and pwrite_all: `write(p, k, done)` writes up to k bytes from p,
/// `done` bytes in; short writes and EINTR are retried, 0 bytes written is EIO.
template <class Write>
int write_fully(const char* data, std::size_t n, Write&& write) {
  std::uint64_t done = 0;
  while (n > 0) {
    const ssize_t w = write(data, n, done);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (w == 0) return EIO;
    data += w;
    n -= static_cast<std::size_t>(w);
    done += static_cast<std::uint64_t>(w);
  }
  return 0;
}

}  // namespace

int write_all(int fd, const char* data, std::size_t n) {
  return write_fully(data, n, [fd](const char* p, std::size_t k, std::uint64_t) { return ::write(fd, p, k); });
}

int pwrite_all(int fd, const void* data, std::size_t n, std::uint64_t offset) {
  return write_fully(static_cast<const char*>(data), n, [fd, offset](const char* p, std::size_t k, std::uint64_t done) {
    return ::pwrite(fd, p, k, static_cast<off_t>(offset + done));
  });
}

int write_synced(const std::string& path, const std::string& text, fault::Point point) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  int err = fault::pass(point);
  if (err == 0) err = write_all(fd, text.data(), text.size());
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  return err;
}

void replace_file(const std::string& path, const std::string& text, fault::Point point) {
  const std::string tmp = path + ".tmp";
  const int err = write_synced(tmp, text, point);
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

namespace {

// What a non-regular file is, for the message ("" for a regular file).
const char* kind_of(mode_t m) {
  if (S_ISREG(m)) return "";
  if (S_ISFIFO(m)) return "a named pipe (FIFO)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISDIR(m)) return "a directory";
  return "not a plain file";
}

}  // namespace

std::vector<std::string> missing_directories(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec).lexically_normal();
  if (ec) return out;
  if (p.filename().empty()) p = p.parent_path();  // a trailing '/'
  for (; p.has_relative_path() && !fs::exists(p, ec); p = p.parent_path()) out.push_back(p.string());
  return out;
}

std::string non_regular_kind(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  return kind_of(st.st_mode);
}

namespace {

std::string named(const std::string& path, const std::string& what) {
  return what.empty() ? path : what + " " + path;
}

void check_stat(const struct stat& st, const std::string& path, const std::string& what, std::uint64_t max_bytes) {
  const char* kind = kind_of(st.st_mode);
  if (*kind)
    throw UserError(strprintf("%s is not a regular file but %s: meshtrain reads only regular files",
                              named(path, what).c_str(), kind));
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (max_bytes > 0 && size > max_bytes)
    throw UserError(strprintf("%s is %s, larger than the %s meshtrain reads into memory from one file (doc/data.md)",
                              named(path, what).c_str(), format_bytes(static_cast<double>(size)).c_str(),
                              format_bytes(static_cast<double>(max_bytes)).c_str()));
}

}  // namespace

std::uint64_t require_regular_file(const std::string& path, const std::string& what, std::uint64_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;  // absent: the caller's open says so
  check_stat(st, path, what, max_bytes);
  return static_cast<std::uint64_t>(st.st_size);
}

int open_regular_file(const std::string& path, const std::string& what) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return -1;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  try {
    check_stat(st, path, what, 0);
  } catch (...) {
    ::close(fd);
    throw;
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

std::string read_text_file(const std::string& path, const std::string& what, std::uint64_t max_bytes) {
  const int fd = open_regular_file(path, what);
  if (fd < 0) throw UserError(strprintf("cannot read %s: %s", named(path, what).c_str(), std::strerror(errno)));
  struct stat st {};
  std::string out;
  try {
    if (::fstat(fd, &st) == 0) check_stat(st, path, what, max_bytes);
    const auto size = static_cast<std::uint64_t>(st.st_size);
    require_host_memory(static_cast<double>(size), "reading " + named(path, what));
    out.reserve(static_cast<std::size_t>(size));
    char buf[1 << 16];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0)
        throw UserError(strprintf("cannot read %s: %s", named(path, what).c_str(), std::strerror(errno)),
                        is_storage_error(errno) ? kExitIoError : kExitUserError);
      if (n == 0) break;
      out.append(buf, static_cast<std::size_t>(n));
      // A file that grows while it is read (a log being written) stops at the bound too.
      if (max_bytes > 0 && out.size() > max_bytes)
        throw UserError(strprintf("%s grew past the %s meshtrain reads into memory from one file while it was read",
                                  named(path, what).c_str(), format_bytes(static_cast<double>(max_bytes)).c_str()));
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return out;
}

}  // namespace meshtrain::file_io
