#include "train/run_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "core/file_io.hpp"
#include "core/log.hpp"

namespace meshtrain::train {
namespace fs = std::filesystem;

std::string run_lock_holder(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  // Only what a holder writes: a damaged file must not put control bytes into a message.
  for (char& c : line)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return line.substr(0, 300);
}

RunDirLock::RunDirLock(const std::string& key, const std::string& dir) {
  std::error_code ec;
  created_ = file_io::missing_directories(dir);  // deepest first, for the destructor
  fs::create_directories(dir, ec);
  MESHTRAIN_REQUIRE(!ec && fs::is_directory(dir), "cannot create %s=%s: %s", key.c_str(), dir.c_str(),
                    ec ? ec.message().c_str() : "a file of that name exists");
  path_ = (fs::path(dir) / kFileName).string();
  // A few rounds: each retry means another run removed the file between our open and our
  // flock (it ended); the next round locks the file now at the path.
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    MESHTRAIN_REQUIRE(fd >= 0, "%s=%s: cannot create the lock file %s: %s", key.c_str(), dir.c_str(), path_.c_str(),
                      std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd);
      if (err == EWOULDBLOCK) {
        const std::string holder = run_lock_holder(path_);
        throw UserError(strprintf(
            "%s=%s is in use by another meshtrain run (%s holds %s): two runs in one directory would overwrite each "
            "other's checkpoints and metrics; wait for that run to end, or choose another %s",
            key.c_str(), dir.c_str(), holder.empty() ? "a process that has not yet written its host and pid" : holder.c_str(),
            path_.c_str(), key.c_str()));
      }
      // ENOLCK/ENOSYS/EOPNOTSUPP: a file system without locks (Lustre without -o flock).
      // Refusing every run there would be worse than running unguarded; say so. The file
      // stays: an ENOLCK may be transient (an NFS lock server), and the file could be a
      // live holder's.
      log::warn("%s=%s: cannot lock %s (%s): this file system has no file locks, so a second run into the same "
                "directory is not detected",
                key.c_str(), dir.c_str(), path_.c_str(), std::strerror(err));
      path_.clear();
      return;
    }
    // The file we locked must still be the one at the path: a run that ended may have
    // removed it after our open, and a third run could then lock a new file there.
    struct stat held {}, now {};
    if (::fstat(fd, &held) == 0 && ::stat(path_.c_str(), &now) == 0 && held.st_dev == now.st_dev &&
        held.st_ino == now.st_ino) {
      fd_ = fd;
    } else {
      ::close(fd);
    }
  }
  MESHTRAIN_REQUIRE(fd_ >= 0, "%s=%s: cannot take the lock %s: it is removed and recreated continuously",
                    key.c_str(), dir.c_str(), path_.c_str());
  const std::string me = strprintf("host %s pid %ld\n", host_name().c_str(), static_cast<long>(::getpid()));
  // Best effort: the lock is what excludes; the text only names the holder in a refusal.
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size()))
    log::warn("cannot write the holder into the lock file %s: %s", path_.c_str(), std::strerror(errno));
}

RunDirLock::~RunDirLock() {
  if (fd_ < 0) return;
  // Unlinked while held: a run that opened the file meanwhile sees, after its flock, that
  // the path no longer names it, and retries.
  ::unlink(path_.c_str());
  ::close(fd_);
  if (keep_dirs_) return;
  for (const std::string& d : created_) {
    std::error_code ec;
    if (!fs::remove(d, ec)) break;  // not empty (or not ours to remove): stop there
  }
}

}  // namespace meshtrain::train
