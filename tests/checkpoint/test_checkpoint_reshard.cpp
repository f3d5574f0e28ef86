// Resharding of the whole training state (fp32 masters, both AdamW moments, progress)
// between meshes and world sizes, in one 4-rank job (sub-communicators give the 1- and
// 2-rank meshes). Each source mesh fills its state with known values -- a hash of the
// parameter's Hugging Face name, the array, the logical row and column, and a salt per
// source -- and saves; each destination mesh loads that file, must hold the known values
// bit for bit, and saves what it loaded again. Every file written is listed in files.txt:
// reshard_state.sh then checks each one with h5py against the known values computed in
// Python from the name and the logical position alone (check_known_state.py), so a wrong
// TP-local <-> logical map is caught even where save and load would agree with each other.
#include <gtest/gtest.h>

#include <fstream>

#include "ckpt_test_util.hpp"
#include "checkpoint/checkpoint.hpp"
#include "core/format.hpp"

namespace meshtrain::test {
namespace {

using parallel::Strategy;

struct MeshCase {
  MeshShape shape;
  Strategy strategy;
  std::string str() const {
    return strprintf("%dx%dx%d_%s", shape.dp_replicate, shape.dp_shard, shape.tp, parallel::strategy_name(strategy));
  }
};

checkpoint::TrainState sample_state() {
  checkpoint::TrainState st;
  st.step = 3;
  st.cursor = 123;
  st.updates = 2;
  st.skipped = 1;
  st.seed = 0xfeedbeefcafeull;
  st.tokens_seen = st.cursor * 32;
  return st;
}

/// A fresh directory `dir` (rank 0 of `comm` creates it; all of `comm` wait).
std::string make_dir(const MpiComm& comm, const std::string& dir) {
  if (comm.rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  MPI_Barrier(comm.get());
  return dir;
}

TEST(CheckpointReshard, BetweenMeshesAndWorldSizes) {
  const MpiComm& w = world();
  // A failure, not a skip: a run with fewer ranks would report a pass without testing.
  ASSERT_EQ(w.size(), 4) << "test_checkpoint_reshard needs exactly 4 ranks (mpiexec -n 4): its meshes have 1, 2 "
                            "and 4 ranks";
  const std::vector<MeshCase> sources = {{{1, 1, 2}, Strategy::FullShard},   // tp=2 on 2 ranks
                                         {{1, 2, 2}, Strategy::FullShard},   // dp_shard=2 x tp=2
                                         {{1, 1, 4}, Strategy::FullShard},   // llama kv replicated over tp
                                         {{2, 2, 1}, Strategy::HybridShard}, // only replicate 0 writes
                                         {{1, 4, 1}, Strategy::NoShard}};
  const std::vector<MeshCase> destinations = {{{1, 1, 1}, Strategy::FullShard},   // 1 rank
                                              {{1, 1, 2}, Strategy::FullShard},   // 2 ranks, tp=2
                                              {{1, 4, 1}, Strategy::FullShard},   // dp_shard=4
                                              {{1, 2, 2}, Strategy::ShardGradOp},
                                              {{2, 1, 2}, Strategy::HybridShard},
                                              {{1, 1, 4}, Strategy::FullShard},
                                              {{1, 2, 1}, Strategy::NoShard}};
  const checkpoint::TrainState st = sample_state();
  std::ofstream files;
  if (w.rank() == 0) files.open("files.txt");
  std::uint64_t salt = 0;
  for (const std::string family : {"gpt2", "llama"}) {
    for (const MeshCase& src : sources) {
      ++salt;  // every source's values differ: a destination reading the wrong file fails
      const std::string src_dir = make_dir(w, "reshard/" + family + "/" + src.str());
      const std::string path = src_dir + "/step_00000003.h5";
      {
        auto job = make_job(w, tiny_config(family), src.shape, src.strategy);
        if (job->member()) {
          fill_known(*job->engine, salt);
          EXPECT_TRUE(checkpoint::save(*job->engine, *job->mesh, train::checkpoint_meta(job->setup), st, src_dir).written);
        }
      }
      MPI_Barrier(w.get());
      if (w.rank() == 0) files << family << " " << salt << " " << path << "\n";
      for (const MeshCase& dst : destinations) {
        const std::string what = family + " from " + src.str() + " to " + dst.str();
        SCOPED_TRACE(what);
        const std::string dst_dir = make_dir(w, src_dir + "_to_" + dst.str());
        auto job = make_job(w, tiny_config(family), dst.shape, dst.strategy);
        if (job->member()) {
          zero_state(*job->engine);
          const checkpoint::TrainState got = checkpoint::load(*job->engine, *job->mesh, train::checkpoint_meta(job->setup), path);
          EXPECT_EQ(got.step, st.step);
          EXPECT_EQ(got.cursor, st.cursor);
          EXPECT_EQ(got.updates, st.updates);
          EXPECT_EQ(got.skipped, st.skipped);
          EXPECT_EQ(got.seed, st.seed);
          EXPECT_EQ(got.tokens_seen, st.tokens_seen);
          for (int k = 0; k < 3; ++k)
            EXPECT_EQ(count_mismatches(*job->engine, k, expected_state(*job->engine, k, salt)), 0)
                << what << ": state array " << k << " differs after load";
          // What the destination holds, written back through its own layout: checked in Python.
          EXPECT_TRUE(checkpoint::save(*job->engine, *job->mesh, train::checkpoint_meta(job->setup), got, dst_dir).written);
        }
        MPI_Barrier(w.get());
        if (w.rank() == 0) files << family << " " << salt << " " << dst_dir << "/step_00000003.h5\n";
      }
    }
  }
}

}  // namespace
}  // namespace meshtrain::test
