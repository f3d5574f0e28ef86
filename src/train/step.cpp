#include "train/step.hpp"

#include <algorithm>
#include <cmath>

#include "parallel/grad_norm.hpp"
#include "parallel/micro_step.hpp"
#include "train/token_batch.hpp"

namespace meshtrain::train {

StepSettings step_settings(const plan::RunSetup& setup) {
  const plan::TrainSpec& tc = setup.spec.train;
  StepSettings s;
  s.schedule = {tc.lr, tc.min_lr, tc.warmup_steps, tc.steps, tc.lr_schedule == LrScheduleKind::Cosine};
  s.adam = {tc.beta1, tc.beta2, tc.adam_eps, tc.weight_decay, tc.decay_embeddings};
  s.grad_clip = tc.grad_clip;
  s.activation_checkpointing = setup.activation_checkpointing;  // as resolved (the planner may choose it)
  s.fused_optimizer = tc.fused_optimizer;
  s.dpo = tc.dpo();
  s.dpo_beta = tc.dpo_beta;
  return s;
}

template <class T>
DpoSums global_dpo_sums(const Session<T>& session, const DpoSums& local) {
  DpoSums g;
  g.loss = session.global_sum(local.loss);
  g.rewards_chosen = session.global_sum(local.rewards_chosen);
  g.rewards_rejected = session.global_sum(local.rewards_rejected);
  g.correct = session.global_sum(local.correct);
  g.logps_chosen = session.global_sum(local.logps_chosen);
  g.logps_rejected = session.global_sum(local.logps_rejected);
  g.pairs = session.global_sum(local.pairs);
  return g;
}

template <class T>
StepResult train_step(Session<T>& session, const StepSettings& st, int step, int& updates, const BatchFiller& fill,
                      bool poison, double counted_targets, const DocFiller* docs,
                      const ReferenceFiller* reference) {
  const plan::RunSetup& setup = session.setup();
  const int B = setup.batch.micro_batch, seq_len = setup.batch.seq_len;
  const double global_tokens = counted_targets > 0 ? counted_targets : setup.batch.step_tokens();
  const float grad_scale = static_cast<float>(1.0 / global_tokens);
  parallel::FsdpEngine<T>& eng = session.engine();

  TokenBatch token_batch(B, seq_len, docs != nullptr);
  const model::BatchShape shape = token_batch.shape();
  // DPO: every pair of the global batch weighs 1 / pairs, whichever rank and micro-step holds it.
  const double global_pairs = setup.batch.global_batch / 2.0;
  DpoSums dpo_local;
  const parallel::SequenceCoefficients coefficients = [&](const std::vector<double>& policy,
                                                          const std::vector<double>& reference) {
    return dpo_pairs(policy, reference, st.dpo_beta, 1.0 / global_pairs, B / 2, dpo_local);
  };
  eng.begin_step();
  double local_loss = 0;
  for (int a = 0; a < setup.batch.grad_accum; ++a) {
    eng.begin_micro(a);
    fill(a, token_batch.host_in.data(), token_batch.host_tgt.data());
    if (docs) (*docs)(a, token_batch.host_doc.data());
    token_batch.upload();
    if (st.dpo) {
      parallel::dpo_forward_backward(eng, session.model(), session.context(), token_batch.in.data(),
                                     token_batch.tgt.data(), shape, st.activation_checkpointing,
                                     reference ? (*reference)(a) : nullptr, coefficients);
    } else {
      local_loss += parallel::forward_backward(eng, session.model(), session.context(), token_batch.in.data(),
                                               token_batch.tgt.data(), shape, grad_scale, st.activation_checkpointing);
    }
  }
  eng.finish_step();
  if (poison) parallel::poison_gradients(eng, NAN);

  StepResult r;
  r.lr = st.schedule.at(step);
  // The step's loss, the same on every rank (world sums of tp-identical values).
  const auto step_loss = [&] {
    if (!st.dpo) return session.global_sum(local_loss) / global_tokens;
    r.dpo = dpo_metrics(global_dpo_sums(session, dpo_local));
    return r.dpo.loss;
  };
  if (st.fused_optimizer) {
    // Norm, clip and AdamW stay on the device; AdamW skips itself when the norm is not
    // finite, so the host reads the norm only afterwards, to count the update and log it.
    optim::FusedStep<T>& fs = session.fused_step(st.adam);
    fs.grad_norm(session.mesh().world().comm(), st.grad_clip);
    r.loss = step_loss();
    if (std::isfinite(r.loss)) fs.update(r.lr, updates + 1);
    r.grad_norm = fs.norm();
    // Loss and norm come from world reductions: every rank takes the same branch.
    r.applied = std::isfinite(r.loss) && std::isfinite(r.grad_norm);
    if (r.applied) {
      ++updates;
      eng.params_updated_in_place();
    }
    return r;
  }
  r.grad_norm = parallel::global_grad_norm(eng, session.mesh().world().comm());
  r.loss = step_loss();
  // Loss and norm come from world reductions: every rank takes the same branch.
  r.applied = std::isfinite(r.loss) && std::isfinite(r.grad_norm);
  if (r.applied) {
    const double clip = st.grad_clip > 0 ? std::min(1.0, st.grad_clip / (r.grad_norm + 1e-6)) : 1.0;
    ++updates;
    optim::adamw_update(eng, st.adam, r.lr, updates, clip);
  }
  return r;
}

template DpoSums global_dpo_sums<float>(const Session<float>&, const DpoSums&);
template DpoSums global_dpo_sums<bf16>(const Session<bf16>&, const DpoSums&);
template StepResult train_step<float>(Session<float>&, const StepSettings&, int, int&, const BatchFiller&, bool, double,
                                      const DocFiller*, const ReferenceFiller*);
template StepResult train_step<bf16>(Session<bf16>&, const StepSettings&, int, int&, const BatchFiller&, bool, double,
                                     const DocFiller*, const ReferenceFiller*);

}  // namespace meshtrain::train
