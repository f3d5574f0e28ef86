#include "train/preflight.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <random>

#include "comm/agree.hpp"
#include "comm/collectives.hpp"
#include "core/error.hpp"
#include "core/file_io.hpp"
#include "core/format.hpp"

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

void require_writable_file(const std::string& option, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    MESHTRAIN_REQUIRE(!S_ISDIR(st.st_mode), "%s %s is a directory: give the path of a file to write", option.c_str(),
                      path.c_str());
    // O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of blocking; no O_TRUNC.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK);
    MESHTRAIN_REQUIRE(fd >= 0, "cannot write %s %s: %s", option.c_str(), path.c_str(), std::strerror(errno));
    ::close(fd);
    return;
  }
  const std::string dir = file_io::parent_dir(path);
  MESHTRAIN_REQUIRE(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode),
                    "cannot write %s %s: its directory %s does not exist", option.c_str(), path.c_str(), dir.c_str());
  // access(W_OK) would say yes to root on a read-only mount: create a file.
  const std::string probe = dir + "/.meshtrain-write-probe-" + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  MESHTRAIN_REQUIRE(fd >= 0, "cannot write %s %s: cannot create a file in %s (%s)", option.c_str(), path.c_str(),
                    dir.c_str(), std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

namespace {

/// 128 random bits as hex: a name and content no earlier file or look-up can have had.
std::string random_token() {
  std::random_device rd;
  std::string t;
  for (int i = 0; i < 4; ++i) t += strprintf("%08x", static_cast<unsigned>(rd()));
  return t;
}

/// The file's content, or "" with `why` set (the errno text, or what was found instead).
std::string read_probe(const std::string& path, std::string* why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *why = std::strerror(errno);
    return "";
  }
  std::string text(256, '\0');
  const ssize_t n = ::read(fd, text.data(), text.size());
  const int err = errno;
  ::close(fd);
  if (n < 0) {
    *why = std::strerror(err);
    return "";
  }
  text.resize(static_cast<std::size_t>(n));
  return text;
}

}  // namespace

void require_same_directory_on_every_rank(const MpiComm& world, const std::vector<std::string>& host_of_rank,
                                          const std::string& key, const std::string& dir) {
  if (world.size() == 1) return;  // one rank sees what it sees
  const bool root = world.rank() == 0;
  std::string token;
  agree_on_errors(world, [&] {
    if (!root) return;
    token = random_token();
    file_io::write_file(dir + "/.meshtrain-shared-probe-" + token, token);  // synced: visible to every node
  });
  token = broadcast_string(world, token);
  const std::string probe = dir + "/.meshtrain-shared-probe-" + token;
  std::string why;
  const std::string seen = read_probe(probe, &why);
  const bool same = seen == token;
  if (!same && why.empty()) why = "it holds another token";
  // Every rank has read the file once this sum is known: rank 0 removes it, also when the
  // check fails below.
  const int not_seen = all_reduce_value(world, same ? 0 : 1, ReduceOp::Sum);
  if (root) ::unlink(probe.c_str());
  agree_on_errors(world, [&] {
    const int r = world.rank();
    const auto host = [&](int rank) {
      return rank < static_cast<int>(host_of_rank.size()) ? host_of_rank[static_cast<std::size_t>(rank)] : "?";
    };
    std::error_code ec;
    MESHTRAIN_REQUIRE(
        same,
        "%s=%s is not the same directory on every rank: rank %d (host %s%s) does not see the "
        "file rank 0 (host %s) has just written there (%s)%s. Every rank writes its part of each checkpoint and its "
        "run reports there: give a directory on a file system shared by all nodes (not a node-local /tmp or "
        "/scratch), and an absolute path (a relative path is resolved against each rank's working directory)",
        key.c_str(), dir.c_str(), r, host(r).c_str(),
        std::filesystem::path(dir).is_relative()
            ? (", where it resolves to " + std::filesystem::absolute(dir, ec).string()).c_str()
            : "",
        host(0).c_str(),
        why.c_str(), not_seen > 1 ? strprintf("; %d of %d ranks do not", not_seen, world.size()).c_str() : "");
  });
}

}  // namespace meshtrain::train
