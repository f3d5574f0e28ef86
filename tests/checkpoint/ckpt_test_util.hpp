#pragma once
// Checkpoint tests: an FSDP engine on a mesh over any sub-communicator of the test job,
// and a known value for every logical element of every state array so that a load can be
// checked bit for bit against what any other mesh saved.

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "app/run_spec_resolve.hpp"
#include "config/config.hpp"
#include "model/init.hpp"
#include "parallel/device_mesh.hpp"
#include "parallel/fsdp.hpp"
#include "runtime/mesh.hpp"
#include "plan/run_setup.hpp"
#include "train/checkpoint_meta.hpp"
#include "test_support.hpp"

namespace meshtrain::test {

/// The tiny configs of inputs/tiny-{gpt2,llama}.ini (GQA and an untied head for llama).
inline Config tiny_config(const std::string& family, int d_model = 64) {
  Config c = tiny_model_config(family, 32, 264);
  c.model.d_model = d_model;
  c.model.max_seq_len = 64;
  if (family == "llama") {
    c.model.n_kv_heads = 2;
    c.model.ffn_dim = 128;
  }
  c.train.micro_batch = 2;
  return c;
}

/// A model on `shape` over the first shape.world() ranks of `parent` (nullptr elsewhere).
struct Job {
  MpiComm comm;
  std::unique_ptr<parallel::DeviceMesh> mesh;
  plan::RunSetup setup;
  std::unique_ptr<parallel::FsdpEngine<float>> engine;

  bool member() const { return engine != nullptr; }
};

inline std::unique_ptr<Job> make_job(const MpiComm& parent, const Config& cfg, const MeshShape& shape,
                                     parallel::Strategy strategy) {
  auto job = std::make_unique<Job>();
  const int n = shape.world();
  job->comm = parent.split(parent.rank() < n ? 0 : MPI_UNDEFINED, parent.rank());
  if (!job->comm.valid()) return job;
  job->mesh = std::make_unique<parallel::DeviceMesh>(job->comm, shape, Backend::Mpi);
  plan::RunSetup& s = job->setup;
  s.spec = app::resolve_spec(cfg);
  s.config_ini = config_to_ini(cfg);
  s.mesh_shape = shape;
  s.strategy = strategy;
  s.batch = s.spec.batch.resolved(shape.dp());
  parallel::FsdpOptions opt;
  opt.strategy = strategy;
  job->engine = std::make_unique<parallel::FsdpEngine<float>>(model::build_param_specs(s.spec.dims, shape.tp),
                                                              model::num_units(s.spec.dims), *job->mesh, opt);
  return job;
}

/// An exactly representable value for element (row, col) of parameter `name` in state
/// array k (0 master, 1 exp_avg, 2 exp_avg_sq): distinct between neighbours, arrays and
/// parameters, so a misplaced element cannot go unnoticed. `salt` varies the whole set.
inline float known_value(const std::string& name, int k, std::int64_t row, std::int64_t col, std::int64_t cols,
                         std::uint64_t salt = 0) {
  std::uint64_t h = 1469598103934665603ull ^ salt;
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  const std::uint64_t v = (h + static_cast<std::uint64_t>(k) * 7919 + static_cast<std::uint64_t>(row * cols + col)) %
                          (1u << 23);
  return static_cast<float>(v) * (k == 0 ? 1e-6f : k == 1 ? -1e-7f : 1e-8f) + (k == 2 ? 1e-9f : 0.0f);
}

/// The expected contents of every unit's state array k on this rank (padding 0).
inline std::vector<std::vector<float>> expected_state(const parallel::FsdpEngine<float>& eng, int k,
                                                      std::uint64_t salt = 0) {
  std::vector<std::vector<float>> out;
  for (int u = 0; u < eng.num_units(); ++u) {
    const parallel::UnitState& st = eng.state(u);
    std::vector<float> host(static_cast<std::size_t>(st.numel), 0.0f);
    model::for_each_global_run(eng.specs(), eng.layouts()[u], eng.tp_size(), eng.tp_rank(), st.begin,
                               st.begin + st.numel,
                               [&](const model::ParamSlot& slot, std::int64_t off, std::int64_t row, std::int64_t col,
                                   std::int64_t n) {
                                 const model::ParamSpec& p = eng.specs()[slot.spec];
                                 for (std::int64_t j = 0; j < n; ++j)
                                   host[off + j] = known_value(p.name, k, row, col + j, p.cols(), salt);
                               });
    out.push_back(std::move(host));
  }
  return out;
}

inline Buffer<float>& state_array(parallel::UnitState& st, int k) {
  return k == 0 ? st.master : k == 1 ? st.exp_avg : st.exp_avg_sq;
}

/// Fills master and both moments with the known values.
inline void fill_known(parallel::FsdpEngine<float>& eng, std::uint64_t salt = 0) {
  for (int k = 0; k < 3; ++k) {
    const auto host = expected_state(eng, k, salt);
    for (int u = 0; u < eng.num_units(); ++u) {
      Buffer<float>& b = state_array(eng.state(u), k);
      Kokkos::deep_copy(b.view(), UView<float, HostMem>(const_cast<float*>(host[u].data()), host[u].size()));
    }
  }
  eng.params_updated();
}

inline void zero_state(parallel::FsdpEngine<float>& eng) {
  for (int u = 0; u < eng.num_units(); ++u)
    for (int k = 0; k < 3; ++k) state_array(eng.state(u), k).zero();
}

/// Number of elements of state array k that differ bitwise from `expected`.
inline std::int64_t count_mismatches(const parallel::FsdpEngine<float>& eng, int k,
                                     const std::vector<std::vector<float>>& expected) {
  std::int64_t bad = 0;
  for (int u = 0; u < eng.num_units(); ++u) {
    auto& st = const_cast<parallel::UnitState&>(eng.state(u));
    const std::vector<float> got = to_host(state_array(st, k));
    for (std::size_t i = 0; i < got.size(); ++i)
      bad += std::memcmp(&got[i], &expected[u][i], sizeof(float)) != 0 ? 1 : 0;
  }
  return bad;
}

/// A fresh directory for one test (rank 0 creates it; every rank of `comm` waits).
inline std::string fresh_dir(const MpiComm& comm, const std::string& name) {
  const std::string dir = "ckpt_test_np" + std::to_string(comm.size()) + "/" + name;
  if (comm.rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  MPI_Barrier(comm.get());
  return dir;
}

}  // namespace meshtrain::test
