// Tensor checksums (doc/checkpoints.md, "Checksums"): every dataset's `crc32c` attribute
// is the CRC-32C of its bytes as stored, the same number whatever mesh wrote it; every
// mesh loads every other mesh's file with the checksums verified; a byte flipped in the
// file (first, middle and last byte of a tensor, first and last byte of rank 0's written
// piece, in weights, moments and a 1-D tensor) is refused by every load path that reads
// the tensor -- resume, a forward-only engine (eval, generate), init_from, convert -- with
// one sentence naming the file and the dataset; a file without checksums (written
// before them) loads.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <fstream>
#include <map>

#include "ckpt_test_util.hpp"
#include "checkpoint/checkpoint.hpp"
#include "checkpoint/export.hpp"
#include "comm/collectives.hpp"
#include "core/crc32c.hpp"
#include "core/error.hpp"

namespace meshtrain::test {
namespace {

namespace fs = std::filesystem;
using parallel::Strategy;

struct MeshCase {
  MeshShape shape;
  Strategy strategy;
  std::string str() const { return shape.str() + "-" + parallel::strategy_name(strategy); }
};

/// Meshes of the whole test job (tp splits columns, rows and fused projections; tp=4 makes
/// llama's k/v projections replicated over tp; hybrid and no_shard replicate the state).
std::vector<MeshCase> meshes(int n) {
  if (n == 1) return {{{1, 1, 1}, Strategy::FullShard}};
  if (n == 2)
    return {{{1, 2, 1}, Strategy::FullShard}, {{1, 1, 2}, Strategy::FullShard}, {{2, 1, 1}, Strategy::HybridShard}};
  return {{{1, 2, 2}, Strategy::FullShard},
          {{2, 2, 1}, Strategy::HybridShard},
          {{1, 4, 1}, Strategy::NoShard},
          {{1, 1, 4}, Strategy::FullShard}};
}

/// name -> (crc32c attribute, CRC-32C of the values read back), every dataset of the three
/// tensor groups, read serially (rank 0).
std::map<std::string, std::pair<std::uint32_t, std::uint32_t>> stored_and_actual(const std::string& path) {
  std::map<std::string, std::pair<std::uint32_t, std::uint32_t>> out;
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(f, 0) << path;
  for (const char* g : {"/model", "/optim/exp_avg", "/optim/exp_avg_sq"}) {
    const hid_t grp = H5Gopen2(f, g, H5P_DEFAULT);
    std::vector<std::string> names;
    H5Literate(grp, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr,
               [](hid_t, const char* name, const H5L_info_t*, void* v) -> herr_t {
                 static_cast<std::vector<std::string>*>(v)->emplace_back(name);
                 return 0;
               },
               &names);
    for (const std::string& n : names) {
      const hid_t ds = H5Dopen2(grp, n.c_str(), H5P_DEFAULT);
      const hid_t sp = H5Dget_space(ds);
      std::vector<float> v(static_cast<std::size_t>(H5Sget_simple_extent_npoints(sp)));
      EXPECT_GE(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
      std::uint32_t attr = 0;
      const hid_t a = H5Aopen(ds, "crc32c", H5P_DEFAULT);
      EXPECT_GE(a, 0) << n << " has no crc32c attribute";
      if (a >= 0) {
        H5Aread(a, H5T_NATIVE_UINT32, &attr);
        H5Aclose(a);
      }
      out[std::string(g) + "/" + n] = {attr, crc32c::value(v.data(), v.size() * sizeof(float))};
      H5Sclose(sp);
      H5Dclose(ds);
    }
    H5Gclose(grp);
  }
  H5Fclose(f);
  return out;
}

/// Byte offset in the file of dataset `ds` (contiguous storage), rank 0.
std::uint64_t dataset_offset(const std::string& path, const std::string& ds) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, ds.c_str(), H5P_DEFAULT);
  const haddr_t at = H5Dget_offset(d);
  H5Dclose(d);
  H5Fclose(f);
  EXPECT_NE(at, HADDR_UNDEF) << ds;
  return at;
}

/// Deletes the checksum attributes, as a file written before them has none (rank 0).
void strip_checksums(const std::string& path) {
  const auto datasets = stored_and_actual(path);
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(H5Adelete(f, "checksum"), 0);
  for (const auto& [name, v] : datasets) {
    (void)v;
    const hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
    ASSERT_GE(H5Adelete(d, "crc32c"), 0) << name;
    H5Dclose(d);
  }
  H5Fclose(f);
}

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

std::unique_ptr<parallel::FsdpEngine<float>> forward_only_engine(const Job& job) {
  parallel::FsdpOptions opt;
  opt.strategy = job.setup.strategy;
  opt.forward_only = true;
  return std::make_unique<parallel::FsdpEngine<float>>(model::build_param_specs(job.setup.spec.dims, job.setup.mesh_shape.tp),
                                                       model::num_units(job.setup.spec.dims), *job.mesh, opt);
}

TEST(CheckpointChecksum, TheSameCrcOfEachTensorFromEveryMeshAndEveryMeshLoadsEveryFile) {
  const std::string dir = fresh_dir(world(), "checksum_meshes");
  for (const std::string family : {"gpt2", "llama"}) {
    const Config cfg = tiny_config(family);
    std::vector<std::string> files;
    for (const MeshCase& w : meshes(world().size())) {
      auto job = make_job(world(), cfg, w.shape, w.strategy);
      fill_known(*job->engine);
      checkpoint::TrainState st;
      st.step = 1;
      files.push_back(checkpoint::save(*job->engine, *job->mesh, train::checkpoint_meta(job->setup), st, dir + "/" + family + "-" + w.str()).path);
    }
    if (world().rank() == 0) {
      // The known values do not depend on the mesh, so neither do the tensors' bytes.
      const auto first = stored_and_actual(files[0]);
      EXPECT_GT(first.size(), 30u);
      for (const std::string& f : files) {
        const auto got = stored_and_actual(f);
        for (const auto& [name, v] : got) {
          EXPECT_EQ(v.first, v.second) << f << ": " << name << " stored checksum is not the CRC-32C of its bytes";
          EXPECT_EQ(v.first, first.at(name).first) << f << ": " << name << " checksum depends on the writer's mesh";
        }
      }
    }
    MPI_Barrier(world().get());
    for (const MeshCase& r : meshes(world().size())) {
      auto job = make_job(world(), cfg, r.shape, r.strategy);
      for (const std::string& f : files) {
        fill_known(*job->engine, 7);
        EXPECT_EQ(message_of([&] { checkpoint::load(*job->engine, *job->mesh, train::checkpoint_meta(job->setup), f); }), "")
            << r.str() << " loading " << f;
        for (int k = 0; k < 3; ++k)
          EXPECT_EQ(count_mismatches(*job->engine, k, expected_state(*job->engine, k)), 0) << r.str() << " " << f;
        auto fwd = forward_only_engine(*job);
        EXPECT_EQ(message_of([&] { checkpoint::load(*fwd, *job->mesh, train::checkpoint_meta(job->setup), f); }), "") << r.str() << " " << f;
        EXPECT_EQ(message_of([&] { checkpoint::load_weights(*job->engine, *job->mesh, job->setup.spec.dims, f, 1); }), "");
      }
    }
  }
}

class FlippedByte : public ::testing::Test {
 protected:
  void SetUp() override {
    job_ = make_job(world(), tiny_config("llama"), meshes(world().size())[0].shape, meshes(world().size())[0].strategy);
    dir_ = fresh_dir(world(), "checksum_flips");
    fill_known(*job_->engine);
    checkpoint::TrainState st;
    st.step = 3;
    good_ = checkpoint::save(*job_->engine, *job_->mesh, train::checkpoint_meta(job_->setup), st, dir_).path;
  }

