#include "train/earlier_run.hpp"

#include <filesystem>
#include <system_error>

#include "checkpoint/checkpoint.hpp"
#include "core/error.hpp"
#include "core/format.hpp"

namespace meshtrain::train {

namespace fs = std::filesystem;

namespace {

using checkpoint::ResumeSpec;

fs::path canonical_path(const fs::path& p) {
  std::error_code ec;
  const fs::path c = fs::weakly_canonical(p, ec);
  return (ec ? p : c).lexically_normal();
}

std::string file_name(const std::string& path) { return fs::path(path).filename().string(); }

}  // namespace

EarlierCheckpoints earlier_checkpoints(const plan::CheckpointSpec& cc) {
  const ResumeSpec& resume = cc.resume;
  if (resume.kind == ResumeSpec::Kind::Auto) return {};
  if (resume.kind == ResumeSpec::Kind::Path) {
    // A missing PATH is the resume's own error (restore_or_init), named as such.
    std::error_code ec;
    if (!fs::exists(resume.path, ec)) return {};
    const fs::path from = fs::is_directory(resume.path, ec) ? fs::path(resume.path) : fs::path(resume.path).parent_path();
    if (canonical_path(from.empty() ? fs::path(".") : from) == canonical_path(cc.dir)) {
      EarlierCheckpoints rewind;
      rewind.rewind = true;
      return rewind;
    }
  }
  EarlierCheckpoints e;
  e.complete = checkpoint::list_checkpoints(cc.dir);
  if (!e.complete.empty()) e.others = checkpoint::list_checkpoint_other_files(cc.dir);
  return e;
}

std::string earlier_run_refusal(const plan::CheckpointSpec& cc, const EarlierCheckpoints& earlier,
                                const std::string& lora_base) {
  if (earlier.empty()) return "";
  if (cc.overwrite) {
    // The weights this run starts from must outlive the deletion: a LoRA run's checkpoints
    // name their base by that path, and the run's record names where it started.
    const auto deleted = [&](const std::string& path) {
      if (path.empty()) return false;
      const fs::path p = canonical_path(path);
      bool found = p == canonical_path(cc.dir);
      for (const std::string& c : earlier.complete) found = found || p == canonical_path(c);
      return found;
    };
    if (deleted(cc.init_from))
      return strprintf("checkpoint.init_from=%s is among the checkpoints in checkpoint.dir=%s that checkpoint.overwrite "
                       "would delete (a LoRA run's checkpoints name their base by that path); copy it out of the "
                       "directory first, or give this run another output.dir",
                       cc.init_from.c_str(), cc.dir.c_str());
    if (deleted(lora_base))
      return strprintf("the LoRA base %s of checkpoint.resume=%s is among the checkpoints in checkpoint.dir=%s that "
                       "checkpoint.overwrite would delete (this run's checkpoints name their base by that path); copy "
                       "it out of the directory first, or give this run another output.dir",
                       lora_base.c_str(), cc.resume.path.c_str(), cc.dir.c_str());
    return "";
  }
  const std::size_t n = earlier.complete.size();
  const std::string which =
      n == 1 ? file_name(earlier.complete.front())
             : strprintf("%s to %s", file_name(earlier.complete.front()).c_str(), file_name(earlier.complete.back()).c_str());
  const std::string start = cc.resume.kind == ResumeSpec::Kind::None
                                ? std::string("checkpoint.resume=none starts a new run there")
                                : "checkpoint.resume=" + cc.resume.path + " continues a checkpoint from outside it";
  return strprintf(
      "checkpoint.dir=%s holds %zu checkpoint%s of another run (%s), and %s: its saves would replace them step by "
      "step, checkpoint.keep would delete them, and a later resume could load either run's. Continue that run "
      "with checkpoint.resume=auto, give this one another %s, or set checkpoint.overwrite=true to delete them "
      "first",
      cc.dir.c_str(), n, n == 1 ? "" : "s", which.c_str(), start.c_str(),
      cc.dir_given ? "checkpoint.dir" : "output.dir (or checkpoint.dir)");
}

std::string remove_earlier_checkpoints(const plan::CheckpointSpec& cc, const EarlierCheckpoints& earlier) {
  if (earlier.empty()) return "";
  // The complete checkpoints first: a deletion stopped half way leaves `latest` naming a
  // missing file, which a resume reports, rather than a directory that looks intact.
  for (const std::vector<std::string>* list : {&earlier.complete, &earlier.others}) {
    for (const std::string& path : *list) {
      std::error_code ec;
      fs::remove(path, ec);
      MESHTRAIN_REQUIRE(!ec, "checkpoint.overwrite: cannot delete %s: %s", path.c_str(), ec.message().c_str());
    }
  }
  // `latest` and the .tmp files, by name: few, and what a reader looks for.
  std::string others;
  for (const std::string& path : earlier.others) others += (others.empty() ? " and " : ", ") + file_name(path);
  const std::size_t n = earlier.complete.size();
  return strprintf("checkpoint.overwrite: deleted %zu checkpoint%s of another run from %s (%s%s%s)%s", n,
                   n == 1 ? "" : "s", cc.dir.c_str(), file_name(earlier.complete.front()).c_str(), n == 1 ? "" : " to ",
                   n == 1 ? "" : file_name(earlier.complete.back()).c_str(), others.c_str());
}

}  // namespace meshtrain::train
