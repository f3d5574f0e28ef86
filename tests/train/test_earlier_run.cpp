// A run that would write its checkpoints among another run's (train/earlier_run): which
// starts are refused, what checkpoint.overwrite deletes, and the messages.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "train/earlier_run.hpp"

using namespace meshtrain;
namespace fs = std::filesystem;
using checkpoint::ResumeSpec;

namespace {

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "'" << (part) << "' not in: " << (text)

/// A checkpoint directory with step 2 and 4, `latest` and an unfinished save's .tmp, and a
/// checkpoint outside it; removed by the destructor.
struct Dirs {
  fs::path root, ckpt, outside;
  Dirs() {
    char tmpl[] = "/tmp/meshtrain-earlier-run.XXXXXX";
    EXPECT_NE(mkdtemp(tmpl), nullptr);
    root = tmpl;
    ckpt = root / "run" / "checkpoints";
    fs::create_directories(ckpt);
    for (const char* name : {"step_00000002.h5", "step_00000004.h5", "step_00000006.h5.tmp"})
      std::ofstream(ckpt / name) << "x";
    std::ofstream(ckpt / "latest") << "step_00000004.h5\n";
    std::ofstream(ckpt / ".meshtrain.lock") << "";  // not the run's checkpoints: kept
    outside = root / "other" / "step_00000008.h5";
    fs::create_directories(outside.parent_path());
    std::ofstream(outside) << "x";
  }
  ~Dirs() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  plan::CheckpointSpec spec(ResumeSpec::Kind kind, const std::string& path = "") const {
    plan::CheckpointSpec cc;
    cc.dir = ckpt.string();
    cc.resume.kind = kind;
    cc.resume.path = path;
    return cc;
  }
};

TEST(EarlierRun, WhichStartsMixTwoRuns) {
  Dirs d;
  // auto continues the directory's checkpoints.
  EXPECT_TRUE(train::earlier_checkpoints(d.spec(ResumeSpec::Kind::Auto)).empty());
  // none: the two complete checkpoints, oldest first; latest and the .tmp beside them.
  const train::EarlierCheckpoints none = train::earlier_checkpoints(d.spec(ResumeSpec::Kind::None));
  ASSERT_EQ(none.complete.size(), 2u);
  EXPECT_EQ(fs::path(none.complete[0]).filename(), "step_00000002.h5");
  EXPECT_EQ(fs::path(none.complete[1]).filename(), "step_00000004.h5");
  ASSERT_EQ(none.others.size(), 2u);
  EXPECT_EQ(fs::path(none.others[0]).filename(), "latest");
  EXPECT_EQ(fs::path(none.others[1]).filename(), "step_00000006.h5.tmp");
  // A checkpoint outside the directory (file or directory): the same.
  EXPECT_EQ(train::earlier_checkpoints(d.spec(ResumeSpec::Kind::Path, d.outside.string())).complete.size(), 2u);
  EXPECT_EQ(train::earlier_checkpoints(d.spec(ResumeSpec::Kind::Path, d.outside.parent_path().string())).complete.size(),
            2u);
  // An older step inside the directory, or the directory itself (also spelled otherwise): a rewind.
  for (const fs::path& p : {d.ckpt / "step_00000002.h5", d.ckpt / ".." / "checkpoints/"}) {
    const train::EarlierCheckpoints rewind = train::earlier_checkpoints(d.spec(ResumeSpec::Kind::Path, p.string()));
    EXPECT_TRUE(rewind.empty()) << p;
    EXPECT_TRUE(rewind.rewind) << p;
  }
  EXPECT_FALSE(train::earlier_checkpoints(d.spec(ResumeSpec::Kind::Path, d.outside.string())).rewind);
  EXPECT_FALSE(train::earlier_checkpoints(d.spec(ResumeSpec::Kind::None)).rewind);
  // A PATH that does not exist is the resume's own error, later.
  EXPECT_TRUE(train::earlier_checkpoints(d.spec(ResumeSpec::Kind::Path, (d.root / "nowhere.h5").string())).empty());
  // latest and a .tmp without a complete checkpoint: nothing to keep.
  fs::remove(d.ckpt / "step_00000002.h5");
  fs::remove(d.ckpt / "step_00000004.h5");
  EXPECT_TRUE(train::earlier_checkpoints(d.spec(ResumeSpec::Kind::None)).empty());
  // A directory that does not exist yet.
  fs::remove_all(d.ckpt);
  EXPECT_TRUE(train::earlier_checkpoints(d.spec(ResumeSpec::Kind::None)).empty());
}

TEST(EarlierRun, TheRefusalNamesTheCheckpointsAndTheWaysOn) {
  Dirs d;
  plan::CheckpointSpec cc = d.spec(ResumeSpec::Kind::None);
  const train::EarlierCheckpoints e = train::earlier_checkpoints(cc);
  const std::string r = train::earlier_run_refusal(cc, e);
  EXPECT_CONTAINS(r, "checkpoint.dir=" + d.ckpt.string() +
                         " holds 2 checkpoints of another run (step_00000002.h5 to step_00000004.h5), and "
                         "checkpoint.resume=none starts a new run there");
  EXPECT_CONTAINS(r, "checkpoint.resume=auto, give this one another output.dir (or checkpoint.dir), or set "
                     "checkpoint.overwrite=true to delete them first");
  // checkpoint.dir given: another checkpoint.dir is the way.
  cc.dir_given = true;
  EXPECT_CONTAINS(train::earlier_run_refusal(cc, e), "give this one another checkpoint.dir, or");
  // A resume from outside is named as such.
  const plan::CheckpointSpec path = d.spec(ResumeSpec::Kind::Path, d.outside.string());
  EXPECT_CONTAINS(train::earlier_run_refusal(path, train::earlier_checkpoints(path)),
                  "checkpoint.resume=" + d.outside.string() + " continues a checkpoint from outside it");
  // Nothing to refuse, or overwrite asked for.
  EXPECT_EQ(train::earlier_run_refusal(cc, {}), "");
  cc.overwrite = true;
  EXPECT_EQ(train::earlier_run_refusal(cc, e), "");
  // ... but not of the weights the run starts from.
  cc.init_from = (d.ckpt / "step_00000004.h5").string();
  EXPECT_CONTAINS(train::earlier_run_refusal(cc, e),
                  "checkpoint.init_from=" + cc.init_from + " is among the checkpoints in checkpoint.dir=");
  cc.init_from = d.ckpt.string();
  EXPECT_CONTAINS(train::earlier_run_refusal(cc, e), "that checkpoint.overwrite would delete");
  cc.init_from = d.outside.string();
  EXPECT_EQ(train::earlier_run_refusal(cc, e), "");
  // ... nor of the LoRA base a checkpoint resumed from outside names.
  plan::CheckpointSpec lora = d.spec(ResumeSpec::Kind::Path, d.outside.string());
  lora.overwrite = true;
  const train::EarlierCheckpoints le = train::earlier_checkpoints(lora);
  const std::string base = (d.ckpt / "step_00000002.h5").string();
  EXPECT_CONTAINS(train::earlier_run_refusal(lora, le, base),
                  "the LoRA base " + base + " of checkpoint.resume=" + d.outside.string() +
                      " is among the checkpoints in checkpoint.dir=" + d.ckpt.string() +
                      " that checkpoint.overwrite would delete");
  EXPECT_EQ(train::earlier_run_refusal(lora, le, d.outside.string()), "");
  EXPECT_EQ(train::earlier_run_refusal(lora, le, ""), "");
}

TEST(EarlierRun, OverwriteDeletesTheRunsFilesOnly) {
  Dirs d;
  plan::CheckpointSpec cc = d.spec(ResumeSpec::Kind::None);
  cc.overwrite = true;
  const std::string said = train::remove_earlier_checkpoints(cc, train::earlier_checkpoints(cc));
  EXPECT_EQ(said, "checkpoint.overwrite: deleted 2 checkpoints of another run from " + d.ckpt.string() +
                      " (step_00000002.h5 to step_00000004.h5) and latest, step_00000006.h5.tmp");
  // The lock file (not a checkpoint) and the checkpoint outside stay.
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(d.ckpt)) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{".meshtrain.lock"});
  EXPECT_TRUE(fs::exists(d.outside));
  EXPECT_EQ(train::remove_earlier_checkpoints(cc, {}), "");
}

