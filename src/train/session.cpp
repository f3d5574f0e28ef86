#include "meshtrain/train/session.hpp"

namespace meshtrain::train {

template <class T>
Session<T>::Session(const Runtime& rt, const RunSetup& setup, SessionUse use)
    : setup_(setup), mesh_(rt.world(), setup.mesh, setup.spec.parallel.backend) {
  const parallel::MeshDim& tp = mesh_.tp();
  tp_ = model::tp_dims(setup.dims, tp.size(), tp.rank());
  parallel::FsdpOptions opt;
  opt.strategy = setup.strategy;
  opt.prefetch = setup.spec.parallel.prefetch;
  opt.reduce_dtype = setup.spec.parallel.reduce_dtype;
  opt.grad_accum = setup.batch.grad_accum;
  opt.forward_only = use == SessionUse::Inference;
  engine_ = std::make_unique<parallel::FsdpEngine<T>>(model::build_param_specs(setup.dims, tp.size()),
                                                      model::num_units(setup.dims), mesh_, opt);
  model_ = std::make_unique<model::Transformer<T>>(setup.dims, tp_, engine_->specs(), engine_->layouts());
}

template <class T>
model::ComputeContext Session<T>::context() const {
  model::ComputeContext ctx;
  ctx.tp = &mesh_.tp().comm();
  return ctx;
}

template <class T>
double Session<T>::global_sum(double local) const {
  Buffer<double> v(1, MemCategory::Workspace);
  Kokkos::deep_copy(v.view(), mesh_.coord().tp == 0 ? local : 0.0);
  mesh_.world().comm().all_reduce(v.data(), v.data(), 1, DType::F64, ReduceOp::Sum);
  double out = 0;
  Kokkos::deep_copy(out, Kokkos::subview(v.view(), 0));
  return out;
}

template class Session<float>;
template class Session<bf16>;

}  // namespace meshtrain::train
