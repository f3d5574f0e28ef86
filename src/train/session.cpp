#include "train/session.hpp"

#include "comm/collectives.hpp"

namespace meshtrain::train {

template <class T>
Session<T>::Session(const Runtime& rt, const plan::RunSetup& setup, SessionUse use)
    : setup_(setup), mesh_(rt.world(), setup.mesh_shape, setup.spec.parallel.backend) {
  const parallel::MeshDim& tp = mesh_.tp();
  tp_ = model::tp_dims(setup.spec.dims, tp.size(), tp.rank());
  parallel::FsdpOptions opt;
  opt.strategy = setup.strategy;
  opt.prefetch = setup.spec.parallel.prefetch;
  opt.reduce_dtype = setup.spec.parallel.reduce_dtype;
  opt.grad_accum = setup.batch.grad_accum;
  opt.forward_only = use == SessionUse::Inference;
  opt.base_quant = setup.spec.dims.base_quant;
  opt.base_quant_embeddings = setup.spec.dims.base_quant_embeddings;
  opt.base_formats = setup.spec.dims.base_formats;
  engine_ = std::make_unique<parallel::FsdpEngine<T>>(model::build_param_specs(setup.spec.dims, tp.size()),
                                                      model::num_units(setup.spec.dims), mesh_, opt);
  model_ = std::make_unique<model::Transformer<T>>(setup.spec.dims, tp_, engine_->specs(), engine_->layouts(),
                                                   setup.spec.kernel_paths);
}

template <class T>
model::ComputeContext Session<T>::context() const {
  model::ComputeContext ctx;
  ctx.tp = &mesh_.tp().comm();
  ctx.attention = setup_.spec.train.attention == AttentionChoice::Cudnn ? kernels::AttentionPath::Cudnn
                                                                          : kernels::AttentionPath::Kokkos;
  return ctx;
}

template <class T>
double Session<T>::global_sum(double local) const {
  // Each tp group holds the same value: its first rank alone adds it.
  return all_reduce_value(mesh_.world().comm(), mesh_.coord().tp == 0 ? local : 0.0, ReduceOp::Sum);
}

template <class T>
optim::FusedStep<T>& Session<T>::fused_step(const optim::AdamWSettings& s) {
  if (!fused_) fused_ = std::make_unique<optim::FusedStep<T>>(*engine_, s);
  return *fused_;
}

template class Session<float>;
template class Session<bf16>;

}  // namespace meshtrain::train
