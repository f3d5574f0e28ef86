#include "staged_output.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"
#include "core/file_io.hpp"

namespace meshtrain::data {
namespace fs = std::filesystem;

StagedOutput::StagedOutput(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  if (!fs::exists(dir_, ec)) {
    created_ = file_io::missing_directories(dir_);  // deepest first: removed again on failure
    fs::create_directories(dir_, ec);
    MESHTRAIN_REQUIRE(!ec, "cannot create the output directory %s: %s", dir_.c_str(), ec.message().c_str());
    created_dir_ = true;
  }
  MESHTRAIN_REQUIRE(fs::is_directory(dir_, ec), "the output %s exists and is not a directory", dir_.c_str());
  MESHTRAIN_REQUIRE(::access(dir_.c_str(), W_OK | X_OK) == 0, "the output directory %s is not writable",
                    dir_.c_str());
  for (const std::string& d : created_) on_signal_.add_empty_directory(d);  // deepest first
}

StagedOutput::~StagedOutput() {
  on_signal_.disarm();
  if (committed_) return;
  std::error_code ec;
  for (const std::string& n : names_) fs::remove(fs::path(dir_) / (n + ".tmp"), ec);
  for (const std::string& d : created_) fs::remove(d, ec);  // removes only an empty directory
}

std::string StagedOutput::stage(const std::string& name) {
  names_.push_back(name);
  const std::string tmp = (fs::path(dir_) / (name + ".tmp")).string();
  on_signal_.add_file(tmp);
  return tmp;
}

void StagedOutput::commit() {
  // Remove the old completion marker first: a crash between renames then leaves a
  // directory without it, which readers reject, rather than a marker over mixed files.
  for (auto it = names_.rbegin(); it != names_.rend(); ++it) {
    std::error_code ec;
    fs::remove(fs::path(dir_) / *it, ec);
  }
  for (const std::string& n : names_) {
    const fs::path from = fs::path(dir_) / (n + ".tmp"), to = fs::path(dir_) / n;
    file_io::rename_durably(from.string(), to.string());
  }
  committed_ = true;
  on_signal_.disarm();  // the dataset is complete: a signal now leaves it
}

}  // namespace meshtrain::data
