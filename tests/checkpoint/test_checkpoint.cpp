// HDF5 checkpoints: save/load round trips on every mesh of the job's size (masters and
// both moments bit for bit), the commit protocol (latest, retention, temporaries,
// non-finite state), checkpoint.resume. Resharding between meshes and world sizes is
// test_checkpoint_reshard.cpp (4 ranks, checked with h5py).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "ckpt_test_util.hpp"
#include "checkpoint/checkpoint.hpp"
#include "core/error.hpp"

namespace meshtrain::test {
namespace {

using parallel::Strategy;
namespace fs = std::filesystem;

struct MeshCase {
  MeshShape shape;
  Strategy strategy;
  std::string str() const {
    return strprintf("%dx%dx%d %s", shape.dp_replicate, shape.dp_shard, shape.tp, parallel::strategy_name(strategy));
  }
};

/// Meshes of exactly `n` ranks, covering every strategy and tp (tp=4 replicates the
/// llama key/value projections over tp: 2 kv heads).
std::vector<MeshCase> meshes_of(int n) {
  std::vector<MeshCase> out;
  switch (n) {
    case 1:
      out = {{{1, 1, 1}, Strategy::FullShard}, {{1, 1, 1}, Strategy::NoShard}};
      break;
    case 2:
      out = {{{1, 2, 1}, Strategy::FullShard}, {{1, 1, 2}, Strategy::FullShard}, {{1, 2, 1}, Strategy::NoShard},
             {{2, 1, 1}, Strategy::HybridShard}, {{1, 2, 1}, Strategy::ShardGradOp}};
      break;
    case 4:
      out = {{{1, 4, 1}, Strategy::FullShard}, {{1, 2, 2}, Strategy::FullShard}, {{1, 1, 4}, Strategy::FullShard},
             {{2, 2, 1}, Strategy::HybridShard}, {{1, 4, 1}, Strategy::NoShard}, {{2, 1, 2}, Strategy::HybridShard}};
      break;
    default:
      break;
  }
  return out;
}

checkpoint::TrainState sample_state(int step) {
  checkpoint::TrainState st;
  st.step = step;
  st.cursor = 40ull * step + 3;
  st.updates = step - 1;
  st.skipped = 1;
  st.seed = 0xfeedbeefcafeull;
  st.tokens_seen = st.cursor * 32;
  return st;
}

void expect_equal_state(const checkpoint::TrainState& a, const checkpoint::TrainState& b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.cursor, b.cursor);
  EXPECT_EQ(a.updates, b.updates);
  EXPECT_EQ(a.skipped, b.skipped);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.tokens_seen, b.tokens_seen);
}

/// Every rank of the job: loads `path` into a zeroed engine and checks masters and both
/// moments bit for bit against the known values.
void expect_loads_exactly(Job& job, const std::string& path, const checkpoint::TrainState& want,
                          const std::string& what) {
  zero_state(*job.engine);
  const checkpoint::TrainState got = checkpoint::load(*job.engine, *job.mesh, train::checkpoint_meta(job.setup), path);
  expect_equal_state(got, want);
  for (int k = 0; k < 3; ++k)
    EXPECT_EQ(count_mismatches(*job.engine, k, expected_state(*job.engine, k)), 0)
        << what << ": state array " << k << " differs after load";
}

TEST(Checkpoint, RoundTripOnEveryMeshOfThisSize) {
  const MpiComm& w = world();
  for (const std::string family : {"gpt2", "llama"}) {
    for (const MeshCase& mc : meshes_of(w.size())) {
      SCOPED_TRACE(family + " " + mc.str());
      auto job = make_job(w, tiny_config(family), mc.shape, mc.strategy);
      const std::string dir = fresh_dir(w, "roundtrip");
      fill_known(*job->engine);
      const checkpoint::TrainState st = sample_state(7);
      const checkpoint::IoStats s = checkpoint::save(*job->engine, *job->mesh, train::checkpoint_meta(job->setup), st, dir);
      EXPECT_TRUE(s.written);
      EXPECT_EQ(s.path, dir + "/step_00000007.h5");
      EXPECT_GT(s.bytes, 0u);
      EXPECT_GE(s.seconds, 0.0);
      EXPECT_TRUE(fs::exists(s.path));
      EXPECT_FALSE(fs::exists(s.path + ".tmp"));
      expect_loads_exactly(*job, s.path, st, family + " " + mc.str());
    }
  }
}

