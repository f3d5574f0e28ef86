// Checkpoint validation on load: every damaged or mismatched input is one UserError,
// raised on every rank alike, naming the file and the problem; the engine is untouched.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <fstream>

#include "ckpt_test_util.hpp"
#include "checkpoint/checkpoint.hpp"
#include "core/error.hpp"

namespace meshtrain::test {
namespace {

namespace fs = std::filesystem;
using parallel::Strategy;

MeshShape mesh_shape_of(int n) { return n == 4 ? MeshShape{1, 2, 2} : n == 2 ? MeshShape{1, 1, 2} : MeshShape{1, 1, 1}; }

class Validation : public ::testing::Test {
 protected:
  void SetUp() override {
    job_ = make_job(world(), tiny_config("llama"), mesh_shape_of(world().size()), Strategy::FullShard);
    dir_ = fresh_dir(world(), "validation");
    fill_known(*job_->engine);
    checkpoint::TrainState st;
    st.step = 5;
    good_ = checkpoint::save(*job_->engine, *job_->mesh, train::checkpoint_meta(job_->setup), st, dir_).path;
    fill_known(*job_->engine, 99);  // the state a failed load must leave alone
  }

  /// Rank 0 makes `name` from the good checkpoint with `damage(path)`; returns the path.
  template <class F>
  std::string damaged(const std::string& name, F&& damage) {
    const std::string path = dir_ + "/" + name;
    if (world().rank() == 0) {
      fs::copy_file(good_, path, fs::copy_options::overwrite_existing);
      damage(path);
    }
    MPI_Barrier(world().get());
    return path;
  }

