#include "files.hpp"

#include <climits>

#include "checkpoint/checkpoint.hpp"
#include "core/file_io.hpp"

namespace meshtrain::checkpoint::files {

std::optional<int> step_of(const std::string& name, bool tmp) {
  // checkpoint_file_name pads to 8 digits, so a step past 99,999,999 has 9 or 10: any
  // number of digits is a step (a fixed width once made step_100000001.h5 invisible to
  // `latest`, listing and retention). A step beyond int is not one meshtrain can write.
  const std::string prefix = "step_", suffix = tmp ? ".h5.tmp" : ".h5";
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return std::nullopt;
  long long v = 0;
  for (std::size_t i = prefix.size(); i < name.size() - suffix.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    v = v * 10 + (name[i] - '0');
    if (v > INT_MAX) return std::nullopt;
  }
  // Only the name meshtrain writes for that step: step_5.h5 beside step_00000005.h5 would
  // be two files of one step to listing, retention and `latest`.
  if (name != checkpoint_file_name(static_cast<int>(v)) + (tmp ? ".tmp" : "")) return std::nullopt;
  return static_cast<int>(v);
}

std::string parent_dir(const std::string& path) { return file_io::parent_dir(path); }

}  // namespace meshtrain::checkpoint::files
