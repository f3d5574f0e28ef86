#include "parallel/fsdp.hpp"

#include <algorithm>
#include <type_traits>

#include "core/error.hpp"
#include "kernels/dequant.hpp"
#include "kernels/dequant_gguf.hpp"
#include "kernels/elementwise.hpp"
#include "model/init.hpp"

namespace meshtrain::parallel {
namespace {
/// out = in converted (a plain copy when the types agree), queued on the compute stream like
/// the cast kernel: the collectives that read `out` are ordered after it by events.
template <class In, class Out>
void convert(const In* in, Out* out, std::size_t n) {
  if constexpr (std::is_same_v<In, Out>) {
    Kokkos::deep_copy(ExecSpace(), UView<Out>(out, n), UView<Out>(const_cast<In*>(in), n));
  } else {
    kernels::cast(in, out, n);
  }
}

/// A communication buffer (MemCategory::CommBuffers) of fp32 or bf16 elements: the dtype a
/// ReductionRecipe names for a send or receive buffer.
struct WireBuffer {
  Buffer<float> f32;
  Buffer<bf16> b16;
  void* allocate(DType dtype, std::size_t n) {
    if (dtype == DType::F32) {
      f32 = Buffer<float>(n, MemCategory::CommBuffers);
      return f32.data();
    }
    b16 = Buffer<bf16>(n, MemCategory::CommBuffers);
    return b16.data();
  }
};

/// `src` (n elements) cast into a new send buffer of the wire dtype; returns its data.
template <class G>
void* cast_into(const G* src, WireBuffer& dst, DType wire, std::size_t n) {
  void* out = dst.allocate(wire, n);
  if (wire == DType::F32) convert(src, static_cast<float*>(out), n);
  else convert(src, static_cast<bf16*>(out), n);
  return out;
}

/// What a reduction sends from a step buffer (`source`, n elements): the buffer itself,
/// moved into `kept` so it outlives the collective, or its cast into `staged`, after which
/// the source is freed (ReductionRecipe::cast_before_send).
template <class G>
const void* send_from(const ReductionRecipe& rc, Buffer<G>& source, Buffer<G>& kept, WireBuffer& staged,
                      std::size_t n) {
  if (!rc.cast_before_send) {
    kept = std::move(source);
    return kept.data();
  }
  const void* out = cast_into(source.data(), staged, rc.wire, n);
  source.reset();
  return out;
}
}  // namespace

/// Unit u's working buffers of the current step: its gathered parameters, this
/// micro-step's gradients, the local accumulation, and what is in flight.
template <class T>
struct FsdpEngine<T>::StepBuffers {
  Buffer<T> gathered;       ///< (padded) gathered params in T; persistent for no_shard (bf16 or frozen)
  Work gather_work;         ///< trainable segment
  Work frozen_gather_work;  ///< frozen segment
  Buffer<std::uint8_t> frozen_wire;  ///< quantized base: every shard's payload, until dequantized
  bool in_flight = false;
  bool alive = false;
  bool stale = true;        ///< no_shard: persistent copy must be refreshed from the master
  Buffer<acc_t<T>> grad_micro;  ///< (trainable_padded) this micro-step's gradients (fp32)
  Buffer<float> accum;      ///< (trainable_padded) fp32 local accumulation (shard_grad_op)
  bool grad_started = false;
};

/// One launched reduction (ReductionRecipe): its collective and the buffers that must
/// outlive it, and the epilogue complete() runs on its result.
template <class T>
struct FsdpEngine<T>::Reduction {
  int unit = 0;
  Work work;
  Buffer<acc_t<T>> kept_micro;  ///< the micro-step's grads, sent as they are
  Buffer<float> kept_accum; ///< the fp32 local accumulation, sent as it is
  WireBuffer send;          ///< the source cast to the wire dtype
  WireBuffer recv;          ///< separate receive buffer (fp32 or bf16)
  ReduceEpilogue epilogue = ReduceEpilogue::None;
  const void* result = nullptr;  ///< where the collective's result lands
  float* target = nullptr;       ///< the fp32 gradient state it is folded into
  std::size_t n = 0;             ///< result elements
};

template <class T>
FsdpEngine<T>::FsdpEngine(std::vector<model::ParamSpec> specs, int n_units, const DeviceMesh& device_mesh,
                          const FsdpOptions& options)
    : specs_(std::move(specs)), mesh_(device_mesh), opt_(options), traits_(traits(options.strategy)),
      reduction_(reduction_plan(traits_, DTypeOf<T>::value, options.reduce_dtype)) {
  const MeshShape& shape = mesh_.shape();
  const MeshCoord& coord = mesh_.coord();
  const int shards = traits_.shard_params ? shape.dp_shard : 1;
  layouts_ = model::build_layouts(specs_, n_units, shape.tp, shards);
  compute_only_ = opt_.forward_only && !std::is_same_v<T, float>;
  state_.resize(n_units);
  held_.resize(n_units);
  frozen_.resize(n_units);
  step_buffers_.resize(n_units);
  owned_begin_.resize(n_units);
  owned_numel_.resize(n_units);
  for (int u = 0; u < n_units; ++u) {
    const model::UnitLayout& L = layouts_[u];
    UnitState& st = state_[u];
    Frozen& fz = frozen_[u];
    const std::int64_t tb = L.trainable_begin(), tn = L.trainable_padded();
    has_frozen_ = has_frozen_ || L.frozen_padded() > 0;
    if (traits_.shard_params) {
      st.begin = tb + coord.shard * L.shard_numel;
      st.numel = L.shard_numel;
      owned_begin_[u] = st.begin;
      owned_numel_[u] = coord.replicate == 0 ? st.numel : 0;
      fz.begin = coord.shard * L.frozen_shard_numel;
      fz.numel = L.frozen_shard_numel;
      if (unit_quant(u) == BaseQuant::None) {
        fz.values = Buffer<T>(fz.numel, MemCategory::Params);
        fz.values.zero();
      } else if (fz.numel > 0 && unit_quant(u) != BaseQuant::Gguf) {  // gguf: sized by its map, below
        fz.payload = Buffer<std::uint8_t>(static_cast<std::size_t>(payload_bytes(unit_quant(u), fz.numel)),
                                          MemCategory::Params);
        fz.payload.zero();
      }
    } else {
      st.begin = tb;
      st.numel = tn;
      // Every dp rank holds everything; ownership is split evenly so sums and writes are
      // shared out and each element is counted once.
      const int dp = shape.dp();
      const int d = coord.replicate * shape.dp_shard + coord.shard;
      const std::int64_t per = (tn + dp - 1) / dp;
      const std::int64_t b = std::min<std::int64_t>(tn, d * per);
      owned_begin_[u] = tb + b;
      owned_numel_[u] = std::min<std::int64_t>(tn, b + per) - b;
      // The persistent compute copy [frozen | trainable] holds the frozen values themselves;
      // a unit kept quantized holds its whole payload instead (and has nothing trainable).
      fz.begin = 0;
      fz.numel = L.frozen_padded();
      if (kept_quantized(u)) {
        if (unit_quant(u) != BaseQuant::Gguf) {  // gguf: sized by its map, below
          fz.payload = Buffer<std::uint8_t>(static_cast<std::size_t>(payload_bytes(unit_quant(u), fz.numel)),
                                            MemCategory::Params);
          fz.payload.zero();
        }
      } else if (fz.numel > 0 || compute_only_) {
        // A compute-only engine's trainable values live here too (its only copy: never stale).
        step_buffers_[u].gathered = Buffer<T>(L.padded(), MemCategory::GatheredParams);
        step_buffers_[u].gathered.zero();
        step_buffers_[u].stale = !compute_only_;
      }
    }
    MESHTRAIN_ASSERT(!kept_quantized(u) || L.trainable_padded() == 0,
                     "unit %d is kept quantized but has a trainable segment", u);
    if (unit_quant(u) == BaseQuant::Gguf && L.frozen_padded() > 0) {
      // The GGUF base's blocks (a TP slice that splits one is refused here) and runs; sharded
      // strategies and a unit kept quantized keep this rank's shard of the blocks (no_shard's
      // outer unit: its one shard, the whole segment) and the 1-D parameters in T.
      fz.gguf = build_gguf_map(specs_, L, shape.tp, coord.tp, opt_.base_formats);
      fz.gguf_runs = Buffer<kernels::GgufRun>(fz.gguf.runs.size(), MemCategory::Params);
      Kokkos::deep_copy(fz.gguf_runs.view(),
                        UView<kernels::GgufRun, HostMem>(fz.gguf.runs.data(), fz.gguf.runs.size()));
      if (traits_.shard_params || kept_quantized(u)) {
        fz.payload = Buffer<std::uint8_t>(static_cast<std::size_t>(fz.gguf.stride), MemCategory::Params);
        fz.payload.zero();
        fz.dense = Buffer<T>(static_cast<std::size_t>(fz.gguf.dense_numel()), MemCategory::Params);
        fz.dense.zero();
      }
    } else if (unit_quant(u) != BaseQuant::None && L.frozen_padded() > 0) {
      // The quantized base's map (a TP slice that splits a block is refused here), its
      // runs and group maxima on the device; sharded strategies and a unit kept quantized
      // also keep the 1-D parameters of the whole segment in T (no_shard's other units have
      // them in their gathered copy).
      fz.map = build_quant_map(specs_, L, shape.tp, coord.tp, unit_quant(u));
      fz.runs = Buffer<kernels::QuantRun>(fz.map.runs.size(), MemCategory::Params);
      if (!fz.map.runs.empty())
        Kokkos::deep_copy(fz.runs.view(), UView<kernels::QuantRun, HostMem>(fz.map.runs.data(), fz.map.runs.size()));
      fz.group_max = Buffer<float>(static_cast<std::size_t>(fz.map.groups), MemCategory::Params);
      fz.group_max.zero();
      if (traits_.shard_params || kept_quantized(u)) {
        fz.dense = Buffer<T>(static_cast<std::size_t>(fz.map.dense_numel()), MemCategory::Params);
        fz.dense.zero();
      }
    }
    if (compute_only_) {
      if (traits_.shard_params) {
        held_[u] = Buffer<T>(st.numel, MemCategory::Params);
        held_[u].zero();
      }
      continue;  // the master exists only while a load writes it (master_for_write)
    }
    st.master = Buffer<float>(st.numel, MemCategory::Params);
    st.master.zero();
    if (opt_.forward_only) continue;
    st.grad = Buffer<float>(st.numel, MemCategory::Grads);
    st.exp_avg = Buffer<float>(st.numel, MemCategory::Optimizer);
    st.exp_avg_sq = Buffer<float>(st.numel, MemCategory::Optimizer);
    st.grad.zero();
    st.exp_avg.zero();
    st.exp_avg_sq.zero();
  }
}

template <class T>
FsdpEngine<T>::~FsdpEngine() {
  while (!pending_.empty()) {
    pending_.front()->work.wait();
    pending_.pop_front();
  }
}

template <class T>
void FsdpEngine<T>::init_parameters(std::uint64_t seed) {
  for (int u = 0; u < num_units(); ++u) {
    UnitState& st = state_[u];
    std::vector<float> host(st.numel);
    model::init_unit_range(specs_, layouts_[u], tp_size(), tp_rank(), st.begin, st.begin + st.numel, seed, host.data());
    Kokkos::deep_copy(master_for_write(u).view(), UView<float, HostMem>(host.data(), host.size()));
    master_written(u);
    const Frozen& fz = frozen_[u];
    if (fz.numel == 0) continue;
    std::vector<float> fhost(static_cast<std::size_t>(fz.numel));
    model::init_unit_range(specs_, layouts_[u], tp_size(), tp_rank(), fz.begin, fz.begin + fz.numel, seed,
                           fhost.data());
    set_frozen(u, fhost.data());
  }
  params_updated();
}

template <class T>
Buffer<float>& FsdpEngine<T>::master_for_write(int u) {
  UnitState& st = state_[u];
  if (compute_only_ && st.master.empty()) {
    st.master = Buffer<float>(st.numel, MemCategory::Params);
    st.master.zero();
  }
  return st.master;
}

template <class T>
void FsdpEngine<T>::master_written(int u) {
  if (!compute_only_) return;
  UnitState& st = state_[u];
  // The same cast a training engine's gather or no_shard refresh makes from the master.
  if (st.numel > 0) {
    T* held = traits_.shard_params ? held_[u].data() : step_buffers_[u].gathered.data() + layouts_[u].trainable_begin();
    convert(st.master.data(), held, static_cast<std::size_t>(st.numel));
  }
  st.master.reset();
}

template <class T>
BaseQuant FsdpEngine<T>::unit_quant(int u) const {
  return unit_base_quant(opt_.base_quant, opt_.base_quant_embeddings, u);
}

template <class T>
bool FsdpEngine<T>::kept_quantized(int u) const {
  return u == 0 && unit_quant(0) != BaseQuant::None && layouts_[0].frozen_padded() > 0;
}

template <class T>
T* FsdpEngine<T>::frozen_storage(int u) {
  return traits_.shard_params ? frozen_[u].values.data() : step_buffers_[u].gathered.data();
}

template <class T>
void FsdpEngine<T>::set_frozen(int u, const float* values) {
  const std::size_t n = static_cast<std::size_t>(frozen_[u].numel);
  if (n == 0) return;
  MESHTRAIN_ASSERT(unit_quant(u) != BaseQuant::Gguf,
                   "set_frozen(%d) of a unit kept in its GGUF blocks: it is set from the file (set_frozen_gguf)", u);
  if (unit_quant(u) != BaseQuant::None) {
    set_frozen_quantized(u, values);
    return;
  }
  // Chunk by chunk through one small staging buffer, rounded by the cast kernel as a whole
  // shard would be (element by element: the same values). The host-to-device copy fences
  // the device, so a chunk's cast has read the buffer before the next chunk overwrites it.
  const std::size_t chunk = std::min(n, static_cast<std::size_t>(kFrozenStagingElements));
  Buffer<float> stage(chunk, MemCategory::Workspace);
  T* storage = frozen_storage(u);
  for (std::size_t at = 0; at < n; at += chunk) {
    const std::size_t c = std::min(chunk, n - at);
    Kokkos::deep_copy(stage.view(0, c), UView<float, HostMem>(const_cast<float*>(values) + at, c));
    convert(stage.data(), storage + at, c);
  }
}

template <class T>
void FsdpEngine<T>::set_frozen_quantized(int u, const float* values) {
  Frozen& fz = frozen_[u];
  const QuantMap& map = fz.map;
  const BaseQuant quant = unit_quant(u);
  const std::int64_t n = fz.numel;
  // The shard is on the host (one unit's shard at a time: no fp32 copy of the model persists),
  // where it is encoded: no fp32 copy of it is ever on the device.
  const float* host = values;
  // NF4 group maxima: each rank's partial maxima, then the maximum over the world (the ranks
  // of other tp slices and shards hold the rest of a group; replicas hold the same values).
  std::vector<float> group_max(static_cast<std::size_t>(map.groups), 0.0f);
  if (quant == BaseQuant::Nf4 && map.groups > 0) {
    partial_group_max(map, host, fz.begin, n, group_max);
    Kokkos::deep_copy(fz.group_max.view(), UView<float, HostMem>(group_max.data(), group_max.size()));
    mesh_.world().comm().all_reduce(fz.group_max.data(), fz.group_max.data(), group_max.size(), DType::F32,
                                    ReduceOp::Max);
    Kokkos::deep_copy(UView<float, HostMem>(group_max.data(), group_max.size()), fz.group_max.view());
  }
  std::vector<std::uint8_t> payload(static_cast<std::size_t>(payload_bytes(quant, n)));
  encode_shard(quant, map, host, fz.begin, n, group_max, payload.data());
  // The 1-D parameters of the whole segment: each element comes from the one shard that
  // holds it (the others add zeros), so the sum over dp_shard is exact.
  std::vector<float> dense(static_cast<std::size_t>(map.dense_numel()), 0.0f);
  std::int64_t at = 0;
  for (const model::DenseSlot& d : map.dense) {
    const std::int64_t lo = std::max(d.offset, fz.begin), hi = std::min(d.offset + d.numel, fz.begin + n);
    for (std::int64_t i = lo; i < hi; ++i) dense[static_cast<std::size_t>(at + i - d.offset)] = host[static_cast<std::size_t>(i - fz.begin)];
    at += d.numel;
  }
  Buffer<float> dense_dev(dense.size(), MemCategory::Workspace);
  if (!dense.empty()) {
    Kokkos::deep_copy(dense_dev.view(), UView<float, HostMem>(dense.data(), dense.size()));
    if (traits_.shard_params && mesh_.dp_shard().size() > 1)
      mesh_.dp_shard().comm().all_reduce(dense_dev.data(), dense_dev.data(), dense.size(), DType::F32, ReduceOp::Sum);
  }
  if (traits_.shard_params || kept_quantized(u)) {
    Kokkos::deep_copy(fz.payload.view(), UView<std::uint8_t, HostMem>(payload.data(), payload.size()));
    if (!dense.empty()) convert(dense_dev.data(), fz.dense.data(), dense.size());
    return;
  }
  // no_shard: the whole segment is this rank's; dequantized once into the persistent copy.
  Buffer<std::uint8_t> dev(payload.size(), MemCategory::Workspace);
  Kokkos::deep_copy(dev.view(), UView<std::uint8_t, HostMem>(payload.data(), payload.size()));
  Buffer<T> dense_t(dense.size(), MemCategory::Workspace);
  if (!dense.empty()) convert(dense_dev.data(), dense_t.data(), dense.size());
  fz.dense = std::move(dense_t);
  dequantize_frozen(u, dev.data(), static_cast<std::int64_t>(payload.size()), n, frozen_storage(u));
  fz.dense.reset();
}

template <class T>
int FsdpEngine<T>::frozen_shard() const {
  return traits_.shard_params ? mesh_.coord().shard : 0;
}

template <class T>
void FsdpEngine<T>::set_frozen_gguf(int u, const std::uint8_t* payload, const float* dense) {
  Frozen& fz = frozen_[u];
  MESHTRAIN_ASSERT(unit_quant(u) == BaseQuant::Gguf, "set_frozen_gguf(%d) of a unit not kept in GGUF blocks", u);
  if (fz.numel == 0) return;
  const std::size_t stride = static_cast<std::size_t>(fz.gguf.stride), nd = static_cast<std::size_t>(fz.gguf.dense_numel());
  Buffer<float> dense_dev(nd, MemCategory::Workspace);
  if (nd > 0) Kokkos::deep_copy(dense_dev.view(), UView<float, HostMem>(const_cast<float*>(dense), nd));
  if (traits_.shard_params || kept_quantized(u)) {
    Kokkos::deep_copy(fz.payload.view(), UView<std::uint8_t, HostMem>(const_cast<std::uint8_t*>(payload), stride));
    if (nd > 0) convert(dense_dev.data(), fz.dense.data(), nd);
    return;
  }
  // no_shard: the one shard is the whole segment, dequantized once into the persistent copy.
  Buffer<std::uint8_t> dev(stride, MemCategory::Workspace);
  Kokkos::deep_copy(dev.view(), UView<std::uint8_t, HostMem>(const_cast<std::uint8_t*>(payload), stride));
  fz.dense = Buffer<T>(nd, MemCategory::Workspace);
  if (nd > 0) convert(dense_dev.data(), fz.dense.data(), nd);
  dequantize_frozen(u, dev.data(), static_cast<std::int64_t>(stride), fz.numel, frozen_storage(u));
  fz.dense.reset();
}

template <class T>
std::int64_t FsdpEngine<T>::payload_stride(int u) const {
  if (unit_quant(u) == BaseQuant::Gguf) return frozen_[u].gguf.stride;
  return payload_bytes(unit_quant(u), frozen_[u].numel);
}

template <class T>
void FsdpEngine<T>::dequantize_frozen(int u, const std::uint8_t* all, std::int64_t stride, std::int64_t shard_numel,
                                      T* gathered) {
  const Frozen& fz = frozen_[u];
  const std::int64_t numel = layouts_[u].frozen_padded();
  if (unit_quant(u) == BaseQuant::Gguf) {
    // The runs' byte offsets already hold the stride; every element outside the 1-D slots is in a run.
    kernels::dequantize_gguf(all, fz.gguf_runs.data(), static_cast<int>(fz.gguf.runs.size()), 0, fz.gguf.groups, 0,
                             numel, gathered);
    std::int64_t at = 0;
    for (const model::DenseSlot& d : fz.gguf.dense) {
      convert(fz.dense.data() + at, gathered + d.offset, static_cast<std::size_t>(d.numel));
      at += d.numel;
    }
    return;
  }
  const int n_runs = static_cast<int>(fz.map.runs.size());
  if (unit_quant(u) == BaseQuant::Nf4)
    kernels::dequantize_nf4(all, stride, shard_numel, fz.runs.data(), n_runs, fz.group_max.data(), gathered, numel);
  else
    kernels::dequantize_int8(all, stride, shard_numel, fz.runs.data(), n_runs, gathered, numel);
  std::int64_t at = 0;
  for (const model::DenseSlot& d : fz.map.dense) {
    convert(fz.dense.data() + at, gathered + d.offset, static_cast<std::size_t>(d.numel));
    at += d.numel;
  }
}

template <class T>
std::int64_t FsdpEngine<T>::frozen_payload_bytes(int u) const {
  if (unit_quant(u) == BaseQuant::None || !traits_.shard_params) return 0;
  return payload_stride(u);
}

template <class T>
void FsdpEngine<T>::params_updated() {
  for (StepBuffers& r : step_buffers_) r.stale = true;
}

template <class T>
T* FsdpEngine<T>::persistent_compute_copy(int u) {
  StepBuffers& r = step_buffers_[u];
  const model::UnitLayout& L = layouts_[u];
  if (traits_.shard_params || r.gathered.empty()) return nullptr;
  if (std::is_same_v<T, float> && L.frozen_padded() == 0) return nullptr;  // the master is the compute copy
  return r.gathered.data() + L.trainable_begin();
}

template <class T>
void FsdpEngine<T>::params_updated_in_place() {
  for (int u = 0; u < num_units(); ++u) {
    // A copy that was fresh before the update got every parameter element of it (the
    // padding never changes); one still waiting for its first refresh stays stale.
    StepBuffers& r = step_buffers_[u];
    r.stale = r.stale || persistent_compute_copy(u) == nullptr;
  }
}

template <class T>
void FsdpEngine<T>::begin_step() {
  if (!traits_.shard_params && !opt_.forward_only)
    for (UnitState& st : state_) st.grad.zero();  // no_shard accumulates into the grad state
}

template <class T>
void FsdpEngine<T>::begin_micro(int micro) {
  micro_ = micro;
  last_micro_ = micro == opt_.grad_accum - 1;
  for (StepBuffers& r : step_buffers_) r.grad_started = false;
}

template <class T>
void FsdpEngine<T>::gather(int u, bool prefetch) {
  if (!traits_.shard_params || u < 0 || u >= num_units()) return;
  StepBuffers& r = step_buffers_[u];
  if (r.alive || r.in_flight) return;
  if (prefetch && u > 0) {
    int busy = 0;
    for (int v = 1; v < num_units(); ++v) busy += (step_buffers_[v].alive || step_buffers_[v].in_flight) ? 1 : 0;
    if (busy >= 1 + opt_.prefetch) return;
  }
  const model::UnitLayout& L = layouts_[u];
  const std::size_t sn = L.shard_numel, fsn = L.frozen_shard_numel;
  const bool kept = kept_quantized(u);
  if (!kept) r.gathered = Buffer<T>(L.padded(), MemCategory::GatheredParams);
  if (fsn > 0 && unit_quant(u) != BaseQuant::None) {
    // Quantized frozen segment: the payload travels (4.13 or 8.5 bits a weight instead of
    // T's 16 or 32, or the GGUF file's blocks) and is dequantized in wait_params -- or, kept
    // quantized, is the gathered unit itself until it is released.
    const std::size_t pb = static_cast<std::size_t>(payload_stride(u));
    r.frozen_wire = Buffer<std::uint8_t>(pb * static_cast<std::size_t>(L.shards),
                                         kept ? MemCategory::GatheredParams : MemCategory::CommBuffers);
    std::uint8_t* mine = r.frozen_wire.data() + static_cast<std::size_t>(mesh_.coord().shard) * pb;
    Kokkos::deep_copy(ExecSpace(), UView<std::uint8_t>(mine, pb), frozen_[u].payload.view());
    r.frozen_gather_work = mesh_.dp_shard().comm().all_gather_async(mine, r.frozen_wire.data(), pb, DType::U8);
    frozen_gather_bytes_ += pb * static_cast<std::size_t>(L.shards - 1);
  } else if (fsn > 0) {
    // Frozen segment: the T shard as stored (no master to convert).
    T* mine = r.gathered.data() + static_cast<std::size_t>(mesh_.coord().shard) * fsn;
    convert(frozen_[u].values.data(), mine, fsn);
    r.frozen_gather_work = mesh_.dp_shard().comm().all_gather_async(mine, r.gathered.data(), fsn, DTypeOf<T>::value);
    frozen_gather_bytes_ += fsn * sizeof(T) * static_cast<std::size_t>(L.shards - 1);
  }
  if (sn > 0) {
    T* seg = r.gathered.data() + L.trainable_begin();
    T* mine = seg + static_cast<std::size_t>(mesh_.coord().shard) * sn;
    // fp32 master shard -> T (a compute-only engine's T shard as held), in its slot
    if (compute_only_) convert(held_[u].data(), mine, sn);
    else convert(state_[u].master.data(), mine, sn);
    r.gather_work = mesh_.dp_shard().comm().all_gather_async(mine, seg, sn, DTypeOf<T>::value);
  }
  r.in_flight = true;
}

template <class T>
void FsdpEngine<T>::wait_gathered(int u) {
  StepBuffers& r = step_buffers_[u];
  if (r.alive) return;
  if (!r.in_flight) gather(u);
  r.frozen_gather_work.wait();
  r.gather_work.wait();
  r.in_flight = false;
  r.alive = true;
}

template <class T>
void FsdpEngine<T>::release_gathered(int u) {
  StepBuffers& r = step_buffers_[u];
  r.gathered.reset();
  r.frozen_wire.reset();
  r.alive = false;
}

template <class T>
model::OuterParams<T> FsdpEngine<T>::wait_outer() {
  if (!kept_quantized(0)) return model::OuterParams<T>(wait_params(0));
  const Frozen& fz = frozen_[0];
  model::OuterParams<T> p;
  p.dense = fz.dense.data();
  if (unit_quant(0) == BaseQuant::Gguf) {
    // The GGUF blocks: the runs' byte offsets locate every block in the gathered payload.
    p.quant.format = kernels::QuantFormat::Gguf;
    p.quant.gguf_runs = fz.gguf_runs.data();
    p.quant.n_runs = static_cast<int>(fz.gguf.runs.size());
    p.dense_slots = &fz.gguf.dense;
  } else {
    p.quant.format = unit_quant(0) == BaseQuant::Nf4 ? kernels::QuantFormat::Nf4 : kernels::QuantFormat::Int8;
    p.quant.runs = fz.runs.data();
    p.quant.n_runs = static_cast<int>(fz.map.runs.size());
    p.quant.group_max = fz.group_max.data();
    p.dense_slots = &fz.map.dense;
  }
  if (!traits_.shard_params) {
    // no_shard: the whole segment is one shard, held between steps.
    p.quant.payload = fz.payload.data();
    p.quant.payload_stride = static_cast<std::int64_t>(fz.payload.size());
    p.quant.shard_numel = fz.numel;
    return p;
  }
  wait_gathered(0);
  p.quant.payload = step_buffers_[0].frozen_wire.data();
  p.quant.payload_stride = payload_stride(0);
  p.quant.shard_numel = layouts_[0].frozen_shard_numel;
  return p;
}

template <class T>
const T* FsdpEngine<T>::wait_params(int u) {
  MESHTRAIN_ASSERT(!kept_quantized(u), "unit %d is kept quantized: read it through wait_outer()", u);
  StepBuffers& r = step_buffers_[u];
  UnitState& st = state_[u];
  if (!traits_.shard_params) {
    const model::UnitLayout& L = layouts_[u];
    if constexpr (std::is_same_v<T, float>) {
      if (L.frozen_padded() == 0) return st.master.data();  // replicated fp32 master is the compute copy
    }
    // A compute-only engine's copy is its only one, written by master_written.
    if (!compute_only_ && (r.stale || r.gathered.empty())) {
      if (r.gathered.empty()) r.gathered = Buffer<T>(L.padded(), MemCategory::GatheredParams);
      convert(st.master.data(), r.gathered.data() + L.trainable_begin(), st.numel);
      r.stale = false;
    }
    return r.gathered.data();
  }
  if (!r.alive) {
    wait_gathered(u);
    if (!r.frozen_wire.empty()) {
      const std::int64_t fsn = layouts_[u].frozen_shard_numel;
      dequantize_frozen(u, r.frozen_wire.data(), payload_stride(u), fsn, r.gathered.data());
      r.frozen_wire.reset();
    }
  }
  return r.gathered.data();
}

template <class T>
void FsdpEngine<T>::after_forward(int u) {
  if (traits_.shard_params && traits_.reshard_after_forward && step_buffers_[u].alive) release_gathered(u);
}

template <class T>
acc_t<T>* FsdpEngine<T>::grad_buffer(int u) {
  MESHTRAIN_ASSERT(!opt_.forward_only, "grad_buffer(%d) of a forward-only engine (eval/generate)", u);
  StepBuffers& r = step_buffers_[u];
  const std::size_t padded = layouts_[u].trainable_padded();
  if (padded == 0) return nullptr;  // nothing trainable in this unit (LoRA's outer unit)
  const ReductionRecipe& rc = reduction_.first;  // where the backward writes: the same every micro-step
  if (!r.grad_started) {
    r.grad_started = true;
    if (rc.local_accum_buffer && r.accum.empty()) {
      r.accum = Buffer<float>(padded, MemCategory::Grads);
      r.accum.zero();
    }
    if (rc.micro_grads_buffer) {
      r.grad_micro = Buffer<acc_t<T>>(padded, MemCategory::Grads);
      r.grad_micro.zero();
    }
  }
  // Accumulating strategies: the backward adds into the fp32 accumulation directly.
  if (!rc.micro_grads_buffer) return rc.local_accum_buffer ? r.accum.data() : state_[u].grad.data();
  return r.grad_micro.data();
}

template <class T>
template <class G>
void FsdpEngine<T>::sum_replicated_grads_over_tp(int u, G* grads) {
  if (tp_size() == 1) return;
  const std::int64_t tb = layouts_[u].trainable_begin();
  for (const model::ParamSlot& s : layouts_[u].slots)
    if (specs_[s.spec].grad_tp_sum && !specs_[s.spec].frozen)
      mesh_.tp().comm().all_reduce(grads + (s.offset - tb), grads + (s.offset - tb), s.numel, DTypeOf<G>::value,
                             ReduceOp::Sum);
}

template <class T>
void FsdpEngine<T>::after_backward(int u) {
  StepBuffers& r = step_buffers_[u];
  const std::size_t padded = layouts_[u].trainable_padded();
  if (traits_.shard_params && r.alive) release_gathered(u);
  // A unit without trainable elements has nothing to reduce (the frozen base under LoRA).
  if (padded > 0 && (traits_.reduce_every_micro || last_micro_)) launch_reduction(u);
}

template <class T>
void FsdpEngine<T>::launch_reduction(int u) {
  // Interprets the recipe of this micro-step (parallel/reduction_plan.hpp): every choice
  // (sharded or not, per micro-step or accumulated, the dtypes) was made when it was built.
  const ReductionRecipe& rc = reduction_.at(micro_ == 0);
  const model::UnitLayout& L = layouts_[u];
  const std::size_t padded = L.trainable_padded();
  UnitState& st = state_[u];
  StepBuffers& sb = step_buffers_[u];
  auto red = std::make_unique<Reduction>();
  Reduction& R = *red;
  R.unit = u;

  // 1. The source (replicated-over-tp parameters' grads summed first), sent as it is or
  //    cast to the wire dtype.
  const void* send = nullptr;
  switch (rc.source) {
    case ReduceSource::MicroGrads:
      sum_replicated_grads_over_tp(u, sb.grad_micro.data());
      send = send_from(rc, sb.grad_micro, R.kept_micro, R.send, padded);
      break;
    case ReduceSource::LocalAccum:
      sum_replicated_grads_over_tp(u, sb.accum.data());
      send = send_from(rc, sb.accum, R.kept_accum, R.send, padded);
      break;
    case ReduceSource::GradState:  // persistent: sent in place, or through a cast copy
      sum_replicated_grads_over_tp(u, st.grad.data());
      send = rc.cast_before_send ? cast_into(st.grad.data(), R.send, rc.wire, padded) : st.grad.data();
      break;
  }
  // 2. Where the result lands, and what complete() does with it.
  R.target = st.grad.data();
  R.n = static_cast<std::size_t>(rc.result_numel(static_cast<std::int64_t>(padded), L.shard_numel));
  R.epilogue = rc.epilogue;
  void* recv = nullptr;
  switch (rc.recv) {
    case ReduceRecv::GradState: recv = st.grad.data(); break;
    case ReduceRecv::SendBuffer: recv = const_cast<void*>(send); break;
    case ReduceRecv::F32Buffer: recv = R.recv.allocate(DType::F32, R.n); break;
    case ReduceRecv::Bf16Buffer: recv = R.recv.allocate(DType::BF16, R.n); break;
  }
  R.result = recv;
  // 3. The collective.
  if (rc.collective == ReduceCollective::ReduceScatterShard)
    R.work = mesh_.dp_shard().comm().reduce_scatter_async(send, recv, R.n, rc.wire, ReduceOp::Sum);
  else
    R.work = mesh_.dp().comm().all_reduce_async(send, recv, R.n, rc.wire, ReduceOp::Sum);
  // At most one older reduction stays in flight behind the one just started: finish the
  // rest here, at a point fixed by the schedule, never "whenever the network was done".
  // That keeps the gradient/comm buffers alive at once - and so the memory pool's size and
  // the planner's grad_buffers estimate - the same in every step, however loaded the machine.
  while (!pending_.empty()) {
    complete(*pending_.front());
    pending_.pop_front();
  }
  pending_.push_back(std::move(red));
}

template <class T>
void FsdpEngine<T>::complete(Reduction& R) {
  R.work.wait();
  switch (R.epilogue) {
    case ReduceEpilogue::None: break;
    case ReduceEpilogue::AddF32: kernels::add_inplace(R.target, static_cast<const float*>(R.result), R.n); break;
    case ReduceEpilogue::CopyFromBf16: kernels::cast(static_cast<const bf16*>(R.result), R.target, R.n); break;
    case ReduceEpilogue::AddFromBf16: {
      Buffer<float> wide(R.n, MemCategory::Workspace);
      kernels::cast(static_cast<const bf16*>(R.result), wide.data(), R.n);
      kernels::add_inplace(R.target, wide.data(), R.n);
      break;
    }
  }
}

template <class T>
void FsdpEngine<T>::progress() {
  // Drives the in-flight collectives (MPI progresses only inside MPI calls). Reductions are
  // completed - epilogue run, buffers released - only at fixed points of the schedule
  // (launch_reduction, finish_step), in issue order: two reductions of one unit land in order.
  mesh_.progress();
}

template <class T>
std::vector<std::int64_t> FsdpEngine<T>::step_state() const {
  std::vector<std::int64_t> s = {static_cast<std::int64_t>(pending_.size()), micro_, last_micro_ ? 1 : 0};
  for (const StepBuffers& r : step_buffers_) {
    // (Arrays, not braced lists in the range-for: nvcc's front end rejects those.)
    const bool flags[] = {r.in_flight, r.alive, r.stale, r.grad_started, r.gather_work.pending(),
                          r.frozen_gather_work.pending()};
    for (const bool b : flags) s.push_back(b ? 1 : 0);
    // Persistent buffers: the graph captured their addresses.
    const void* buffers[] = {r.gathered.data(), r.frozen_wire.data(), r.grad_micro.data(), r.accum.data()};
    for (const void* p : buffers) s.push_back(static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(p)));
  }
  return s;
}

