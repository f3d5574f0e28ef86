#include "train/preflight.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"
#include "core/file_io.hpp"

namespace meshtrain::train {

void require_writable_dir(const std::string& key, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // The directory itself, or where it will be created: its nearest existing ancestor.
  fs::path probe_dir = fs::absolute(dir, ec);
  MESHTRAIN_REQUIRE(!ec, "%s=%s: cannot resolve the path: %s", key.c_str(), dir.c_str(), ec.message().c_str());
  while (!fs::exists(probe_dir, ec) && probe_dir.has_parent_path() && probe_dir != probe_dir.parent_path())
    probe_dir = probe_dir.parent_path();
  const bool is_target = fs::absolute(dir, ec) == probe_dir;
  MESHTRAIN_REQUIRE(fs::is_directory(probe_dir, ec),
                    "%s=%s cannot be %s: %s is not a directory; choose another %s", key.c_str(), dir.c_str(),
                    is_target ? "used" : "created", probe_dir.c_str(), key.c_str());
  // access(W_OK) would say yes to root on a read-only mount or in /proc: create a file.
  const fs::path probe = probe_dir / (".meshtrain-write-probe-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  MESHTRAIN_REQUIRE(fd >= 0, "%s=%s is not writable: cannot create a file in %s (%s); choose a writable %s",
                    key.c_str(), dir.c_str(), probe_dir.c_str(), std::strerror(errno), key.c_str());
  ::close(fd);
  ::unlink(probe.c_str());
}

void require_appendable_file(const std::string& key, const std::string& path) {
  const std::string kind = file_io::non_regular_kind(path);
  MESHTRAIN_REQUIRE(kind.empty(),
                    "%s: %s is %s, not a regular file: the run appends its records to it; remove it or choose "
                    "another %s",
                    key.c_str(), path.c_str(), kind.c_str(), key.c_str());
}

}  // namespace meshtrain::train
