#include "files.hpp"

#include "meshtrain/core/file_io.hpp"

namespace meshtrain::checkpoint::files {

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

std::string parent_dir(const std::string& path) { return file_io::parent_dir(path); }

}  // namespace meshtrain::checkpoint::files