TEST(Checkpoint, LatestRetentionAndTemporaries) {
  const MpiComm& w = world();
  auto job = make_job(w, tiny_config("gpt2"), meshes_of(w.size())[0].shape, Strategy::FullShard);
  const std::string dir = fresh_dir(w, "retention");
  job->setup.spec.checkpoint.keep = 2;
  fill_known(*job->engine);
  if (w.rank() == 0) std::ofstream(dir + "/step_00000099.h5.tmp") << "a save that died";
  for (int step = 1; step <= 5; ++step) checkpoint::save(*job->engine, *job->mesh, train::checkpoint_meta(job->setup), sample_state(step), dir);
  const std::vector<std::string> left = checkpoint::list_checkpoints(dir);
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0], dir + "/step_00000004.h5");
  EXPECT_EQ(left[1], dir + "/step_00000005.h5");
  EXPECT_FALSE(fs::exists(dir + "/step_00000099.h5.tmp")) << "a dead save's temporary survived";
  std::ifstream latest(dir + "/latest");
  std::string name;
  std::getline(latest, name);
  EXPECT_EQ(name, "step_00000005.h5");
  EXPECT_EQ(checkpoint::resolve_resume(w, dir, app::resume_spec("auto")), dir + "/step_00000005.h5");
  EXPECT_EQ(checkpoint::resolve_resume(w, dir, app::resume_spec(dir)), dir + "/step_00000005.h5");
  EXPECT_EQ(checkpoint::resolve_resume(w, dir, app::resume_spec(left[0])), left[0]);
  EXPECT_EQ(checkpoint::resolve_resume(w, dir, app::resume_spec("none")), "");
  EXPECT_EQ(checkpoint::resolve_resume(w, dir + "/nothing_here", app::resume_spec("auto")), "") << "a missing dir is a fresh start";

  // keep = 1 never deletes the newest.
  job->setup.spec.checkpoint.keep = 1;
  checkpoint::save(*job->engine, *job->mesh, train::checkpoint_meta(job->setup), sample_state(6), dir);
  ASSERT_EQ(checkpoint::list_checkpoints(dir).size(), 1u);
  EXPECT_EQ(checkpoint::list_checkpoints(dir)[0], dir + "/step_00000006.h5");
}

// checkpoint.keep counts the checkpoints up to the one just saved: a complete file of a
// higher step (a save renamed in before a crash took `latest`; the resumed run trains that
// step again) neither takes the place of one of the run's own nor is deleted.
TEST(Checkpoint, RetentionKeepsTheRunsOwnBelowAHigherStep) {
  const MpiComm& w = world();
  auto job = make_job(w, tiny_config("gpt2"), meshes_of(w.size())[0].shape, Strategy::FullShard);
  const std::string dir = fresh_dir(w, "retention_higher");
  job->setup.spec.checkpoint.keep = 2;
  fill_known(*job->engine);
  for (int step : {10, 20}) checkpoint::save(*job->engine, *job->mesh, train::checkpoint_meta(job->setup), sample_state(step), dir);
  // The crash between step 20's rename and its `latest`: latest still names step 10.
  if (w.rank() == 0) std::ofstream(dir + "/latest") << "step_00000010.h5\n";
  MPI_Barrier(w.get());
  for (int step : {12, 14, 16}) checkpoint::save(*job->engine, *job->mesh, train::checkpoint_meta(job->setup), sample_state(step), dir);
  const std::vector<std::string> want = {dir + "/step_00000014.h5", dir + "/step_00000016.h5", dir + "/step_00000020.h5"};
  EXPECT_EQ(checkpoint::list_checkpoints(dir), want);
  EXPECT_EQ(checkpoint::resolve_resume(w, dir, app::resume_spec("auto")), dir + "/step_00000016.h5");
  // keep = 1: the newest alone, of the run's own.
  job->setup.spec.checkpoint.keep = 1;
  checkpoint::save(*job->engine, *job->mesh, train::checkpoint_meta(job->setup), sample_state(18), dir);
  const std::vector<std::string> one = {dir + "/step_00000018.h5", dir + "/step_00000020.h5"};
  EXPECT_EQ(checkpoint::list_checkpoints(dir), one);
  // Past it, the run's own save of that step replaces the file and counts like any other.
  checkpoint::save(*job->engine, *job->mesh, train::checkpoint_meta(job->setup), sample_state(20), dir);
  EXPECT_EQ(checkpoint::list_checkpoints(dir), std::vector<std::string>{dir + "/step_00000020.h5"});
}

