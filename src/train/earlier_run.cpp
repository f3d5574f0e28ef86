#include "train/earlier_run.hpp"

#include <filesystem>
#include <system_error>

#include "checkpoint/checkpoint.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/file_io.hpp"
#include "formats/json.hpp"

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

EarlierRecord earlier_record(const std::string& out_dir, const plan::CheckpointSpec& cc) {
  std::error_code ec;
  const fs::path run_json = fs::path(out_dir) / "run.json";
  if (!fs::is_regular_file(run_json, ec)) return {};
  std::string dir;
  try {
    const formats::Json run = formats::parse_json(file_io::read_text_file(run_json.string(), "run.json", 1 << 20));
    if (!run.is_object() || !run.contains("checkpoint_dir") || !run["checkpoint_dir"].is_string()) return {};
    dir = run["checkpoint_dir"].get<std::string>();
  } catch (const std::exception&) {
    return {};  // a record meshtrain cannot read (damaged, edited) names no other run
  }
  if (dir.empty() || canonical_path(dir) == canonical_path(cc.dir)) return {};  // earlier_checkpoints' case
  EarlierRecord r;
  r.checkpoint_dir = dir;
  r.complete = checkpoint::list_checkpoints(dir);
  return r;
}

bool replaces_record(const plan::CheckpointSpec& cc, const EarlierRecord& record, const std::string& resumed_from) {
  if (record.empty()) return false;
  if (resumed_from.empty()) return true;
  const fs::path from = canonical_path(fs::path(resumed_from).parent_path());
  return from != canonical_path(record.checkpoint_dir) && from != canonical_path(cc.dir);
}

std::string earlier_record_refusal(const std::string& out_dir, const plan::CheckpointSpec& cc,
                                   const EarlierRecord& record, const std::string& resumed_from) {
  if (cc.overwrite || !replaces_record(cc, record, resumed_from)) return "";
  const std::size_t n = record.complete.size();
  const std::string which =
      n == 1 ? file_name(record.complete.front())
             : strprintf("%s to %s", file_name(record.complete.front()).c_str(), file_name(record.complete.back()).c_str());
  return strprintf(
      "output.dir=%s holds the record (config.ini, metrics.jsonl, summary.json) of another run, whose %zu checkpoint%s "
      "(%s) %s in %s, and this run does not continue it but writes its checkpoints to checkpoint.dir=%s: its record "
      "would replace that run's. Give this run another output.dir, continue that run (checkpoint.dir=%s, or "
      "checkpoint.resume=<one of its checkpoints> to save the rest to %s), or set checkpoint.overwrite=true to replace "
      "the record (its checkpoints are kept)",
      out_dir.c_str(), n, n == 1 ? "" : "s", which.c_str(), n == 1 ? "is" : "are", record.checkpoint_dir.c_str(),
      cc.dir.c_str(), record.checkpoint_dir.c_str(), cc.dir.c_str());
}

std::string overwrite_unused(const plan::CheckpointSpec& cc, const EarlierCheckpoints& earlier, bool replaces) {
  if (!cc.overwrite || !earlier.empty() || replaces) return "";
  if (cc.resume.kind == ResumeSpec::Kind::Auto)
    return "checkpoint.overwrite=true has no effect with checkpoint.resume=auto: the run continues the checkpoints in "
           "checkpoint.dir (it deletes another run's only when it does not continue them: checkpoint.resume=none or a "
           "checkpoint outside the directory)";
  if (earlier.rewind)
    return strprintf("checkpoint.overwrite=true has no effect: checkpoint.resume=%s is this directory's own checkpoint, "
                     "whose run continues from that step (a rewind: the later steps' checkpoints are deleted all the same, "
                     "and the run trains them again)",
                     cc.resume.path.c_str());
  return "";
}

std::string remove_abandoned_steps(const plan::CheckpointSpec& cc, const std::string& resumed_from, int resumed_step,
                                   const std::string& lora_base) {
  const std::vector<std::string> later = checkpoint::list_checkpoints_after(cc.dir, resumed_step);
  if (later.empty()) return "";
  if (!lora_base.empty())
    for (const std::string& path : later)
      MESHTRAIN_REQUIRE(canonical_path(path) != canonical_path(lora_base),
                        "the LoRA base %s of checkpoint.resume=%s is a later step of checkpoint.dir=%s, which the "
                        "rewind to step %d would delete (this run's checkpoints name their base by that path); copy it "
                        "out of the directory first, or resume into another output.dir",
                        lora_base.c_str(), resumed_from.c_str(), cc.dir.c_str(), resumed_step);
  // `latest` first: a deletion stopped half way leaves it naming this run's checkpoint.
  const std::string name = file_name(resumed_from);
  const bool named = name == checkpoint::checkpoint_file_name(resumed_step);
  const std::string latest = (fs::path(cc.dir) / "latest").string();
  std::error_code ec;
  if (named) {
    file_io::replace_file(latest, name + "\n");
  } else {
    fs::remove(latest, ec);
    MESHTRAIN_REQUIRE(!ec, "the rewind to %s: cannot delete %s: %s", resumed_from.c_str(), latest.c_str(),
                      ec.message().c_str());
  }
  for (const std::string& path : later) {
    fs::remove(path, ec);
    MESHTRAIN_REQUIRE(!ec, "the rewind to %s: cannot delete %s: %s", resumed_from.c_str(), path.c_str(),
                      ec.message().c_str());
  }
  const std::size_t n = later.size();
  const std::string now_latest = named ? "latest names " + name : "latest was removed (it names step_*.h5 files only)";
  const std::string count = n == 1 ? "the later checkpoint" : strprintf("the %zu later checkpoints", n);
  return strprintf("checkpoint.resume=%s rewinds the run to step %d: deleted %s of checkpoint.dir=%s (%s%s%s), "
                   "which the run trains again; %s",
                   resumed_from.c_str(), resumed_step, count.c_str(), cc.dir.c_str(),
                   file_name(later.front()).c_str(), n == 1 ? "" : " to ", n == 1 ? "" : file_name(later.back()).c_str(),
                   now_latest.c_str());
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
