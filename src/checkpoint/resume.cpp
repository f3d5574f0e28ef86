// Finding checkpoints: names, listing, the `latest` pointer, checkpoint.resume.
#include <algorithm>
#include <filesystem>

#include "files.hpp"
#include "comm/collectives.hpp"
#include "checkpoint/checkpoint.hpp"
#include "core/check.hpp"
#include "core/error.hpp"
#include "core/file_io.hpp"
#include "core/format.hpp"

namespace meshtrain::checkpoint {
namespace fs = std::filesystem;

namespace {

/// The one name `latest` holds, exactly as the commit writes it: the name and a newline (the
/// newline may be missing). Anything else -- nothing, several lines, bytes after the name,
/// a path -- is a UserError naming the file and what is wrong: the directory was damaged or
/// edited, and guessing which line counts could resume the wrong checkpoint.
std::string read_latest_name(const std::string& latest, const std::string& what) {
  // Far longer than any name the commit writes (step_2147483647.h5 and a newline).
  constexpr std::uint64_t kMaxBytes = 4096;
  const std::uint64_t bytes = file_io::require_regular_file(latest, what + ":");  // a FIFO would block the open
  const auto damaged = [&](const std::string& why) {
    return UserError(strprintf("%s: %s is empty or damaged (%s; it should hold one file name like step_00000100.h5 and "
                               "a newline); delete it to fall back to the newest step_*.h5, or set "
                               "checkpoint.resume=PATH to pick one",
                               what.c_str(), latest.c_str(), why.c_str()));
  };
  if (bytes > kMaxBytes) throw damaged(strprintf("it is %llu bytes long", static_cast<unsigned long long>(bytes)));
  std::string text = file_io::read_text_file(latest, what + ": " + latest, kMaxBytes);
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (text.empty()) throw damaged("it is empty");
  if (const std::size_t nl = text.find('\n'); nl != std::string::npos) {
    const auto lines = 1 + std::count(text.begin(), text.end(), '\n');
    throw damaged(strprintf("it holds %lld lines, the first '%s'", static_cast<long long>(lines),
                            text.substr(0, std::min<std::size_t>(nl, 64)).c_str()));
  }
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f || c == ' ')
      throw damaged(strprintf("byte %zu is %s, which no checkpoint name holds", i + 1,
                              c == ' ' ? "a space" : c == '\r' ? "a carriage return" : strprintf("0x%02x", c).c_str()));
  }
  if (text.find('/') != std::string::npos) throw damaged("it holds a path, '" + text.substr(0, 64) + "'");
  return text;
}

/// The newest complete checkpoint of `dir` ("" when there is none): the file `latest`
/// names, or without `latest` the highest step_*.h5. `what` prefixes messages.
std::string newest_in(const std::string& dir, const std::string& what) {
  std::error_code ec;
  const std::string latest = dir + "/latest";
  if (fs::exists(latest, ec)) {
    const std::string name = read_latest_name(latest, what);
    // Only a committed checkpoint may be named: never the .tmp of a save in flight or one
    // that died, nor any other file.
    MESHTRAIN_REQUIRE(files::step_of(name).has_value(),
                      "%s: %s names '%s', which is not a committed checkpoint (a step_<step>.h5 file%s); delete %s "
                      "to fall back to the newest step_*.h5, or set checkpoint.resume=PATH to pick one",
                      what.c_str(), latest.c_str(), name.c_str(),
                      files::step_of(name, true) ? "; this is the temporary file of an unfinished save" : "",
                      latest.c_str());
    const std::string path = dir + "/" + name;
    MESHTRAIN_REQUIRE(fs::is_regular_file(path, ec),
                      "%s: %s points to %s which does not exist; delete %s to fall back to the newest step_*.h5, set "
                      "checkpoint.resume=PATH to pick one, or checkpoint.resume=none with checkpoint.overwrite=true to start "
                      "over",
                      what.c_str(), latest.c_str(), path.c_str(), latest.c_str());
    return path;
  }
  const std::vector<std::string> all = list_checkpoints(dir);
  return all.empty() ? std::string() : all.back();
}

}  // namespace

std::string checkpoint_file_name(int step) { return strprintf("step_%08d.h5", step); }

std::string newest_checkpoint(const std::string& dir) { return newest_in(dir, "checkpoint directory " + dir); }

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (const auto step = files::step_of(name); step && e.is_regular_file(ec)) found.emplace_back(*step, dir + "/" + name);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [step, path] : found) out.push_back(std::move(path));
  return out;
}

std::vector<std::string> list_checkpoints_after(const std::string& dir, int step) {
  std::vector<std::string> out;
  for (std::string& path : list_checkpoints(dir))
    if (*files::step_of(fs::path(path).filename().string()) > step) out.push_back(std::move(path));
  return out;
}

std::vector<std::string> list_checkpoint_other_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name == "latest" || files::step_of(name, true)) out.push_back(dir + "/" + name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string resolve_resume(const std::string& dir, const ResumeSpec& resume) {
  std::error_code ec;
  if (resume.kind == ResumeSpec::Kind::None) return "";
  if (resume.kind == ResumeSpec::Kind::Auto)
    return fs::is_directory(dir, ec) ? newest_in(dir, "checkpoint.resume=auto") : "";
  const std::string& setting = resume.path;
  const std::string what = "checkpoint.resume=" + setting;
  MESHTRAIN_REQUIRE(fs::exists(setting, ec),
                    "%s: no such file or directory (use auto, none, a step_*.h5 file or a checkpoint directory)",
                    what.c_str());
  if (fs::is_directory(setting, ec)) {
    const std::string path = newest_in(setting, what);
    MESHTRAIN_REQUIRE(!path.empty(), "%s: the directory holds no complete checkpoint (step_*.h5)", what.c_str());
    return path;
  }
  return setting;
}

std::string resolve_resume(const MpiComm& comm, const std::string& dir, const ResumeSpec& setting) {
  // Rank 0 decides so that every rank resumes from the same file even if the directory
  // changes while the ranks look at it.
  std::string answer, error;
  if (comm.rank() == 0) {
    try {
      answer = resolve_resume(dir, setting);
    } catch (const UserError& e) {
      error = e.what();
      if (error.empty()) error = "checkpoint.resume: cannot resolve";
    }
  }
  for (std::string* s : {&error, &answer}) *s = broadcast_string(comm, *s);
  if (!error.empty()) throw UserError(error);
  return answer;
}

}  // namespace meshtrain::checkpoint