TEST(EarlierRun, AFileThatCannotBeDeletedIsNamed) {
  Dirs d;
  plan::CheckpointSpec cc = d.spec(ResumeSpec::Kind::None);
  cc.overwrite = true;
  train::EarlierCheckpoints e = train::earlier_checkpoints(cc);
  // A non-empty directory where a checkpoint file was listed: remove() fails on it.
  fs::remove(e.complete[0]);
  fs::create_directories(fs::path(e.complete[0]) / "inside");
  try {
    train::remove_earlier_checkpoints(cc, e);
    FAIL() << "no error";
  } catch (const UserError& err) {
    EXPECT_CONTAINS(err.what(), "checkpoint.overwrite: cannot delete " + e.complete[0]);
  }
}

}  // namespace

TEST(EarlierRun, OutputDirRecordOfARunWhoseCheckpointsAreElsewhere) {
  Dirs d;
  // root/run holds the record of the run whose checkpoints are root/run/checkpoints; this
  // run writes its own to root/new.
  const fs::path out = d.root / "run";
  std::ofstream(out / "run.json") << "{\"world_size\":1,\"checkpoint_dir\":\"" << d.ckpt.string() << "\"}\n";
  plan::CheckpointSpec cc = d.spec(ResumeSpec::Kind::Auto);
  cc.dir = (d.root / "new").string();
  const train::EarlierRecord r = train::earlier_record(out.string(), cc);
  EXPECT_EQ(r.checkpoint_dir, d.ckpt.string());
  ASSERT_EQ(r.complete.size(), 2u);
  // A fresh start, or a resume from elsewhere, replaces the record: refused.
  EXPECT_TRUE(train::replaces_record(cc, r, ""));
  EXPECT_TRUE(train::replaces_record(cc, r, d.outside.string()));
  const std::string refusal = train::earlier_record_refusal(out.string(), cc, r, "");
  EXPECT_CONTAINS(refusal, "output.dir=" + out.string() + " holds the record (config.ini, metrics.jsonl, summary.json) of "
                           "another run, whose 2 checkpoints (step_00000002.h5 to step_00000004.h5) are in " +
                               d.ckpt.string() + ", and this run does not continue it but writes its checkpoints to "
                               "checkpoint.dir=" + cc.dir);
  EXPECT_CONTAINS(refusal, "or set checkpoint.overwrite=true to replace the record (its checkpoints are kept)");
  // A resume of one of that run's checkpoints continues it; one from this run's own
  // directory (a copy of the run's directories) continues the record's run too.
  EXPECT_FALSE(train::replaces_record(cc, r, (d.ckpt / "step_00000002.h5").string()));
  EXPECT_EQ(train::earlier_record_refusal(out.string(), cc, r, (d.ckpt / "step_00000002.h5").string()), "");
  EXPECT_FALSE(train::replaces_record(cc, r, (d.root / "new" / "step_00000004.h5").string()));
  // checkpoint.overwrite replaces it (the caller warns).
  cc.overwrite = true;
  EXPECT_EQ(train::earlier_record_refusal(out.string(), cc, r, ""), "");
  EXPECT_EQ(train::overwrite_unused(cc, {}, true), "");
  cc.overwrite = false;
  // The same directory (spelled otherwise) is earlier_checkpoints' case, not a record's.
  cc.dir = (out / "." / "checkpoints").string();
  EXPECT_TRUE(train::earlier_record(out.string(), cc).empty());
  cc.dir = (d.root / "new").string();
  // That run's checkpoints gone (moved, deleted): nothing described by the record is lost.
  fs::rename(d.ckpt, d.root / "moved");
  EXPECT_TRUE(train::earlier_record(out.string(), cc).empty());
  EXPECT_FALSE(train::replaces_record(cc, train::earlier_record(out.string(), cc), ""));
  fs::rename(d.root / "moved", d.ckpt);
  // A record without checkpoint_dir (written before it), damaged or not an object: no check.
  for (const char* text : {"{\"world_size\":1}\n", "{\"checkpoint_dir\":", "[1]", "{\"checkpoint_dir\":7}"}) {
    std::ofstream(out / "run.json", std::ios::trunc) << text;
    EXPECT_TRUE(train::earlier_record(out.string(), cc).empty()) << text;
  }
  fs::remove(out / "run.json");
  EXPECT_TRUE(train::earlier_record(out.string(), cc).empty());
}

