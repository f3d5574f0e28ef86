#include "kernels/cudnn_attention.hpp"

#include <cuda_runtime.h>
#include <cudnn.h>
#include <cudnn_frontend.h>

#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/format.hpp"

namespace meshtrain::kernels::cudnn {
namespace {

namespace fe = cudnn_frontend;

// Tensor ids of the variant packs (one namespace for both directions).
enum Uid : std::int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("cuDNN attention: " + what +
                           " (gpu.attention=kokkos runs the Kokkos attention instead)");
}

void check(const fe::error_object& e, const char* what) {
  if (!e.is_good()) fail(strprintf("%s: %s", what, e.err_msg.c_str()));
}

void check(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS) fail(strprintf("%s: %s", what, cudnnGetErrorString(s)));
}

/// One handle per thread (cuDNN handles are not thread-safe); bound to the caller's stream
/// before each execution.
cudnnHandle_t handle() {
  struct Handle {
    cudnnHandle_t h = nullptr;
    Handle() { check(cudnnCreate(&h), "cudnnCreate"); }
    ~Handle() {
      if (h) cudnnDestroy(h);
    }
  };
  thread_local Handle h;
  return h.h;
}

std::vector<std::int64_t> vec(const std::array<std::int64_t, 4>& a) { return {a[0], a[1], a[2], a[3]}; }

std::shared_ptr<fe::graph::Tensor_attributes> tensor(fe::graph::Graph& g, const char* name, Uid uid,
                                                     const SdpaTensor& t) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(vec(t.dim)).set_stride(
      vec(t.stride)));
}

void set_output(const std::shared_ptr<fe::graph::Tensor_attributes>& out, Uid uid, const SdpaTensor& t) {
  out->set_output(true).set_uid(uid).set_dim(vec(t.dim)).set_stride(vec(t.stride));
}

std::shared_ptr<fe::graph::Graph> new_graph() {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

/// Validates, lowers and plans a graph (the slow part, once per key).
void build(fe::graph::Graph& g) {
  check(g.validate(), "validate");
  check(g.build_operation_graph(handle()), "build_operation_graph");
  check(g.create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans");
  check(g.check_support(handle()), "check_support");
  check(g.build_plans(handle()), "build_plans");
}

/// Everything a graph depends on: the operands' dims and strides (offsets are applied to the
/// pointers), the scale, the direction and whether statistics are written.
using Key = std::tuple<std::vector<std::int64_t>, float, int>;

Key key_of(const SdpaLayout& L, float scale, int kind) {
  std::vector<std::int64_t> k;
  for (const SdpaTensor* t : {&L.q, &L.k, &L.v, &L.o, &L.stats}) {
    k.insert(k.end(), t->dim.begin(), t->dim.end());
    k.insert(k.end(), t->stride.begin(), t->stride.end());
  }
  return {k, scale, kind};
}

enum Kind { kForwardTraining = 0, kForwardInference = 1, kBackward = 2 };

std::shared_ptr<fe::graph::Graph> make_forward(const SdpaLayout& L, float scale, bool stats) {
  auto g = new_graph();
  auto q = tensor(*g, "q", kQ, L.q), k = tensor(*g, "k", kK, L.k), v = tensor(*g, "v", kV, L.v);
  auto opt = fe::graph::SDPA_attributes()
                 .set_name("meshtrain_causal_attention")
                 .set_generate_stats(stats)
                 .set_attn_scale(scale)
                 .set_causal_mask(true);  // top-left diagonal: query i sees keys [0, i]
  auto [o, lse] = g->sdpa(q, k, v, opt);
  set_output(o, kO, L.o);
  if (stats) {
    set_output(lse, kStats, L.stats);
    lse->set_data_type(fe::DataType_t::FLOAT);
  }
  build(*g);
  return g;
}

std::shared_ptr<fe::graph::Graph> make_backward(const SdpaLayout& L, float scale) {
  auto g = new_graph();
  auto q = tensor(*g, "q", kQ, L.q), k = tensor(*g, "k", kK, L.k), v = tensor(*g, "v", kV, L.v);
  auto o = tensor(*g, "o", kO, L.o), d_o = tensor(*g, "dO", kDO, L.o);
  auto lse = tensor(*g, "stats", kStats, L.stats);
  lse->set_data_type(fe::DataType_t::FLOAT);
  auto opt = fe::graph::SDPA_backward_attributes()
                 .set_name("meshtrain_causal_attention_backward")
                 .set_attn_scale(scale)
                 .set_causal_mask(true)
                 // Bitwise reproducible gradients (the Kokkos path's are too): no atomics in dQ.
                 .set_deterministic_algorithm(true);
  auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, d_o, lse, opt);
  set_output(dq, kDQ, L.q);
  set_output(dk, kDK, L.k);
  set_output(dv, kDV, L.v);
  build(*g);
  return g;
}

/// The process's graphs, built on first use.
std::shared_ptr<fe::graph::Graph> cached(const SdpaLayout& L, float scale, Kind kind) {
  static std::mutex mutex;
  static std::map<Key, std::shared_ptr<fe::graph::Graph>> graphs;
  std::lock_guard<std::mutex> lock(mutex);
  const Key key = key_of(L, scale, kind);
  auto it = graphs.find(key);
  if (it != graphs.end()) return it->second;
  auto g = kind == kBackward ? make_backward(L, scale) : make_forward(L, scale, kind == kForwardTraining);
  graphs.emplace(key, g);
  return g;
}

std::size_t workspace_of(const fe::graph::Graph& g) {
  std::int64_t bytes = 0;
  check(g.get_workspace_size(bytes), "get_workspace_size");
  return static_cast<std::size_t>(bytes);
}

void execute(const fe::graph::Graph& g, std::unordered_map<std::int64_t, void*>& pack, void* workspace,
             void* stream) {
  check(cudnnSetStream(handle(), static_cast<cudaStream_t>(stream)), "cudnnSetStream");
  check(g.execute(handle(), pack, workspace), "execute");
}

/// bf16 operand pointer + the layout's element offset.
void* at(const void* p, const SdpaTensor& t) {
  return const_cast<char*>(static_cast<const char*>(p)) + 2 * t.offset;
}

}  // namespace

