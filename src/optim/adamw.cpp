#include "optim/adamw.hpp"

#include <algorithm>

#include "kernels/adamw.hpp"

namespace meshtrain::optim {

template <class T>
void adamw_update(parallel::FsdpEngine<T>& eng, const AdamWSettings& s, double lr, int step, double grad_scale) {
  const auto& specs = eng.specs();
  for (int u = 0; u < eng.num_units(); ++u) {
    parallel::UnitState& st = eng.state(u);
    const std::int64_t lo = st.begin, hi = st.begin + st.numel;
    for (const model::ParamSlot& slot : eng.layouts()[u].slots) {
      // The piece of this parameter inside the rank's state range (padding is skipped).
      const std::int64_t a = std::max(lo, slot.offset), b = std::min(hi, slot.offset + slot.numel);
      if (a >= b) continue;
      const model::ParamSpec& p = specs[slot.spec];
      if (p.frozen) continue;  // LoRA: the base model is not trained
      const bool decay = p.is_embedding ? s.decay_embeddings : p.weight_decay;
      kernels::AdamWParams k;
      k.lr = static_cast<float>(lr);
      k.beta1 = static_cast<float>(s.beta1);
      k.beta2 = static_cast<float>(s.beta2);
      k.eps = static_cast<float>(s.eps);
      k.weight_decay = decay ? static_cast<float>(s.weight_decay) : 0.0f;
      k.grad_scale = static_cast<float>(grad_scale);
      k.step = step;
      const std::size_t off = static_cast<std::size_t>(a - lo);
      kernels::adamw_step(st.master.data() + off, st.grad.data() + off, st.exp_avg.data() + off,
                          st.exp_avg_sq.data() + off, static_cast<std::size_t>(b - a), k);
    }
  }
  eng.params_updated();
}

template void adamw_update<float>(parallel::FsdpEngine<float>&, const AdamWSettings&, double, int, double);
template void adamw_update<bf16>(parallel::FsdpEngine<bf16>&, const AdamWSettings&, double, int, double);

}  // namespace meshtrain::optim
