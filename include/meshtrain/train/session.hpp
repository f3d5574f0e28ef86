#pragma once
/// \brief A model on a mesh: the device mesh (its groups and communicators), the FSDP engine holding the
/// (sharded) state, and the transformer that computes with it. Shared by train, eval and
/// generate.

#include <memory>

#include "model/transformer.hpp"
#include "optim/fused_step.hpp"
#include "parallel/device_mesh.hpp"
#include "parallel/fsdp.hpp"
#include "runtime/runtime.hpp"
#include "plan/run_setup.hpp"

namespace meshtrain::train {

/// What a session is for: training holds gradients and optimizer state; inference (eval,
/// generate) holds the parameters only (parallel::FsdpOptions::forward_only).
enum class SessionUse { Train, Inference };

template <class T>
class Session {
 public:
  Session(const Runtime& rt, const plan::RunSetup& setup, SessionUse use = SessionUse::Train);

  const plan::RunSetup& setup() const { return setup_; }
  const parallel::DeviceMesh& mesh() const { return mesh_; }
  const model::TpDims& tp() const { return tp_; }
  parallel::FsdpEngine<T>& engine() { return *engine_; }
  const model::Transformer<T>& model() const { return *model_; }
  model::ComputeContext context() const;

  /// Loss summed over every token of every data-parallel rank: contributions of tp rank 0
  /// only (tp ranks hold the same value), summed over the world. Same value on all ranks.
  double global_sum(double local_tp_identical) const;
  /// The fused optimizer end of a step (gpu.fused_optimizer), made on first use for these
  /// AdamW settings (a training session's settings do not change).
  optim::FusedStep<T>& fused_step(const optim::AdamWSettings& s);

 private:
  plan::RunSetup setup_;
  parallel::DeviceMesh mesh_;
  model::TpDims tp_;
  std::unique_ptr<parallel::FsdpEngine<T>> engine_;
  std::unique_ptr<model::Transformer<T>> model_;
  std::unique_ptr<optim::FusedStep<T>> fused_;
};

}  // namespace meshtrain::train
