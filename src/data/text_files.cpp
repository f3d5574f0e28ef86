#include "data/text_files.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

#include "core/error.hpp"
#include "core/file_io.hpp"
#include "core/log.hpp"
#include "core/utf8.hpp"

namespace meshtrain::data {
namespace {

namespace fs = std::filesystem;

bool has_entry(const fs::path& dir, const char* name) {
  std::error_code ec;
  return fs::exists(dir / name, ec);
}

/// True for a meta.json that `meshtrain prepare` wrote (its "format" key); another
/// project's meta.json is text like any other.
bool is_dataset_meta(const fs::path& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec) || fs::file_size(file, ec) > (1u << 20)) return false;
  try {
    return file_io::read_text_file(file.string(), "", 1u << 20).find("\"meshtrain-dataset\"") != std::string::npos;
  } catch (const UserError&) {
    return false;  // unreadable: not one of ours, and prepare's own read names the problem
  }
}

/// The names of the files meshtrain writes into its datasets, runs and checkpoints.
bool is_meshtrain_file_name(const fs::path& p) {
  static const std::set<std::string> names = {"meta.json", "train.bin", "val.bin", "train.mask", "val.mask",
                                              "train.docs", "val.docs", "config.ini", "metrics.jsonl", "run.json", "mesh.txt", "latest"};
  std::string n = p.filename().string();
  if (n.size() > 4 && n.compare(n.size() - 4, 4, ".tmp") == 0) n.resize(n.size() - 4);  // a staged file
  return names.count(n) > 0 || (n.rfind("step_", 0) == 0 && n.find(".h5") != std::string::npos);
}

/// What meshtrain wrote into directory `dir` ("" when it holds none of meshtrain's own
/// output): a prepared dataset (also a lone meta.json of one, copied elsewhere), a run
/// directory or a checkpoint directory. Their files are tokens, records and weights,
/// never a corpus -- yet meta.json, config.ini, metrics.jsonl and `latest` are valid
/// UTF-8 and would be tokenised as text.
std::string meshtrain_output(const fs::path& dir) {
  if (has_entry(dir, "meta.json") &&
      (has_entry(dir, "train.bin") || has_entry(dir, "val.bin") || is_dataset_meta(dir / "meta.json")))
    return "a dataset written by `meshtrain prepare` (meta.json, train.bin, val.bin)";
  if (has_entry(dir, ".meshtrain.lock") ||
      (has_entry(dir, "config.ini") && (has_entry(dir, "metrics.jsonl") || has_entry(dir, "run.json"))))
    return "a meshtrain run directory (config.ini, metrics.jsonl, run.json)";
  if (has_entry(dir, "latest")) {
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string n = it->path().filename().string();
      if (n.rfind("step_", 0) == 0 && n.find(".h5") != std::string::npos)
        return "a meshtrain checkpoint directory (latest, step_*.h5)";
    }
  }
  return "";
}

/// A regular file found, and what says it is the same file as another: its device and inode
/// (a hard link or a bind mount gives one file two canonical paths), or, where stat fails,
/// its canonical path.
struct FoundFile {
  std::string path;       ///< as found
  std::string canonical;  ///< symlinks resolved
  bool have_id = false;
  dev_t dev = 0;
  ino_t ino = 0;
};

struct Collector {
  std::set<std::string> dirs_seen;  // canonical paths
  std::vector<FoundFile> files;
};