template <class T>
void FsdpEngine<T>::finish_step() {
  while (!pending_.empty()) {
    complete(*pending_.front());
    pending_.pop_front();
  }
  if (traits_.shard_params && mesh_.shape().dp_replicate > 1) {
    // Hybrid sharding: shards are replicated across dp_replicate groups; sum them.
    for (UnitState& st : state_)
      if (st.numel > 0)
        mesh_.dp_replicate().comm().all_reduce(st.grad.data(), st.grad.data(), st.numel, DType::F32, ReduceOp::Sum);
  }
  for (int u = 0; u < num_units(); ++u) {
    StepBuffers& r = step_buffers_[u];
    if (traits_.shard_params && r.alive) release_gathered(u);
    r.grad_micro.reset();
    r.grad_started = false;
  }
}

template <class T>
void FsdpEngine<T>::release_all() {
  if (!traits_.shard_params) return;
  for (StepBuffers& r : step_buffers_) {
    if (r.in_flight) {
      r.frozen_gather_work.wait();
      r.gather_work.wait();
      r.in_flight = false;
    }
    r.frozen_wire.reset();
    r.gathered.reset();
    r.alive = false;
  }
}

template <class T>
std::size_t FsdpEngine<T>::persistent_bytes() const {
  std::size_t b = 0;
  for (const UnitState& st : state_) b += st.master.bytes() + st.grad.bytes() + st.exp_avg.bytes() + st.exp_avg_sq.bytes();
  for (const Buffer<T>& h : held_) b += h.bytes();
  for (const Frozen& fz : frozen_)
    b += fz.values.bytes() + fz.payload.bytes() + fz.runs.bytes() + fz.group_max.bytes() + fz.dense.bytes() +
         fz.gguf_runs.bytes();
  return b;
}

template class FsdpEngine<float>;
template class FsdpEngine<bf16>;

}  // namespace meshtrain::parallel
