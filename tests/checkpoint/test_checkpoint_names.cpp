// Checkpoint file names past 8 digits (issue 28): checkpoint_file_name pads the step to 8
// digits, so step 100,000,001 is written as step_100000001.h5 (9 digits). Every reader of
// the names -- list_checkpoints, `latest`, checkpoint.resume=auto / DIR, and retention --
// must see it and order it numerically, or the next resume fails. Real saves at steps
// 99,999,999..100,000,002 (a save takes the step from its state; no 100M-step run).
#include <gtest/gtest.h>

#include <fstream>

#include "ckpt_test_util.hpp"
#include "checkpoint/checkpoint.hpp"
#include "core/error.hpp"

namespace meshtrain::test {
namespace {

namespace fs = std::filesystem;

checkpoint::TrainState state_at(int step) {
  checkpoint::TrainState st;
  st.step = step;
  st.cursor = 2ull * step;
  st.updates = step;
  st.seed = 7;
  st.tokens_seen = st.cursor * 32;
  return st;
}

void touch(const std::string& path) { std::ofstream(path) << "x"; }

TEST(CheckpointNames, FileNamesPastEightDigits) {
  EXPECT_EQ(checkpoint::checkpoint_file_name(42), "step_00000042.h5");
  EXPECT_EQ(checkpoint::checkpoint_file_name(99999999), "step_99999999.h5");
  EXPECT_EQ(checkpoint::checkpoint_file_name(100000001), "step_100000001.h5");
  EXPECT_EQ(checkpoint::checkpoint_file_name(2147483647), "step_2147483647.h5");
}

TEST(CheckpointNames, ListingOrdersNumericallyAtAnyWidth) {
  const MpiComm& w = world();
  const std::string dir = fresh_dir(w, "names_listing");
  if (w.rank() == 0) {
    for (const char* n : {"step_100000001.h5", "step_99999999.h5", "step_00000005.h5", "step_2147483647.h5",
                          "step_1000000000.h5"})
      touch(dir + "/" + n);
    // Not checkpoints: a temporary, a step beyond int, no digits, stray characters, and
    // names meshtrain never writes for a step (too few or too many leading zeros).
    for (const char* n : {"step_100000002.h5.tmp", "step_2147483648.h5", "step_.h5", "step_12a4.h5", "step_1.h5x",
                          "step_5.h5", "step_000000005.h5", "step_0100000001.h5"})
      touch(dir + "/" + n);
  }
  MPI_Barrier(w.get());
  const std::vector<std::string> want = {dir + "/step_00000005.h5", dir + "/step_99999999.h5",
                                         dir + "/step_100000001.h5", dir + "/step_1000000000.h5",
                                         dir + "/step_2147483647.h5"};
  EXPECT_EQ(checkpoint::list_checkpoints(dir), want);
  // Without `latest` the numerically highest wins (lexically "step_99999999" > "step_1...").
  EXPECT_EQ(checkpoint::newest_checkpoint(dir), dir + "/step_2147483647.h5");
}

TEST(CheckpointNames, SaveLatestResumeAndRetentionPastEightDigits) {
  const MpiComm& w = world();
  auto job = make_job(w, tiny_config("gpt2"), MeshShape{1, w.size(), 1}, parallel::Strategy::FullShard);
  const std::string dir = fresh_dir(w, "names_save");
  job->setup.spec.checkpoint.keep = 2;
  fill_known(*job->engine);
  for (int step : {99999999, 100000000, 100000001, 100000002}) {
    const checkpoint::IoStats s = checkpoint::save(*job->engine, *job->mesh, train::checkpoint_meta(job->setup), state_at(step), dir);
    EXPECT_TRUE(s.written);
    EXPECT_EQ(s.path, dir + "/" + checkpoint::checkpoint_file_name(step));
  }
  // Retention kept the two numerically newest: the 8-digit one is the oldest and went first.
  const std::vector<std::string> want = {dir + "/step_100000001.h5", dir + "/step_100000002.h5"};
  EXPECT_EQ(checkpoint::list_checkpoints(dir), want);
  std::ifstream latest(dir + "/latest");
  std::string name;
  std::getline(latest, name);
  EXPECT_EQ(name, "step_100000002.h5");
  EXPECT_EQ(checkpoint::resolve_resume(w, dir, app::resume_spec("auto")), dir + "/step_100000002.h5");
  EXPECT_EQ(checkpoint::resolve_resume(w, dir, app::resume_spec(dir)), dir + "/step_100000002.h5");
  zero_state(*job->engine);
  const checkpoint::TrainState got = checkpoint::load(*job->engine, *job->mesh, train::checkpoint_meta(job->setup), dir + "/step_100000002.h5");
  EXPECT_EQ(got.step, 100000002);

  // `latest` may name a 9-digit checkpoint; without `latest`, the scan finds the same file.
  if (w.rank() == 0) fs::remove(dir + "/latest");
  MPI_Barrier(w.get());
  EXPECT_EQ(checkpoint::resolve_resume(w, dir, app::resume_spec("auto")), dir + "/step_100000002.h5");

  // A dead save's 9-digit temporary is removed by the next save's retention.
  if (w.rank() == 0) touch(dir + "/step_100000004.h5.tmp");
  MPI_Barrier(w.get());
  checkpoint::save(*job->engine, *job->mesh, train::checkpoint_meta(job->setup), state_at(100000003), dir);
  EXPECT_FALSE(fs::exists(dir + "/step_100000004.h5.tmp"));
  const std::vector<std::string> after = {dir + "/step_100000002.h5", dir + "/step_100000003.h5"};
  EXPECT_EQ(checkpoint::list_checkpoints(dir), after);
}

}  // namespace
}  // namespace meshtrain::test
