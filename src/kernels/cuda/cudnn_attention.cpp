#include "kernels/cudnn_attention.hpp"

#include <cuda_runtime.h>
#include <cudnn.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/format.hpp"
#include "kernels/sdpa_ragged.hpp"

namespace meshtrain::kernels::cudnn {
namespace {

namespace fe = cudnn_frontend;

// Tensor ids of the variant packs (one namespace for both directions); the ragged ones only
// in graphs of packed rows (kernels/sdpa_ragged.hpp).
enum Uid : std::int64_t {
  kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV,
  kSeqLenQ, kSeqLenKV, kOffQ, kOffK, kOffV, kOffO, kOffStats
};

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

/// The ragged index tensors of one graph (null members in a dense graph): seq_len_q/kv
/// (batch, 1, 1, 1) int32 and one (batch + 1, 1, 1, 1) int64 offset tensor per operand.
struct RaggedTensors {
  std::shared_ptr<fe::graph::Tensor_attributes> seq_q, seq_kv, q, k, v, o, stats;
};

std::shared_ptr<fe::graph::Tensor_attributes> index_tensor(fe::graph::Graph& g, const char* name, Uid uid,
                                                           std::int64_t n, fe::DataType_t type) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({n, 1, 1, 1}).set_stride(
      {1, 1, 1, 1}).set_data_type(type));
}

RaggedTensors ragged_tensors(fe::graph::Graph& g, const SdpaLayout& L) {
  RaggedTensors r;
  if (!L.ragged) return r;
  const std::int64_t b = L.q.dim[0];
  r.seq_q = index_tensor(g, "seq_len_q", kSeqLenQ, b, fe::DataType_t::INT32);
  r.seq_kv = index_tensor(g, "seq_len_kv", kSeqLenKV, b, fe::DataType_t::INT32);
  r.q = index_tensor(g, "q_ragged_offset", kOffQ, b + 1, fe::DataType_t::INT64);
  r.k = index_tensor(g, "k_ragged_offset", kOffK, b + 1, fe::DataType_t::INT64);
  r.v = index_tensor(g, "v_ragged_offset", kOffV, b + 1, fe::DataType_t::INT64);
  r.o = index_tensor(g, "o_ragged_offset", kOffO, b + 1, fe::DataType_t::INT64);
  r.stats = index_tensor(g, "stats_ragged_offset", kOffStats, b + 1, fe::DataType_t::INT64);
  return r;
}