TEST(Checkpoint, ResumeWithoutLatestScansAndBadLatestIsAnError) {
  const MpiComm& w = world();
  auto job = make_job(w, tiny_config("gpt2"), meshes_of(w.size())[0].shape, Strategy::FullShard);
  const std::string dir = fresh_dir(w, "latest");
  fill_known(*job->engine);
  checkpoint::save(*job->engine, *job->mesh, train::checkpoint_meta(job->setup), sample_state(2), dir);
  checkpoint::save(*job->engine, *job->mesh, train::checkpoint_meta(job->setup), sample_state(10), dir);
  MPI_Barrier(w.get());
  if (w.rank() == 0) fs::remove(dir + "/latest");
  MPI_Barrier(w.get());
  EXPECT_EQ(checkpoint::resolve_resume(w, dir, app::resume_spec("auto")), dir + "/step_00000010.h5");
  if (w.rank() == 0) std::ofstream(dir + "/latest") << "step_00000042.h5\n";
  MPI_Barrier(w.get());
  try {
    checkpoint::resolve_resume(w, dir, app::resume_spec("auto"));
    ADD_FAILURE() << "a latest pointing nowhere was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("latest points to " + dir + "/step_00000042.h5 which does not exist"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(checkpoint::resolve_resume(w, dir, app::resume_spec(dir + "/no_such.h5")), UserError);
  const std::string empty = fresh_dir(w, "latest_empty");
  try {
    checkpoint::resolve_resume(w, dir, app::resume_spec(empty));
    ADD_FAILURE() << "an empty directory was accepted as checkpoint.resume=PATH";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("holds no complete checkpoint"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, NonFiniteStateIsNeverCommitted) {
  const MpiComm& w = world();
  auto job = make_job(w, tiny_config("llama"), meshes_of(w.size())[0].shape, Strategy::FullShard);
  const std::string dir = fresh_dir(w, "nonfinite");
  fill_known(*job->engine);
  ASSERT_TRUE(checkpoint::save(*job->engine, *job->mesh, train::checkpoint_meta(job->setup), sample_state(1), dir).written);
  // One NaN on the last rank, in a moment: the save must be refused on every rank.
  if (w.rank() == w.size() - 1) {
    parallel::UnitState& st = job->engine->state(1);
    Kokkos::deep_copy(Kokkos::subview(st.exp_avg_sq.view(), 0), NAN);
  }
  const checkpoint::IoStats s = checkpoint::save(*job->engine, *job->mesh, train::checkpoint_meta(job->setup), sample_state(2), dir);
  EXPECT_FALSE(s.written);
  EXPECT_FALSE(fs::exists(dir + "/step_00000002.h5"));
  EXPECT_FALSE(fs::exists(dir + "/step_00000002.h5.tmp"));
  EXPECT_EQ(checkpoint::resolve_resume(w, dir, app::resume_spec("auto")), dir + "/step_00000001.h5");
}

TEST(Checkpoint, UnwritableDirectoryIsAUserError) {
  const MpiComm& w = world();
  auto job = make_job(w, tiny_config("gpt2"), meshes_of(w.size())[0].shape, Strategy::FullShard);
  const std::string dir = fresh_dir(w, "unwritable");
  if (w.rank() == 0) std::ofstream(dir + "/a_file") << "x";
  MPI_Barrier(w.get());
  try {
    checkpoint::save(*job->engine, *job->mesh, train::checkpoint_meta(job->setup), sample_state(1), dir + "/a_file/sub");
    ADD_FAILURE() << "saving below a file succeeded";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot create the checkpoint directory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace meshtrain::test
