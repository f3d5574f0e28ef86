#pragma once
/// \brief Helpers shared by the tests: the runtime, host<->device copies, reference math.

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "config/config.hpp"
#include "core/memory.hpp"
#include "model/model_dims.hpp"
#include "runtime/runtime.hpp"

namespace meshtrain::test {

void set_runtime(Runtime* rt);
Runtime& runtime();
/// The world communicator of the test job.
const MpiComm& world();

/// Copies a host vector into a new device Buffer and back.
template <class T>
Buffer<T> to_device(const std::vector<T>& host, MemCategory cat = MemCategory::Workspace) {
  Buffer<T> b(host.size(), cat);
  if (!host.empty()) {
    Kokkos::View<const T*, HostMem, Kokkos::MemoryTraits<Kokkos::Unmanaged>> h(host.data(), host.size());
    Kokkos::deep_copy(b.view(), h);
  }
  return b;
}
template <class T>
std::vector<T> to_host(const T* device, std::size_t n) {
  std::vector<T> host(n);
  if (n) {
    UView<T, HostMem> h(host.data(), n);
    UView<T> d(const_cast<T*>(device), n);
    Kokkos::deep_copy(h, d);
  }
  return host;
}
template <class T>
std::vector<T> to_host(const Buffer<T>& b) {
  return to_host(b.data(), b.size());
}

/// The dims of a GPT-2 model (tied embeddings, ffn 4 x d_model), for the planner and
/// cost-model tests that need only a shape.
/// \brief The tests' tiny model: `family` ("gpt2" with tied embeddings, "llama" with an
/// untied head), `vocab_size` ids, d_model 64, 2 layers of 4 heads, model.max_seq_len and
/// train.seq_len `seq_len`; every other key at its default. Each test sets what it varies
/// (kv heads, ffn_dim, the mesh, the data) on top.
Config tiny_model_config(const std::string& family, int seq_len = 32, int vocab_size = 256);

model::ModelDims gpt2_dims(int vocab_size, int d_model, int n_layers, int n_heads, int max_seq_len);
/// A Llama of these sizes (grouped-query heads: n_kv_heads of them), the other keys default.
model::ModelDims llama_dims(int vocab_size, int d_model, int n_layers, int n_heads, int n_kv_heads, int max_seq_len);

/// n normally distributed values (seeded).
std::vector<double> random_normal(std::size_t n, std::uint64_t seed, double stddev = 1.0);
/// Relative error |a-b| / max(|a|, |b|, floor).
double rel_err(double a, double b, double floor = 1e-12);

}  // namespace meshtrain::test
