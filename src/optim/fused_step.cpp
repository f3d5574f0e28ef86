#include "optim/fused_step.hpp"

#include <algorithm>

namespace meshtrain::optim {

template <class T>
typename FusedStep<T>::Table FusedStep<T>::make_table(std::vector<kernels::FlatSegment> segs) {
  Table t;
  for (kernels::FlatSegment& s : segs) {
    s.first = t.total;
    t.total += s.numel;
  }
  t.n = static_cast<int>(segs.size());
  t.segs = Buffer<kernels::FlatSegment>(segs.size(), MemCategory::Workspace);
  if (!segs.empty())
    Kokkos::deep_copy(t.segs.view(), UView<kernels::FlatSegment, HostMem>(segs.data(), segs.size()));
  return t;
}

template <class T>
FusedStep<T>::FusedStep(parallel::FsdpEngine<T>& engine, const AdamWSettings& settings)
    : eng_(engine), settings_(settings) {
  const auto& specs = eng_.specs();
  for (int u = 0; u < eng_.num_units(); ++u) {
    const parallel::UnitState& st = eng_.state(u);
    std::vector<kernels::FlatSegment> norm, adam;
    // The norm: the pieces of parallel::global_grad_norm, in its order (owned range,
    // trainable, counted on this tp rank), offsets from the state's start.
    const std::int64_t olo = eng_.owned_begin(u), ohi = olo + eng_.owned_numel(u);
    // AdamW: the pieces of adamw_update (the whole state range, trainable).
    const std::int64_t lo = st.begin, hi = st.begin + st.numel;
    for (const model::ParamSlot& slot : eng_.layouts()[u].slots) {
      const model::ParamSpec& p = specs[slot.spec];
      if (p.frozen) continue;
      const std::int64_t na = std::max(olo, slot.offset), nb = std::min(ohi, slot.offset + slot.numel);
      if (na < nb && model::counted_on_tp_rank(p, eng_.tp_rank())) norm.push_back({na - st.begin, nb - na, 0, 0});
      const std::int64_t a = std::max(lo, slot.offset), b = std::min(hi, slot.offset + slot.numel);
      if (a < b) {
        const bool decay = p.is_embedding ? settings_.decay_embeddings : p.weight_decay;
        adam.push_back({a - lo, b - a, 0, decay ? 1 : 0});
      }
    }
    norm_.push_back(make_table(std::move(norm)));
    adam_.push_back(make_table(std::move(adam)));
  }
  partial_ = Buffer<double>(static_cast<std::size_t>(std::max(1, eng_.num_units())), MemCategory::Workspace);
  scalars_ = Buffer<double>(2, MemCategory::Workspace);
}

template <class T>
void FusedStep<T>::grad_norm(Communicator& world, double max_norm) {
  const bool single = launch == kernels::SegmentLaunch::Single ||
                      (launch == kernels::SegmentLaunch::Auto && !kDeviceIsHost);
  double* total = scalars_.data();
  if (single) {
    // One reduction per unit into its partial, then the partials in unit order.
    partial_.zero();
    for (int u = 0; u < eng_.num_units(); ++u)
      if (norm_[u].n > 0)
        kernels::sum_squares_segments(eng_.state(u).grad.data(), norm_[u].segs.data(), norm_[u].n, norm_[u].total,
                                      partial_.data() + u, kernels::SegmentLaunch::Single);
    kernels::sum_in_order(partial_.data(), eng_.num_units(), total);
  } else {
    // Host: one running sum over every parameter piece of every unit, as global_grad_norm.
    scalars_.zero();
    for (int u = 0; u < eng_.num_units(); ++u)
      if (norm_[u].n > 0)
        kernels::sum_squares_segments(eng_.state(u).grad.data(), norm_[u].segs.data(), norm_[u].n, norm_[u].total,
                                      total, kernels::SegmentLaunch::PerSegment);
  }
  world.all_reduce(total, total, 1, DType::F64, ReduceOp::Sum);  // stream-ordered on NCCL
  kernels::grad_norm_clip(scalars_.data(), max_norm);
}

template <class T>
kernels::AdamWScalars FusedStep<T>::scalars(double lr, int step) const {
  kernels::AdamWParams k;
  k.lr = static_cast<float>(lr);
  k.beta1 = static_cast<float>(settings_.beta1);
  k.beta2 = static_cast<float>(settings_.beta2);
  k.eps = static_cast<float>(settings_.eps);
  k.weight_decay = static_cast<float>(settings_.weight_decay);
  k.step = step;
  return kernels::adamw_scalars(k);
}

template <class T>
void FusedStep<T>::update(const kernels::AdamWScalars* scalars, const double* gate) {
  for (int u = 0; u < eng_.num_units(); ++u) {
    parallel::UnitState& st = eng_.state(u);
    const Table& t = adam_[u];
    if (t.n == 0) continue;
    kernels::adamw_multi(st.master.data(), st.grad.data(), st.exp_avg.data(), st.exp_avg_sq.data(), t.segs.data(), t.n,
                         t.total, scalars, gate, eng_.persistent_compute_copy(u), launch);
  }
}

template <class T>
double FusedStep<T>::norm() const {
  double out = 0;
  Kokkos::deep_copy(out, Kokkos::subview(scalars_.view(), 0));
  return out;
}

template class FusedStep<float>;
template class FusedStep<bf16>;

}  // namespace meshtrain::optim
