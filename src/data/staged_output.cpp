#include "staged_output.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"
#include "core/file_io.hpp"
#include "data/doc_file.hpp"
#include "data/loss_mask.hpp"
#include "data/token_file.hpp"
#include "formats/json.hpp"

namespace meshtrain::data {
namespace fs = std::filesystem;

namespace {

/// The files of a dataset, each with the 8-byte magic its reader checks first ("" for
/// meta.json, which is JSON with "format": "meshtrain-dataset").
struct DatasetFile {
  const char* name;
  const char* magic;
};
constexpr DatasetFile kDatasetFiles[] = {
    {"meta.json", ""},                {"train.bin", kTokenFileMagic}, {"val.bin", kTokenFileMagic},
    {"train.mask", kMaskFileMagic},   {"val.mask", kMaskFileMagic},   {"train.docs", kDocFileMagic},
    {"val.docs", kDocFileMagic},
};

/// Why `path`, an existing dataset file named `f.name`, was not written by meshtrain ("" when
/// it was): the same marks the readers check first, so a file they would open is replaced.
std::string why_not_ours(const fs::path& path, const DatasetFile& f) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return "not a regular file";
  if (*f.magic == '\0') {
    try {
      const formats::Json j = formats::parse_json(file_io::read_text_file(path.string(), "dataset metadata"));
      const auto format = j.is_object() ? j.find("format") : j.end();
      if (format != j.end() && format->is_string() && format->get<std::string>() == "meshtrain-dataset") return "";
    } catch (const std::exception&) {  // unreadable or not JSON: not ours either
    }
    return "no \"format\": \"meshtrain-dataset\"";
  }
  char head[8] = {};
  std::FILE* in = std::fopen(path.c_str(), "rb");
  const bool ours = in && std::fread(head, 1, 8, in) == 8 && std::memcmp(head, f.magic, 8) == 0;
  if (in) std::fclose(in);
  return ours ? "" : strprintf("it does not start with '%.8s'", f.magic);
}

}  // namespace

bool is_dataset_file_name(const std::string& name) {
  std::string n = name;
  if (n.size() > 4 && n.compare(n.size() - 4, 4, ".tmp") == 0) n.resize(n.size() - 4);  // a staged file
  return std::any_of(std::begin(kDatasetFiles), std::end(kDatasetFiles),
                     [&](const DatasetFile& f) { return n == f.name; });
}

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
  // commit() replaces the dataset's files whatever they hold: an earlier meshtrain dataset's
  // (doc/data.md), never another tool's -- nanoGPT's prepare.py writes train.bin and val.bin
  // too, hours of tokenising. Checked before anything is written, every name at once.
  if (!created_dir_) {
    std::string foreign;
    for (const DatasetFile& f : kDatasetFiles) {
      const fs::path p = fs::path(dir_) / f.name;
      if (!fs::exists(fs::symlink_status(p, ec))) continue;
      const std::string why = why_not_ours(p, f);
      if (!why.empty()) foreign += strprintf("%s%s (%s)", foreign.empty() ? "" : ", ", p.c_str(), why.c_str());
    }
    MESHTRAIN_REQUIRE(foreign.empty(),
                      "the output directory %s holds files that meshtrain did not write and prepare would replace: "
                      "%s; prepare replaces only an earlier meshtrain dataset's files: choose a new or empty --output, "
                      "or move them away",
                      dir_.c_str(), foreign.c_str());
  }
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
  // Only these names are checked before they are replaced.
  MESHTRAIN_ASSERT(is_dataset_file_name(name), "staged output file %s is not a dataset file", name.c_str());
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
