#include "parallel/grad_norm.hpp"

#include <algorithm>
#include <cmath>

#include "comm/collectives.hpp"
#include "kernels/elementwise.hpp"

namespace meshtrain::parallel {

template <class T>
double global_grad_norm(FsdpEngine<T>& eng, Communicator& world) {
  double local = 0;
  for (int u = 0; u < eng.num_units(); ++u) {
    const UnitState& st = eng.state(u);
    const std::int64_t lo = eng.owned_begin(u), hi = lo + eng.owned_numel(u);
    for (const model::ParamSlot& slot : eng.layouts()[u].slots) {
      const model::ParamSpec& p = eng.specs()[slot.spec];
      if (p.frozen || !model::counted_on_tp_rank(p, eng.tp_rank())) continue;
      const std::int64_t a = std::max(lo, slot.offset), b = std::min(hi, slot.offset + slot.numel);
      if (a >= b) continue;
      local += kernels::sum_squares(st.grad.data() + (a - st.begin), static_cast<std::size_t>(b - a));
    }
  }
  return std::sqrt(all_reduce_value(world, local, ReduceOp::Sum));
}

template <class T>
void poison_gradients(FsdpEngine<T>& eng, double value) {
  for (int u = 0; u < eng.num_units(); ++u) kernels::fill(eng.state(u).grad.data(), eng.state(u).numel, value);
}

template double global_grad_norm<float>(FsdpEngine<float>&, Communicator&);
template double global_grad_norm<bf16>(FsdpEngine<bf16>&, Communicator&);
template void poison_gradients<float>(FsdpEngine<float>&, double);
template void poison_gradients<bf16>(FsdpEngine<bf16>&, double);

}  // namespace meshtrain::parallel