  /// Byte ranges [first, last] of rank 0's written piece of each parameter (the logical
  /// elements of its owned range), as flat element indices of the tensor.
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> rank0_pieces() const {
    std::map<std::string, std::pair<std::int64_t, std::int64_t>> out;
    const auto& eng = *job_->engine;
    for (int u = 0; u < eng.num_units(); ++u)
      model::for_each_global_run(eng.specs(), eng.layouts()[u], eng.tp_size(), eng.tp_rank(), eng.owned_begin(u),
                                 eng.owned_begin(u) + eng.owned_numel(u),
                                 [&](const model::ParamSlot& slot, std::int64_t, std::int64_t row, std::int64_t col,
                                     std::int64_t n) {
                                   const model::ParamSpec& p = eng.specs()[slot.spec];
                                   const std::int64_t a = row * p.cols() + col, b = a + n - 1;
                                   auto it = out.find(p.name);
                                   if (it == out.end()) out[p.name] = {a, b};
                                   else it->second = {std::min(it->second.first, a), std::max(it->second.second, b)};
                                 });
    return out;
  }

  std::unique_ptr<Job> job_;
  std::string dir_, good_;
};

TEST_F(FlippedByte, IsRefusedByEveryLoadPathThatReadsTheTensorNamingIt) {
  const auto pieces = rank0_pieces();  // rank 0's view; only rank 0 edits files
  struct Target {
    const char* group;
    const char* name;
  };
  const Target targets[] = {{"/model", "model.embed_tokens.weight"},
                            {"/model", "model.layers.1.self_attn.k_proj.weight"},
                            {"/model", "model.norm.weight"},
                            {"/optim/exp_avg", "model.layers.0.mlp.down_proj.weight"},
                            {"/optim/exp_avg_sq", "model.layers.1.input_layernorm.weight"}};
  auto fwd = forward_only_engine(*job_);
  // A LoRA run whose checkpoint.init_from is the file: its /model becomes the frozen base
  // (the frozen values' own verification: replicas, no owned range).
  Config lora_cfg = tiny_config("llama");
  lora_cfg.model.lora_rank = 2;
  auto lora = make_job(world(), lora_cfg, meshes(world().size())[0].shape, meshes(world().size())[0].strategy);
  ASSERT_EQ(message_of([&] { checkpoint::load_weights(*lora->engine, *lora->mesh, lora->setup.spec.dims, good_, 1); }), "");
  int cases = 0;
  for (const Target& t : targets) {
    const std::string ds = std::string(t.group) + "/" + t.name;
    const model::ParamSpec* spec = nullptr;
    for (const model::ParamSpec& p : job_->engine->specs())
      if (p.name == t.name) spec = &p;
    ASSERT_NE(spec, nullptr) << t.name;
    const std::int64_t bytes = spec->numel() * 4;
    // First, middle (an exponent byte) and last byte of the tensor; first and last byte of
    // rank 0's piece, which with several ranks lie inside the tensor.
    std::vector<std::int64_t> at = {0, (bytes / 8) * 4 + 3, bytes - 1};
    if (world().rank() == 0 && pieces.count(t.name)) {
      at.push_back(pieces.at(t.name).first * 4);
      at.push_back(pieces.at(t.name).second * 4 + 3);
    }
    int n_at = broadcast_value(world(), static_cast<int>(at.size()));
    at.resize(static_cast<std::size_t>(n_at));
    all_reduce_in_place(world(), at.data(), n_at, ReduceOp::Max);  // rank 0's positions everywhere
    for (std::size_t i = 0; i < at.size(); ++i) {
      const std::string path = dir_ + "/flip_" + std::to_string(cases++) + ".h5";
      if (world().rank() == 0) {
        fs::copy_file(good_, path, fs::copy_options::overwrite_existing);
        std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
        const std::uint64_t off = dataset_offset(path, ds) + static_cast<std::uint64_t>(at[i]);
        f.seekg(static_cast<std::streamoff>(off));
        char c = 0;
        f.get(c);
        c = static_cast<char>(c ^ (i % 2 ? 0x01 : 0x40));  // one bit, in the exponent where it is byte 3
        f.seekp(static_cast<std::streamoff>(off));
        f.put(c);
      }
      MPI_Barrier(world().get());
      const bool weight = std::string(t.group) == "/model";
      const auto check = [&](const char* what, const std::string& m, bool reads_it) {
        SCOPED_TRACE(std::string(what) + ": " + ds + " byte " + std::to_string(at[i]));
        if (!reads_it) {
          EXPECT_EQ(m, "") << "does not read the moments, yet refused";
          return;
        }
        EXPECT_NE(m.find(path), std::string::npos) << m;
        EXPECT_NE(m.find("dataset " + ds + " does not match its checksum"), std::string::npos) << m;
        EXPECT_EQ(m.find('\n'), std::string::npos) << m;
      };
      check("resume", message_of([&] { checkpoint::load(*job_->engine, *job_->mesh, train::checkpoint_meta(job_->setup), path); }), true);
      check("eval/generate", message_of([&] { checkpoint::load(*fwd, *job_->mesh, train::checkpoint_meta(job_->setup), path); }), weight);
      check("init_from",
            message_of([&] { checkpoint::load_weights(*job_->engine, *job_->mesh, job_->setup.spec.dims, path, 1); }),
            weight);
      check("init_from of a LoRA run (base weights)",
            message_of([&] { checkpoint::load_weights(*lora->engine, *lora->mesh, lora->setup.spec.dims, path, 1); }),
            weight);
      if (world().rank() == 0)
        check("convert", message_of([&] { checkpoint::export_safetensors(path, path + ".hf"); }), weight);
      // convert writes nothing when it refuses.
      if (world().rank() == 0 && weight) EXPECT_FALSE(fs::exists(path + ".hf/model.safetensors"));
      MPI_Barrier(world().get());
    }
  }
}

TEST_F(FlippedByte, AFileWithoutChecksumsStillLoads) {
  const std::string path = dir_ + "/legacy.h5";
  if (world().rank() == 0) {
    fs::copy_file(good_, path, fs::copy_options::overwrite_existing);
    strip_checksums(path);
  }
  MPI_Barrier(world().get());
  fill_known(*job_->engine, 5);
  EXPECT_EQ(message_of([&] { checkpoint::load(*job_->engine, *job_->mesh, train::checkpoint_meta(job_->setup), path); }), "");
  for (int k = 0; k < 3; ++k) EXPECT_EQ(count_mismatches(*job_->engine, k, expected_state(*job_->engine, k)), 0);
  auto fwd = forward_only_engine(*job_);
  EXPECT_EQ(message_of([&] { checkpoint::load(*fwd, *job_->mesh, train::checkpoint_meta(job_->setup), path); }), "");
  EXPECT_EQ(message_of([&] { checkpoint::load_weights(*job_->engine, *job_->mesh, job_->setup.spec.dims, path, 1); }), "");
  if (world().rank() == 0) EXPECT_EQ(message_of([&] { checkpoint::export_safetensors(path, dir_ + "/legacy.hf"); }), "");
}

TEST_F(FlippedByte, ALostChecksumAttributeIsRefused) {
  // The file records checksums, so one dataset without its own is damage, not age.
  const std::string path = dir_ + "/lost.h5", ds = "/optim/exp_avg/model.layers.0.self_attn.q_proj.weight";
  if (world().rank() == 0) {
    fs::copy_file(good_, path, fs::copy_options::overwrite_existing);
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hid_t d = H5Dopen2(f, ds.c_str(), H5P_DEFAULT);
    ASSERT_GE(H5Adelete(d, "crc32c"), 0);
    H5Dclose(d);
    H5Fclose(f);
  }
  MPI_Barrier(world().get());
  const std::string m = message_of([&] { checkpoint::load(*job_->engine, *job_->mesh, train::checkpoint_meta(job_->setup), path); });
  EXPECT_NE(m.find("checkpoint " + path + ": dataset " + ds + " has no valid checksum"), std::string::npos) << m;
}

}  // namespace
}  // namespace meshtrain::test