std::size_t sdpa_forward_workspace(const SdpaLayout& L, float scale, bool stats) {
  if (!L.supported) fail("unsupported shape: " + L.why_not);
  return workspace_of(*cached(L, scale, stats ? kForwardTraining : kForwardInference));
}

void sdpa_forward(const SdpaLayout& L, float scale, const void* q, const void* k, const void* v, void* out,
                  float* lse, void* workspace, void* stream) {
  if (!L.supported) fail("unsupported shape: " + L.why_not);
  auto g = cached(L, scale, lse ? kForwardTraining : kForwardInference);
  std::unordered_map<std::int64_t, void*> pack = {
      {kQ, at(q, L.q)}, {kK, at(k, L.k)}, {kV, at(v, L.v)}, {kO, at(out, L.o)}};
  if (lse) pack[kStats] = lse;
  execute(*g, pack, workspace, stream);
}

std::size_t sdpa_backward_workspace(const SdpaLayout& L, float scale) {
  if (!L.supported) fail("unsupported shape: " + L.why_not);
  return workspace_of(*cached(L, scale, kBackward));
}

void sdpa_backward(const SdpaLayout& L, float scale, const void* q, const void* k, const void* v, const void* out,
                   const void* dout, const float* lse, void* dq, void* dk, void* dv, void* workspace, void* stream) {
  if (!L.supported) fail("unsupported shape: " + L.why_not);
  auto g = cached(L, scale, kBackward);
  std::unordered_map<std::int64_t, void*> pack = {
      {kQ, at(q, L.q)},     {kK, at(k, L.k)},  {kV, at(v, L.v)},   {kO, at(out, L.o)},
      {kDO, at(dout, L.o)}, {kStats, const_cast<float*>(lse)},     {kDQ, at(dq, L.q)},
      {kDK, at(dk, L.k)},   {kDV, at(dv, L.v)}};
  execute(*g, pack, workspace, stream);
}

std::string version_string() {
  const std::size_t v = cudnnGetVersion();
  return strprintf("cuDNN %zu.%zu.%zu (frontend %d.%d.%d)", v / 10000, (v / 100) % 100, v % 100,
                   CUDNN_FRONTEND_MAJOR_VERSION, CUDNN_FRONTEND_MINOR_VERSION, CUDNN_FRONTEND_PATCH_VERSION);
}

}  // namespace meshtrain::kernels::cudnn