// A rewind: the later steps' checkpoints go, `latest` first made to name the step rewound
// to; the earlier steps, the temporaries and the lock stay (retention removes temporaries).
TEST(EarlierRun, ARewindDeletesTheLaterSteps) {
  Dirs d;
  std::ofstream(d.ckpt / "step_00000008.h5") << "x";
  const std::string older = (d.ckpt / "step_00000002.h5").string();
  const plan::CheckpointSpec cc = d.spec(ResumeSpec::Kind::Path, older);
  ASSERT_TRUE(train::earlier_checkpoints(cc).rewind);
  // The LoRA base among them: refused before anything is deleted.
  try {
    train::remove_abandoned_steps(cc, older, 2, (d.ckpt / "step_00000008.h5").string());
    FAIL() << "no error";
  } catch (const UserError& err) {
    EXPECT_CONTAINS(err.what(), "is a later step of checkpoint.dir=" + d.ckpt.string() + ", which the rewind to step 2 would delete");
  }
  EXPECT_TRUE(fs::exists(d.ckpt / "step_00000008.h5"));
  EXPECT_EQ(train::remove_abandoned_steps(cc, older, 2),
            "checkpoint.resume=" + older + " rewinds the run to step 2: deleted the 2 later checkpoints of checkpoint.dir=" +
                d.ckpt.string() + " (step_00000004.h5 to step_00000008.h5), which the run trains again; latest names "
                "step_00000002.h5");
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(d.ckpt)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{".meshtrain.lock", "latest", "step_00000002.h5", "step_00000006.h5.tmp"}));
  std::ifstream latest(d.ckpt / "latest");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(latest), {}), "step_00000002.h5\n");
  // Nothing after the step: nothing to say, nothing touched.
  EXPECT_EQ(train::remove_abandoned_steps(cc, older, 2), "");
  // A resumed file whose name is not a step's: `latest` cannot name it and goes.
  std::ofstream(d.ckpt / "step_00000004.h5") << "x";
  const std::string kept = (d.ckpt / "best.h5").string();
  std::ofstream(kept) << "x";
  EXPECT_CONTAINS(train::remove_abandoned_steps(d.spec(ResumeSpec::Kind::Path, kept), kept, 3),
                  "deleted the later checkpoint of checkpoint.dir=" + d.ckpt.string() +
                      " (step_00000004.h5), which the run trains again; latest was removed");
  EXPECT_FALSE(fs::exists(d.ckpt / "latest"));
  EXPECT_TRUE(fs::exists(d.ckpt / "step_00000002.h5"));
}