void visit(const fs::path& p, bool named_by_user, Collector& c) {
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);  // follows symlinks
  if (ec || !fs::exists(st)) {
    // A dangling link inside a directory is skipped; a missing input is the user's to fix.
    MESHTRAIN_REQUIRE(!named_by_user, "input %s does not exist", p.string().c_str());
    return;
  }
  const fs::path canonical = fs::canonical(p, ec);
  if (ec) return;
  // meshtrain's own output is never a corpus (doc/data.md): found inside an input it is
  // skipped with a notice, named as an input it is an error.
  const bool dir = fs::is_directory(st);
  // A file found inside a directory: that directory was looked at already. A file named
  // as an input: one of the files meshtrain writes, in a directory of its output.
  std::string own = dir                                           ? meshtrain_output(canonical)
                    : named_by_user && is_meshtrain_file_name(p) ? meshtrain_output(canonical.parent_path())
                                                                  : "";
  if (!own.empty()) {
    if (named_by_user && dir)
      throw UserError(strprintf("input %s is %s, not text: prepare reads text files (to train on a prepared dataset, "
                                "set data.dir to its directory)",
                                p.string().c_str(), own.c_str()));
    if (named_by_user)
      throw UserError(strprintf("input %s is a file of %s (%s), not text: prepare reads text files (to train on a "
                                "prepared dataset, set data.dir to its directory)",
                                p.string().c_str(), canonical.parent_path().string().c_str(), own.c_str()));
    log::info("prepare: skipping %s: %s, not text", p.string().c_str(), own.c_str());
    return;
  }
  if (dir) {
    if (!c.dirs_seen.insert(canonical.string()).second) return;  // a loop or a second link
    std::vector<fs::path> entries;
    fs::directory_iterator it(p, ec);
    MESHTRAIN_REQUIRE(!ec, "cannot read directory %s: %s", p.string().c_str(), ec.message().c_str());
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      MESHTRAIN_REQUIRE(!ec, "cannot read directory %s: %s", p.string().c_str(), ec.message().c_str());
      entries.push_back(it->path());
    }
    std::sort(entries.begin(), entries.end());
    for (const fs::path& e : entries) visit(e, false, c);
  } else if (fs::is_regular_file(st) && p.extension() != ".dat") {
    FoundFile f{p.string(), canonical.string()};
    struct stat sb {};
    if (::stat(p.c_str(), &sb) == 0) {
      f.have_id = true;
      f.dev = sb.st_dev;
      f.ino = sb.st_ino;
    }
    c.files.push_back(std::move(f));
  } else if (named_by_user) {
    // A FIFO or a device named as an input (/dev/zero, a pipe): never read, an error. Inside
    // a directory such entries are skipped like the other files that are not text.
    file_io::require_regular_file(p.string(), "input");
  }
}

}  // namespace

std::vector<std::string> collect_input_files(const std::vector<std::string>& inputs) {
  Collector c;
  for (const std::string& in : inputs) visit(fs::path(in), true, c);
  std::sort(c.files.begin(), c.files.end(), [](const FoundFile& a, const FoundFile& b) { return a.path < b.path; });
  // The first path (in sorted order) of each file is kept. Another name for a file already
  // kept would tokenize it twice: the dataset would hold its text twice, silently.
  std::map<std::pair<dev_t, ino_t>, const FoundFile*> by_id;
  std::map<std::string, const FoundFile*> by_canonical;
  std::vector<std::string> out;
  for (std::size_t k = 0; k < c.files.size(); ++k) {
    const FoundFile& f = c.files[k];
    if (k > 0 && f.path == c.files[k - 1].path) continue;  // one path found twice (a file inside a directory also named)
    const FoundFile* first = nullptr;
    if (const auto it = by_canonical.find(f.canonical); it != by_canonical.end()) first = it->second;
    else if (const auto id = by_id.find({f.dev, f.ino}); f.have_id && id != by_id.end()) first = id->second;
    if (!first) {
      by_canonical.emplace(f.canonical, &f);
      if (f.have_id) by_id.emplace(std::make_pair(f.dev, f.ino), &f);
      out.push_back(f.path);
      continue;
    }
    by_canonical.emplace(f.canonical, first);
    // A second canonical path of one file is named (`ls -l` shows a symlink, not a hard link);
    // symlinks (the fortunes package's 43 `*.u8 -> *`) pass silently.
    if (f.canonical != first->canonical)
      log::info("prepare: skipping %s: the same file as %s (the same device and inode: a hard link or a bind mount)",
                f.path.c_str(), first->path.c_str());
  }
  return out;
}

std::string text_rejection(const std::string& content) {
  if (content.empty()) return "empty";
  if (content.find('\0') != std::string::npos) return "contains NUL bytes (binary)";
  if (!utf8::valid(content)) return "is not valid UTF-8";
  return "";
}

std::string read_file_bytes(const std::string& path) { return file_io::read_text_file(path, ""); }

}  // namespace meshtrain::data