  /// Loading `path` fails on every rank with a message holding each of `parts` and the
  /// state stays as it was.
  void expect_rejected(const std::string& path, const std::vector<std::string>& parts) {
    std::string message;
    try {
      checkpoint::load(*job_->engine, *job_->mesh, train::checkpoint_meta(job_->setup), path);
    } catch (const UserError& e) {
      message = e.what();
    }
    ASSERT_FALSE(message.empty()) << path << " was accepted";
    EXPECT_NE(message.find(path), std::string::npos) << "the message does not name the file: " << message;
    for (const std::string& p : parts) EXPECT_NE(message.find(p), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "one sentence expected: " << message;
    for (int k = 0; k < 3; ++k)
      EXPECT_EQ(count_mismatches(*job_->engine, k, expected_state(*job_->engine, k, 99)), 0)
          << "a failed load changed state array " << k;
  }

  std::unique_ptr<Job> job_;
  std::string dir_, good_;
};

/// Opens the file serially for editing (rank 0 only).
hid_t open_rw(const std::string& path) { return H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT); }

TEST_F(Validation, GoodCheckpointLoads) {
  const checkpoint::TrainState st = checkpoint::load(*job_->engine, *job_->mesh, train::checkpoint_meta(job_->setup), good_);
  EXPECT_EQ(st.step, 5);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(count_mismatches(*job_->engine, k, expected_state(*job_->engine, k)), 0);
}

TEST_F(Validation, MissingFile) { expect_rejected(dir_ + "/step_00000077.h5", {"does not exist"}); }

TEST_F(Validation, NotAnHdf5File) {
  const std::string p = damaged("garbage.h5", [](const std::string& path) {
    std::ofstream(path, std::ios::trunc) << "this is not HDF5, just text that is long enough to look like a file\n";
  });
  expect_rejected(p, {"is not an HDF5 file"});
}

TEST_F(Validation, TruncatedFile) {
  const std::string p = damaged("truncated.h5", [](const std::string& path) {
    fs::resize_file(path, fs::file_size(path) / 2);
  });
  expect_rejected(p, {"truncated or damaged"});
}

TEST_F(Validation, UnknownFormatVersion) {
  const std::string p = damaged("future.h5", [](const std::string& path) {
    const hid_t f = open_rw(path);
    const hid_t a = H5Aopen(f, "format_version", H5P_DEFAULT);
    const long long v = 99;
    H5Awrite(a, H5T_NATIVE_LLONG, &v);
    H5Aclose(a);
    H5Fclose(f);
  });
  expect_rejected(p, {"format version 99", "reads versions 1 to"});
}

TEST_F(Validation, NotAMeshtrainCheckpoint) {
  const std::string p = dir_ + "/foreign.h5";
  if (world().rank() == 0) {
    const hid_t f = H5Fcreate(p.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5Fclose(f);
  }
  MPI_Barrier(world().get());
  expect_rejected(p, {"not a meshtrain checkpoint"});
}

TEST_F(Validation, DifferentModelConfigNamesEveryKey) {
  // The same file loaded into a wider model: d_model, head_dim and ffn... differ.
  auto wide = make_job(world(), tiny_config("llama", 128), mesh_shape_of(world().size()), Strategy::FullShard);
  std::string message;
  try {
    checkpoint::load(*wide->engine, *wide->mesh, train::checkpoint_meta(wide->setup), good_);
  } catch (const UserError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("written for a different model"), std::string::npos) << message;
  EXPECT_NE(message.find("d_model: 64 in the checkpoint, 128 in this run"), std::string::npos) << message;
  EXPECT_NE(message.find("head_dim: 16 in the checkpoint, 32 in this run"), std::string::npos) << message;
  EXPECT_EQ(message.find("n_layers"), std::string::npos) << "an equal key is listed: " << message;
  // Another family too.
  auto gpt2 = make_job(world(), tiny_config("gpt2"), mesh_shape_of(world().size()), Strategy::FullShard);
  message.clear();
  try {
    checkpoint::load(*gpt2->engine, *gpt2->mesh, train::checkpoint_meta(gpt2->setup), good_);
  } catch (const UserError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("family: llama in the checkpoint, gpt2 in this run"), std::string::npos) << message;
}

TEST_F(Validation, MissingDataset) {
  const std::string p = damaged("missing.h5", [](const std::string& path) {
    const hid_t f = open_rw(path);
    H5Ldelete(f, "/optim/exp_avg/model.layers.1.mlp.up_proj.weight", H5P_DEFAULT);
    H5Fclose(f);
  });
  expect_rejected(p, {"lacks the dataset /optim/exp_avg/model.layers.1.mlp.up_proj.weight"});
}

TEST_F(Validation, WrongShape) {
  const std::string p = damaged("shape.h5", [](const std::string& path) {
    const hid_t f = open_rw(path);
    H5Ldelete(f, "/model/model.norm.weight", H5P_DEFAULT);
    const hsize_t dims[1] = {65};
    const hid_t sp = H5Screate_simple(1, dims, nullptr);
    const hid_t d = H5Dcreate2(f, "/model/model.norm.weight", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(d);
    H5Sclose(sp);
    H5Fclose(f);
  });
  expect_rejected(p, {"dataset /model/model.norm.weight has shape (65), expected (64)"});
}

TEST_F(Validation, WrongDtype) {
  const std::string p = damaged("dtype.h5", [](const std::string& path) {
    const hid_t f = open_rw(path);
    H5Ldelete(f, "/optim/exp_avg_sq/model.norm.weight", H5P_DEFAULT);
    const hsize_t dims[1] = {64};
    const hid_t sp = H5Screate_simple(1, dims, nullptr);
    const hid_t d =
        H5Dcreate2(f, "/optim/exp_avg_sq/model.norm.weight", H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(d);
    H5Sclose(sp);
    H5Fclose(f);
  });
  expect_rejected(p, {"dataset /optim/exp_avg_sq/model.norm.weight has dtype float64, expected float32"});
}

TEST_F(Validation, InitFromAcceptsOnlyMatchingShapes) {
  // load_weights checks shapes (not the full model description) and zeroes the moments.
  checkpoint::load_weights(*job_->engine, *job_->mesh, job_->setup.spec.dims, good_, 1234);
  EXPECT_EQ(count_mismatches(*job_->engine, 0, expected_state(*job_->engine, 0)), 0);
  const auto zeros = [&] {
    std::vector<std::vector<float>> z;
    for (int u = 0; u < job_->engine->num_units(); ++u) z.emplace_back(job_->engine->state(u).numel, 0.0f);
    return z;
  }();
  EXPECT_EQ(count_mismatches(*job_->engine, 1, zeros), 0);
  EXPECT_EQ(count_mismatches(*job_->engine, 2, zeros), 0);
  auto wide = make_job(world(), tiny_config("llama", 128), mesh_shape_of(world().size()), Strategy::FullShard);
  std::string message;
  try {
    checkpoint::load_weights(*wide->engine, *wide->mesh, wide->setup.spec.dims, good_, 1234);
  } catch (const UserError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("has shape (264, 64), expected (264, 128)"), std::string::npos) << message;
  // A checkpoint directory means its newest checkpoint.
  checkpoint::load_weights(*job_->engine, *job_->mesh, job_->setup.spec.dims, dir_, 1234);
  EXPECT_EQ(count_mismatches(*job_->engine, 0, expected_state(*job_->engine, 0)), 0);
}

}  // namespace
}  // namespace meshtrain::test