/// Ragged offset of a tensor, when the graph has them.
void ragged(const std::shared_ptr<fe::graph::Tensor_attributes>& t,
            const std::shared_ptr<fe::graph::Tensor_attributes>& offset) {
  if (offset) t->set_ragged_offset(offset);
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
/// pointers), ragged or not (and the tokens bounding a ragged workspace), the scale, the
/// direction and whether statistics are written.
using Key = std::tuple<std::vector<std::int64_t>, float, int>;

Key key_of(const SdpaLayout& L, float scale, int kind) {
  std::vector<std::int64_t> k = {L.ragged ? 1 : 0, L.ragged_tokens};
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
  const RaggedTensors r = ragged_tensors(*g, L);
  ragged(q, r.q), ragged(k, r.k), ragged(v, r.v);
  auto opt = fe::graph::SDPA_attributes()
                 .set_name("meshtrain_causal_attention")
                 .set_generate_stats(stats)
                 .set_attn_scale(scale)
                 .set_causal_mask(true);  // top-left diagonal: query i sees keys [0, i]
  // Packed rows: each document a sequence of seq_len tokens; the padding mask also hides keys
  // j >= seq_len (ragged offsets need it), rows i >= seq_len are not computed.
  if (L.ragged) opt.set_padding_mask(true).set_seq_len_q(r.seq_q).set_seq_len_kv(r.seq_kv);
  auto [o, lse] = g->sdpa(q, k, v, opt);
  set_output(o, kO, L.o);
  ragged(o, r.o);
  if (stats) {
    set_output(lse, kStats, L.stats);
    lse->set_data_type(fe::DataType_t::FLOAT);
    ragged(lse, r.stats);
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
  const RaggedTensors r = ragged_tensors(*g, L);
  ragged(q, r.q), ragged(k, r.k), ragged(v, r.v), ragged(o, r.o), ragged(d_o, r.o), ragged(lse, r.stats);
  auto opt = fe::graph::SDPA_backward_attributes()
                 .set_name("meshtrain_causal_attention_backward")
                 .set_attn_scale(scale)
                 .set_causal_mask(true)
                 // Bitwise reproducible gradients (the Kokkos path's are too): no atomics in dQ.
                 .set_deterministic_algorithm(true);
  if (L.ragged) {
    // The documents cover exactly ragged_tokens tokens; bounding the total (rounded up to 64
    // with a floor of 64, as the frontend's ragged tests do) sizes the workspace by the
    // tokens present instead of batch x T.
    const std::int64_t total = std::max<std::int64_t>(64, (L.ragged_tokens + 63) / 64 * 64);
    opt.set_padding_mask(true)
        .set_seq_len_q(r.seq_q)
        .set_seq_len_kv(r.seq_kv)
        .set_max_total_seq_len_q(total)
        .set_max_total_seq_len_kv(total);
  }
  auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, d_o, lse, opt);
  set_output(dq, kDQ, L.q);
  set_output(dk, kDK, L.k);
  set_output(dv, kDV, L.v);
  ragged(dq, r.q), ragged(dk, r.k), ragged(dv, r.v);
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

/// Adds the ragged index tensors of a packed layout to a variant pack: `index` is the
/// device copy of SdpaRagged::index_block() (offsets per operand, then seq_len).
void add_ragged(const SdpaLayout& L, const void* index, std::unordered_map<std::int64_t, void*>& pack) {
  if (!L.ragged) return;
  if (index == nullptr) fail("packed rows without their device ragged index");
  auto* base = const_cast<std::int64_t*>(static_cast<const std::int64_t*>(index));
  const std::int64_t n = sdpa_ragged_index_stride(static_cast<int>(L.q.dim[0]));  // between the arrays
  pack[kOffQ] = base + kRaggedQ * n;
  pack[kOffK] = base + kRaggedK * n;
  pack[kOffV] = base + kRaggedV * n;
  pack[kOffO] = base + kRaggedO * n;
  pack[kOffStats] = base + kRaggedStats * n;
  pack[kSeqLenQ] = base + kRaggedOperands * n;  // one int32 array serves queries and keys
  pack[kSeqLenKV] = base + kRaggedOperands * n;
}

}  // namespace

std::size_t sdpa_forward_workspace(const SdpaLayout& L, float scale, bool stats) {
  if (!L.supported) fail("unsupported shape: " + L.why_not);
  return workspace_of(*cached(L, scale, stats ? kForwardTraining : kForwardInference));
}

void sdpa_forward(const SdpaLayout& L, float scale, const void* q, const void* k, const void* v, void* out,
                  float* lse, void* workspace, void* stream, const void* ragged_index) {
  if (!L.supported) fail("unsupported shape: " + L.why_not);
  auto g = cached(L, scale, lse ? kForwardTraining : kForwardInference);
  std::unordered_map<std::int64_t, void*> pack = {
      {kQ, at(q, L.q)}, {kK, at(k, L.k)}, {kV, at(v, L.v)}, {kO, at(out, L.o)}};
  if (lse) pack[kStats] = lse;
  add_ragged(L, ragged_index, pack);
  execute(*g, pack, workspace, stream);
}

std::size_t sdpa_backward_workspace(const SdpaLayout& L, float scale) {
  if (!L.supported) fail("unsupported shape: " + L.why_not);
  return workspace_of(*cached(L, scale, kBackward));
}

void sdpa_backward(const SdpaLayout& L, float scale, const void* q, const void* k, const void* v, const void* out,
                   const void* dout, const float* lse, void* dq, void* dk, void* dv, void* workspace, void* stream,
                   const void* ragged_index) {
  if (!L.supported) fail("unsupported shape: " + L.why_not);
  auto g = cached(L, scale, kBackward);
  std::unordered_map<std::int64_t, void*> pack = {
      {kQ, at(q, L.q)},     {kK, at(k, L.k)},  {kV, at(v, L.v)},   {kO, at(out, L.o)},
      {kDO, at(dout, L.o)}, {kStats, const_cast<float*>(lse)},     {kDQ, at(dq, L.q)},
      {kDK, at(dk, L.k)},   {kDV, at(dv, L.v)}};
  add_ragged(L, ragged_index, pack);
  execute(*g, pack, workspace, stream);
}

std::string version_string() {
  const std::size_t v = cudnnGetVersion();
  return strprintf("cuDNN %zu.%zu.%zu (frontend %d.%d.%d)", v / 10000, (v / 100) % 100, v % 100,
                   CUDNN_FRONTEND_MAJOR_VERSION, CUDNN_FRONTEND_MINOR_VERSION, CUDNN_FRONTEND_PATCH_VERSION);
}

}  // namespace meshtrain::kernels::cudnn
