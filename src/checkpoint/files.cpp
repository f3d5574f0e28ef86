#include "files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "meshtrain/core/error.hpp"

namespace meshtrain::checkpoint::files {

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MESHTRAIN_REQUIRE(fd >= 0, "cannot open %s to sync it: %s", path.c_str(), std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems do not sync directories (EINVAL); the rename is still atomic there.
  MESHTRAIN_REQUIRE(rc == 0 || err == EINVAL, "cannot sync %s to disk: %s", path.c_str(), std::strerror(err));
}

void rename_durably(const std::string& from, const std::string& to) {
  MESHTRAIN_REQUIRE(std::rename(from.c_str(), to.c_str()) == 0, "cannot rename %s to %s: %s", from.c_str(), to.c_str(),
                    std::strerror(errno));
  fsync_path(parent_dir(to));
}

void replace_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  MESHTRAIN_REQUIRE(f, "cannot write %s: %s", tmp.c_str(), std::strerror(errno));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fflush(f) == 0 &&
                  ::fsync(::fileno(f)) == 0;
  const int err = errno;
  std::fclose(f);
  if (!ok) {
    std::remove(tmp.c_str());
    throw UserError(strprintf("cannot write %s: %s", tmp.c_str(), std::strerror(err)));
  }
  rename_durably(tmp, path);
}

std::optional<int> step_of(const std::string& name, bool tmp) {
  const std::string suffix = tmp ? ".h5.tmp" : ".h5";
  if (name.size() != 5 + 8 + suffix.size() || name.compare(0, 5, "step_") != 0 ||
      name.compare(13, std::string::npos, suffix) != 0)
    return std::nullopt;
  int v = 0;
  for (int i = 5; i < 13; ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

std::string parent_dir(const std::string& path) {
  const std::string p = std::filesystem::path(path).parent_path().string();
  return p.empty() ? "." : p;
}

}  // namespace meshtrain::checkpoint::files
