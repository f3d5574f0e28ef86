#include "export_dir.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <regex>
#include <set>

#include "formats/safetensors.hpp"
#include "core/error.hpp"
#include "core/file_io.hpp"
#include "core/signal_cleanup.hpp"
#include "formats/json.hpp"

namespace meshtrain::app {
namespace fs = std::filesystem;

namespace {

/// The names exports wrote before the manifest existed (and their temporaries).
bool legacy_export_name(const std::string& name) {
  static const std::regex re(
      R"((model\.safetensors|model-[0-9]{5}-of-[0-9]{5}\.safetensors|model\.safetensors\.index\.json|config\.json|)"
      R"(adapter_model\.safetensors|adapter_config\.json)(\.tmp)?)");
  return std::regex_match(name, re);
}

std::vector<std::string> entries_of(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

/// Swaps two existing paths atomically (renameat2 RENAME_EXCHANGE); false where the file
/// system or kernel cannot.
bool exchange_paths(const std::string& a, const std::string& b) {
#ifdef RENAME_EXCHANGE
  return ::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0;
#else
  (void)a, (void)b;
  errno = ENOSYS;
  return false;
#endif
}

/// Removes the staging directory (and the parents made for it) unless released -- on an
/// error through the destructor, on SIGTERM/SIGINT/SIGHUP/SIGPIPE (a cancelled job) through `on_signal`.
struct Staging {
  std::string dir;
  std::vector<std::string> made_parents;  // deepest first
  bool released = false;
  SignalCleanup on_signal;
  ~Staging() {
    on_signal.disarm();
    if (released) return;
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
    for (const std::string& p : made_parents)
      if (!fs::remove(p, ec)) break;
  }
};

}  // namespace

std::string why_not_an_export(const std::string& dir) {
  const std::vector<std::string> names = entries_of(dir);
  std::error_code ec;
  const auto not_a_file = [&](const std::string& n) { return !fs::is_regular_file(fs::symlink_status(dir + "/" + n, ec)); };
  if (std::find(names.begin(), names.end(), kExportManifest) != names.end()) {
    std::set<std::string> listed = {kExportManifest};
    try {
      const formats::Json v = formats::parse_json(file_io::read_text_file(dir + "/" + kExportManifest, "export manifest"));
      const auto files = v.is_object() ? v.find("files") : v.end();
      if (!v.is_object() || !v.contains("meshtrain_export") || files == v.end() || !files->is_array())
        return strprintf("its %s is not one meshtrain wrote", kExportManifest);
      for (const formats::Json& f : *files)
        if (f.is_string()) listed.insert(f.get<std::string>());
    } catch (const std::exception& e) {
      return strprintf("its %s is damaged (%s)", kExportManifest, e.what());
    }
    for (const std::string& n : names)
      if (!listed.count(n) || not_a_file(n))
        return strprintf("it holds '%s', which is not a file of the export its %s lists", n.c_str(), kExportManifest);
    return "";
  }
  // An export from before the manifest: only its file names, and a safetensors file that
  // meshtrain wrote (its metadata names meshtrain_version) -- not a downloaded HF model.
  bool ours = false;
  for (const std::string& n : names) {
    if (!legacy_export_name(n) || not_a_file(n))
      return strprintf("it holds '%s', which meshtrain convert does not write", n.c_str());
    if (n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0 && !ours) {
      try {
        ours = formats::SafetensorsFile(dir + "/" + n).metadata().count("meshtrain_version") > 0;
      } catch (const UserError&) {
      }
    }
  }
  return ours ? "" : "none of its safetensors files was written by meshtrain convert";
}

void write_export_dir(const std::string& out_dir_given, const std::function<ExportWritten(const std::string&)>& write) {
  std::error_code ec;
  // A symlink to a directory: the directory it names is the one replaced.
  const std::string out_dir =
      fs::is_symlink(out_dir_given, ec) ? fs::canonical(out_dir_given, ec).string() : out_dir_given;
  fs::path out = fs::absolute(out_dir, ec);
  if (out.filename().empty()) out = out.parent_path();  // "dir/"
  bool replace = false;
  if (fs::exists(fs::symlink_status(out, ec))) {
    MESHTRAIN_REQUIRE(fs::is_directory(out, ec), "--output %s exists and is not a directory; choose a directory",
                      out_dir_given.c_str());
    if (!fs::is_empty(out, ec)) {
      const std::string why = why_not_an_export(out.string());
      MESHTRAIN_REQUIRE(why.empty(),
                        "--output %s is a non-empty directory that is not an earlier export (%s); convert replaces "
                        "only an earlier export's directory, whole: choose a new or empty --output, or remove it",
                        out_dir_given.c_str(), why.c_str());
      replace = true;
    }
  }
  Staging staging;
  const fs::path parent = out.parent_path();
  staging.made_parents = file_io::missing_directories(parent.string());  // deepest first
  fs::create_directories(parent, ec);
  MESHTRAIN_REQUIRE(!ec, "cannot create the directory %s for --output %s: %s", parent.c_str(), out_dir_given.c_str(),
                    ec.message().c_str());
  // Beside the output, on its file system: the renames below never copy.
  const std::string tag = "." + out.filename().string() + ".meshtrain-convert-" + std::to_string(::getpid());
  staging.dir = (parent / tag).string();
  // An export is a directory of files (write_export_dir's writer adds no subdirectory).
  staging.on_signal.add_directory_of_files(staging.dir);
  for (const std::string& p : staging.made_parents) staging.on_signal.add_empty_directory(p);
  fs::remove_all(staging.dir, ec);
  MESHTRAIN_REQUIRE(fs::create_directory(staging.dir, ec), "cannot create %s beside --output %s: %s",
                    staging.dir.c_str(), out_dir_given.c_str(), ec ? ec.message().c_str() : "it exists");

  const ExportWritten written = write(staging.dir);
  // What is in the staging directory, not what the writer says it wrote: a later convert
  // may replace exactly these files, whatever an export comes to hold.
  const formats::Json manifest = {{"meshtrain_export", 1}, {"step", written.step}, {"files", entries_of(staging.dir)}};
  file_io::replace_file(staging.dir + "/" + kExportManifest, formats::json_text(manifest) + "\n");
  file_io::fsync_path(staging.dir);

  if (!replace) {
    // A new path, or an empty directory (rename(2) replaces an empty directory).
    MESHTRAIN_REQUIRE(::rename(staging.dir.c_str(), out.c_str()) == 0, "cannot move the export into place at %s: %s",
                      out.c_str(), std::strerror(errno));
    staging.released = true;
  } else if (exchange_paths(staging.dir, out.string())) {
    // One atomic step: readers see the old export or the new one, never a mixture. The
    // staging path now holds the old export; the guard removes it.
  } else {
    // No RENAME_EXCHANGE (an older kernel, some network file systems): two renames, with
    // a moment in which --output does not exist, but never a mixture of two exports.
    const std::string old = (parent / ("." + out.filename().string() + ".meshtrain-old-" + std::to_string(::getpid())))
                                .string();
    fs::remove_all(old, ec);
    MESHTRAIN_REQUIRE(::rename(out.c_str(), old.c_str()) == 0, "cannot move the earlier export %s aside: %s",
                      out.c_str(), std::strerror(errno));
    if (::rename(staging.dir.c_str(), out.c_str()) != 0) {
      const int err = errno;
      ::rename(old.c_str(), out.c_str());  // put the earlier export back
      throw UserError(strprintf("cannot move the export into place at %s: %s", out.c_str(), std::strerror(err)));
    }
    staging.dir = old;  // the guard removes the earlier export
  }
  // --output holds the new export: a signal from here on leaves it (and at worst the
  // earlier export's files beside it, in a hidden directory named after --output).
  staging.on_signal.disarm();
  staging.made_parents.clear();
  file_io::fsync_path(parent.string());
}

}  // namespace meshtrain::app