TEST(EarlierRun, OverwriteWithNothingToReplaceWarns) {
  Dirs d;
  plan::CheckpointSpec cc = d.spec(ResumeSpec::Kind::Auto);
  EXPECT_EQ(train::overwrite_unused(cc, {}, false), "");  // not set
  cc.overwrite = true;
  EXPECT_CONTAINS(train::overwrite_unused(cc, {}, false), "checkpoint.overwrite=true has no effect with checkpoint.resume=auto");
  const std::string older = (d.ckpt / "step_00000002.h5").string();
  plan::CheckpointSpec rewind = d.spec(ResumeSpec::Kind::Path, older);
  rewind.overwrite = true;
  EXPECT_CONTAINS(train::overwrite_unused(rewind, train::earlier_checkpoints(rewind), false),
                  "checkpoint.overwrite=true has no effect: checkpoint.resume=" + older +
                      " is this directory's own checkpoint");
  // Something to delete or replace, or a new run into an empty directory: no warning.
  plan::CheckpointSpec none = d.spec(ResumeSpec::Kind::None);
  none.overwrite = true;
  EXPECT_EQ(train::overwrite_unused(none, train::earlier_checkpoints(none), false), "");
  EXPECT_EQ(train::overwrite_unused(none, {}, false), "");
  EXPECT_EQ(train::overwrite_unused(cc, {}, true), "");
}
