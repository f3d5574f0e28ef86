#include "train/step.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/log.hpp"
#include "core/trace.hpp"
#include "kernels/attention.hpp"
#include "kernels/step_scalars.hpp"
#include "parallel/grad_norm.hpp"
#include "parallel/micro_step.hpp"

namespace meshtrain::train {

namespace {
/// The step's device scalars (StepRunner::dev_), doubles.
enum StepScalar : int {
  kLossSum = 0,  // this rank's loss sum over the micro-steps, then (after the world sum) the global one
  kLoss,         // the step's mean loss
  kGate,         // [kGate, kGate + 1]: adamw_gate's gate (norm or NaN, clip coefficient)
  kClip,
  kApplied,      // 1 when the update was applied
  kChosen,       // the AdamW candidate adamw_gate took (the previous step's applied flag)
  kPrevApplied,  // kept across steps: the last executed step's applied flag
  kNorm,         // a copy of the norm, so that the read-back is one contiguous copy
  kPairSums,     // [kPairSums, + kernels::kPairSums): DPO/SimPO's sums over pairs (kernels::PairSum),
                 // this rank's, then the world's
  kStepScalars = kPairSums + kernels::kPairSums
};
/// What one read-back copies, from kLoss on: loss, gate, clip, applied, chosen, prev, norm and
/// the pair sums.
constexpr int kReadback = kStepScalars - kLoss;
constexpr int kSlots = 3;  // a launched step's events and read-back: 1 pending + 1 launching + 1 earlier end
}  // namespace

StepSettings step_settings(const plan::RunSetup& setup) {
  const plan::TrainSpec& tc = setup.spec.train;
  StepSettings s;
  s.schedule = {tc.lr, tc.min_lr, tc.warmup_steps, tc.steps, tc.lr_schedule == LrScheduleKind::Cosine};
  s.adam = {tc.beta1, tc.beta2, tc.adam_eps, tc.weight_decay, tc.decay_embeddings};
  s.grad_clip = tc.grad_clip;
  s.activation_checkpointing = setup.activation_checkpointing;  // as resolved (the planner may choose it)
  s.fused_optimizer = tc.fused_optimizer;
  s.graphs = tc.graphs;
  s.preference = tc.preference();
  s.pair_loss = preference_loss(tc);
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

/// A launched step not yet collected.
template <class T>
struct StepRunner<T>::Pending {
  StepResult r;
  bool ready = false;            // the host already knows its results (unfused optimizer)
  int slot = 0;
  bool back_to_back = false;     // queued while the previous step was still pending
  int prev_slot = 0;
  bool candidates_differ = false;  // the previous step was pending when this one was queued
  int update_number = 0;           // the unfused path's AdamW step (1-based)
};

template <class T>
StepRunner<T>::StepRunner(Session<T>& session, const StepSettings& settings, bool documents, bool counted)
    : session_(session), st_(settings), documents_(documents), counted_(counted || documents),
      batch_(session.setup().batch.grad_accum, session.setup().batch.micro_batch, session.setup().batch.seq_len,
             documents, /*token_index=*/!kDeviceIsHost, session.tp().vocab_start, session.tp().vocab,
             /*reference=*/settings.preference && !settings.pair_loss.simpo),
      dev_(kStepScalars, MemCategory::Workspace), current_(1, MemCategory::Workspace),
      readback_("meshtrain::step_readback", static_cast<std::size_t>(kSlots) * kReadback) {
  global_tokens_ = session.setup().batch.step_tokens();
  dev_.zero();
  const int B = session.setup().batch.micro_batch;
  if (counted_ || settings.preference)
    row_scale_ = Buffer<float>(static_cast<std::size_t>(B) * session.setup().batch.seq_len, MemCategory::Workspace);
  if (settings.preference) {
    pair_coef_ = Buffer<float>(static_cast<std::size_t>(B), MemCategory::Workspace);
    // SimPO: each sequence's counted targets; its reference is zeros (none is computed).
    if (settings.pair_loss.simpo) {
      lengths_ = Buffer<double>(static_cast<std::size_t>(B), MemCategory::Workspace);
      zero_reference_ = Buffer<double>(static_cast<std::size_t>(B), MemCategory::Workspace);
      zero_reference_.zero();
    }
  }
  const plan::RunSetup& setup = session.setup();
  GraphConditions c;
  c.requested = settings.graphs;
#if defined(MESHTRAIN_WITH_CUDA)
  c.cuda_build = true;
  c.nccl = true;  // a CUDA build's communicators are NCCL's (parallel::make_communicator)
#endif
  c.world = session.mesh().world().size();
  c.fused_optimizer = settings.fused_optimizer;
  c.fused_loss = setup.spec.kernel_paths.fused_loss;
  c.profiler = Kokkos::Profiling::profileLibraryLoaded();
  decision_ = train::graph_decision(c);
  graph_pool_ = std::make_unique<PrivatePool>();
  // Packed rows on cuDNN's variable-length attention: every micro-step of a step runs with
  // the step's graph batch, graphs or not (so that gpu.graphs=false computes the same numbers).
  keyed_steps_ = documents && kernels::attention_is_fused(session.context().attention, std::is_same_v<T, bf16>);
}

template <class T>
StepRunner<T>::~StepRunner() {
  // Nothing queued may outlive the buffers it reads.
  ExecSpace().fence();
}

template <class T>
void StepRunner<T>::run_body(const StepInput& in, Pending& p) {
  const plan::RunSetup& setup = session_.setup();
  const int B = setup.batch.micro_batch;
  const double global_tokens = in.counted_targets > 0 ? in.counted_targets : global_tokens_;
  // The counted targets change every step: with counted_ they reach the kernels from the
  // step's uploaded scalars (a per-row scale of 1 / counted, the same float as the by-value
  // scale it replaces: 1 x scale), never by value, so a captured step stays valid.
  const double* counted_dev = &batch_.scalars()->counted_targets;
  const float grad_scale = counted_ ? 1.0f : static_cast<float>(1.0 / global_tokens);
  if (counted_ && !st_.preference)
    kernels::fill_reciprocal(row_scale_.data(), static_cast<std::int64_t>(row_scale_.size()), counted_dev);
  parallel::FsdpEngine<T>& eng = session_.engine();
  double* loss_sum = dev_.data() + kLossSum;
  // DPO and SimPO: every pair of the global batch weighs 1 / pairs, whichever rank and
  // micro-step holds it; its terms are summed on the device (kPairSums), in pair order.
  const double global_pairs = setup.batch.global_batch / 2.0;
  double* pair_sums = dev_.data() + kPairSums;
  const double* lengths = nullptr;  // SimPO: the micro-step's response lengths (counted targets)
  const parallel::PairScales scales = [&](const double* policy, const double* reference) -> const float* {
    kernels::preference_pairs(st_.pair_loss, B, setup.batch.seq_len, policy, reference, lengths, 1.0 / global_pairs,
                              pair_sums, pair_coef_.data(), row_scale_.data());
    return row_scale_.data();
  };
  const std::uint64_t frozen_before = eng.frozen_gather_bytes();
  eng.begin_step();
  kernels::set_scalar(loss_sum, 0.0);
  if (st_.preference) kernels::zero_sums(pair_sums, kernels::kPairSums);
  for (int a = 0; a < setup.batch.grad_accum; ++a) {
    TraceRange trace("meshtrain::micro_step", a);
    eng.begin_micro(a);
    const model::BatchShape shape = batch_.shape(a);
    if (st_.preference) {
      // The reference: the stored log-probabilities (staged), SimPO's zeros (no reference
      // forward), or null: the base with the adapters off, computed here.
      const double* reference = in.reference ? batch_.ref(a) : nullptr;
      if (st_.pair_loss.simpo) {
        kernels::sequence_lengths(batch_.tgt(a), B, shape.T, lengths_.data());
        lengths = lengths_.data();
        reference = zero_reference_.data();
      }
      parallel::dpo_forward_backward(eng, session_.model(), session_.context(), batch_.in(a), batch_.tgt(a), shape,
                                     st_.activation_checkpointing, reference, scales);
    } else {
      parallel::forward_backward(eng, session_.model(), session_.context(), batch_.in(a), batch_.tgt(a), shape,
                                 grad_scale, st_.activation_checkpointing, loss_sum,
                                 counted_ ? row_scale_.data() : nullptr);
    }
  }
  {
    TraceRange trace("meshtrain::reduction_wait");
    eng.finish_step();
  }
  if (in.poison) parallel::poison_gradients(eng, NAN);
  TraceRange trace("meshtrain::optimizer");
  Communicator& world = session_.mesh().world().comm();
  StepResult& r = p.r;
  if (st_.fused_optimizer) {
    // Norm, clip, the skip decision and AdamW stay on the device; nothing is read back here.
    optim::FusedStep<T>& fs = session_.fused_step(st_.adam);
    fs.grad_norm(world, st_.grad_clip);
    if (!st_.preference) {
      // The world sum of tp-identical values: each tp group's first rank adds its own.
      if (session_.mesh().coord().tp != 0) kernels::set_scalar(loss_sum, 0.0);
      world.all_reduce(loss_sum, loss_sum, 1, DType::F64, ReduceOp::Sum);  // stream-ordered on NCCL
      if (counted_)
        kernels::divide_by_scalar(loss_sum, counted_dev, dev_.data() + kLoss);
      else
        kernels::divide_scalar(loss_sum, global_tokens, dev_.data() + kLoss);
    } else {
      world_pair_sums();
      // The loss: the pairs' mean, as dpo_metrics takes it (collect() forms the others).
      kernels::divide_by_scalar(pair_sums + kernels::kPairLoss, pair_sums + kernels::kPairCount, dev_.data() + kLoss);
    }
    kernels::adamw_gate(dev_.data() + kLoss, fs.norm_clip(), batch_.scalars()->adam, dev_.data() + kPrevApplied,
                        current_.data(), dev_.data() + kGate, dev_.data() + kApplied, dev_.data() + kChosen);
    fs.update(current_.data(), dev_.data() + kGate);
    // Whether or not the update was applied: a skipped step changed nothing, and the compute
    // copies AdamW did not write are converted again at the next gather (the same values),
    // so the host's state does not depend on a result it has not read yet.
    eng.params_updated_in_place();
  } else {
    // The unfused reference path reads the norm and the loss back before AdamW.
    r.grad_norm = parallel::global_grad_norm(eng, world);
    if (!st_.preference) {
      double local = 0;
      Kokkos::deep_copy(local, Kokkos::subview(dev_.view(), static_cast<std::size_t>(kLossSum)));
      r.loss = session_.global_sum(local) / global_tokens;
    } else {
      world_pair_sums();
      double sums[kernels::kPairSums];
      Kokkos::deep_copy(UView<double, HostMem>(sums, kernels::kPairSums),
                        UView<double>(pair_sums, kernels::kPairSums));
      r.dpo = dpo_metrics(pair_sums_of(sums));
      r.loss = r.dpo.loss;
    }
    // Loss and norm come from world reductions: every rank takes the same branch.
    r.applied = std::isfinite(r.loss) && std::isfinite(r.grad_norm);
    if (r.applied) {
      const double clip = st_.grad_clip > 0 ? std::min(1.0, st_.grad_clip / (r.grad_norm + 1e-6)) : 1.0;
      optim::adamw_update(eng, st_.adam, r.lr, p.update_number, clip);
    }
    p.ready = true;
  }
  r.frozen_gather_bytes = eng.frozen_gather_bytes() - frozen_before;
}

template <class T>
void StepRunner<T>::world_pair_sums() {
  // The world sum of tp-identical values (every tp rank of a group computed the same pairs):
  // each tp group's first rank adds its own.
  double* sums = dev_.data() + kPairSums;
  if (session_.mesh().coord().tp != 0) kernels::zero_sums(sums, kernels::kPairSums);
  session_.mesh().world().comm().all_reduce(sums, sums, kernels::kPairSums, DType::F64, ReduceOp::Sum);
}

template <class T>
int StepRunner<T>::step_key() {
  if (!keyed_steps_) return 0;
  // Every rank replays the same graph (it holds the step's collectives): the largest batch.
  // One small host reduction per step, also without graphs, whose steps then compute what
  // the replayed ones do.
  const int key = session_.mesh().world().max(batch_.ragged_batch_needed(), "packed attention graph batch");
  batch_.set_ragged_batch(key);
  return key;
}

template <class T>
void StepRunner<T>::capture_and_launch(const StepInput& in, Pending& p, int key) {
  parallel::FsdpEngine<T>& eng = session_.engine();
  const parallel::MeshDim& world = session_.mesh().world();
  auto g = std::make_unique<StepGraph>(*graph_pool_);
  const std::vector<std::int64_t> before = eng.step_state();
  const CommStats counted = comm_stats();
  g->begin_capture();
  run_body(in, p);
  std::string why;
  bool ok = g->end_capture(&why);
  if (ok && eng.step_state() != before) {
    ok = false;
    why = "the FSDP engine's host state after the captured step differs from the state before it";
  }
  // A graph with collectives must be launched by every rank of them, or by none.
  const bool all = world.min_max(ok ? 1.0 : 0.0, "graph capture").min > 0;
  if (all) {
    g->comm_operations = comm_stats().operations - counted.operations;
    g->comm_bytes = comm_stats().bytes - counted.bytes;
    g->frozen_gather_bytes = p.r.frozen_gather_bytes;
    g->launch();
    graphs_[key] = std::move(g);
    schedule_.captured(key);
    p.r.graph = true;
    p.r.comm_timed = false;
    if (world.rank() == 0) {
      const std::string kept = format_bytes(static_cast<double>(graph_pool_->bytes()));
      if (keyed_steps_)
        log::info("gpu.graphs: step %d captured into CUDA graph %d (of at most %d), for steps whose packed "
                  "micro-batches hold at most %d documents (%s of buffers kept for the graphs); later such steps "
                  "replay it",
                  p.r.step + 1, schedule_.graphs(), schedule_.max_graphs(), key, kept.c_str());
      else
        log::info("gpu.graphs: step %d captured into a CUDA graph (%s of buffers kept for it); later steps replay it",
                  p.r.step + 1, kept.c_str());
    }
    return;
  }
  // Nothing captured ran: run the step eagerly (the host state is the steady one it found).
  comm_stats().operations = counted.operations;
  comm_stats().bytes = counted.bytes;
  decision_ = {false, ok ? "a CUDA graph capture failed on another rank; every step is launched kernel by kernel"
                         : "the CUDA graph capture failed (" + why + "); every step is launched kernel by kernel"};
  if (world.rank() == 0) log::warn("gpu.graphs: %s", decision_.reason.c_str());
  g.reset();
  run_body(in, p);
}

template <class T>
void StepRunner<T>::launch(const StepInput& in, int updates) {
  MESHTRAIN_ASSERT(pending_.size() <= 1, "StepRunner: %zu steps queued and not collected", pending_.size());
  const plan::RunSetup& setup = session_.setup();
  const int accum = setup.batch.grad_accum;
  Pending p;
  p.r.step = in.step;
  p.r.lr = st_.schedule.at(in.step);
  p.slot = next_slot_;
  next_slot_ = (next_slot_ + 1) % kSlots;
  p.back_to_back = !pending_.empty();
  p.prev_slot = p.back_to_back ? pending_.back().slot : p.slot;
  comm_stats().tag = static_cast<std::uint64_t>(in.step);

  // The inputs: every micro-step's, and AdamW's scalars for both outcomes of the step still
  // queued (if any); the host's other work from here on does not wait for the device.
  MESHTRAIN_ASSERT((in.docs != nullptr) == documents_, "StepRunner made %s document starts, given a step %s them",
                   documents_ ? "with" : "without", in.docs ? "with" : "without");
  MESHTRAIN_ASSERT(in.counted_targets == 0 || counted_, "step %d: counted targets given to a StepRunner made without",
                   in.step + 1);
  batch_.begin();
  batch_.host_scalars().counted_targets = in.counted_targets > 0 ? in.counted_targets : global_tokens_;
  MESHTRAIN_ASSERT(!in.reference || batch_.host_ref(0) != nullptr,
                   "step %d: stored reference log-probabilities given to a run that is not DPO", in.step + 1);
  for (int a = 0; a < accum; ++a) {
    (*in.fill)(a, batch_.host_in(a), batch_.host_tgt(a));
    if (documents_) (*in.docs)(a, batch_.host_doc(a));
    if (in.reference) {
      const std::vector<double>* ref = (*in.reference)(a);
      MESHTRAIN_ASSERT(ref && static_cast<int>(ref->size()) == setup.batch.micro_batch,
                       "step %d: %zu stored reference log-probabilities for a micro-batch of %d", in.step + 1,
                       ref ? ref->size() : std::size_t{0}, setup.batch.micro_batch);
      std::copy(ref->begin(), ref->end(), batch_.host_ref(a));
    }
  }
  if (st_.fused_optimizer) {
    optim::FusedStep<T>& fs = session_.fused_step(st_.adam);
    p.candidates_differ = !pending_.empty();
    StepScalarsIn& sc = batch_.host_scalars();
    sc.adam[0] = fs.scalars(p.r.lr, updates + 1);
    sc.adam[1] = p.candidates_differ ? fs.scalars(p.r.lr, updates + 2) : sc.adam[0];
  } else {
    // The unfused path has read its results at launch: a step still queued is known.
    int known = updates;
    for (const Pending& q : pending_) known += q.ready && q.r.applied ? 1 : 0;
    p.update_number = known + 1;
  }
  batch_.upload();
  start_[p.slot].record();

  // Eager, captured or replayed.
  MESHTRAIN_ASSERT(!in.poison || in.eager, "step %d: a poisoned step must be marked eager on every rank", in.step + 1);
  const int key = step_key();
  const GraphAction action = schedule_.next(key, decision_.use && !in.eager);
  if (action == GraphAction::Replay) {
    TraceRange trace("meshtrain::step_graph_replay");
    StepGraph& g = *graphs_.at(key);
    g.launch();
    comm_stats().operations += g.comm_operations;
    comm_stats().bytes += g.comm_bytes;
    p.r.frozen_gather_bytes = g.frozen_gather_bytes;
    p.r.graph = true;
    p.r.comm_timed = false;
  } else if (action == GraphAction::Capture) {
    capture_and_launch(in, p, key);
  } else {
    if (schedule_.last_eager_was_full() && !told_full_ && session_.mesh().world().rank() == 0) {
      told_full_ = true;
      log::info("gpu.graphs: step %d and later steps whose packed micro-batches need a new graph batch (%d here) run "
                "kernel by kernel: %d graphs are kept already, the most a run keeps",
                in.step + 1, key, schedule_.max_graphs());
    }
    run_body(in, p);
  }

  if (!p.ready) {
    // The norm next to the other scalars, then one asynchronous copy into pinned memory.
    optim::FusedStep<T>& fs = session_.fused_step(st_.adam);
    using Range = std::pair<std::size_t, std::size_t>;
    Kokkos::deep_copy(ExecSpace(), Kokkos::subview(dev_.view(), Range(kNorm, kNorm + 1)),
                      UView<double>(const_cast<double*>(fs.norm_clip()), 1));
    const std::size_t at = static_cast<std::size_t>(p.slot) * kReadback;
    Kokkos::deep_copy(ExecSpace(), Kokkos::subview(readback_, Range(at, at + kReadback)),
                      Kokkos::subview(dev_.view(), Range(kLoss, kStepScalars)));
  }
  end_[p.slot].record();
  pending_.push_back(std::move(p));
}

template <class T>
void StepRunner<T>::release_graphs() {
  if (graphs_.empty()) return;
  MESHTRAIN_ASSERT(pending_.empty(), "StepRunner::release_graphs with %zu steps pending", pending_.size());
  const std::string kept = format_bytes(static_cast<double>(graph_pool_->bytes()));
  graphs_.clear();                                // each waits for the device first
  graph_pool_ = std::make_unique<PrivatePool>();  // the old one's blocks go back to the shared pool
  schedule_.forget_graphs();
  if (!told_release_ && session_.mesh().world().rank() == 0) {
    told_release_ = true;
    log::info("gpu.graphs: the step graphs are released for the evaluation (%s of buffers back to the pool, which it "
              "reuses); the next step captures again (so at every evaluation)",
              kept.c_str());
  }
}

template <class T>
int StepRunner<T>::pending() const {
  return static_cast<int>(pending_.size());
}

template <class T>
StepResult StepRunner<T>::collect() {
  MESHTRAIN_ASSERT(!pending_.empty(), "StepRunner::collect without a launched step");
  Pending p = std::move(pending_.front());
  pending_.pop_front();
  end_[p.slot].synchronize();
  StepResult r = p.r;
  if (!p.ready) {
    const double* v = readback_.data() + static_cast<std::size_t>(p.slot) * kReadback;
    r.loss = v[kLoss - kLoss];
    r.grad_norm = v[kNorm - kLoss];
    r.applied = v[kApplied - kLoss] != 0;
    if (st_.preference) r.dpo = dpo_metrics(pair_sums_of(v + (kPairSums - kLoss)));
    // The device chose the AdamW scalars from its own flag of the previous step: it must be
    // the flag the host read back for that step.
    const bool chosen = v[kChosen - kLoss] != 0;
    MESHTRAIN_ASSERT(!p.candidates_differ || chosen == last_applied_,
                     "step %d: the device took the AdamW scalars of a %s previous step, the host read it back %s",
                     r.step + 1, chosen ? "applied" : "skipped", last_applied_ ? "applied" : "skipped");
    last_applied_ = r.applied;
  }
#if defined(MESHTRAIN_WITH_CUDA)
  r.device_seconds = StreamEvent::seconds(p.back_to_back ? end_[p.prev_slot] : start_[p.slot], end_[p.slot]);
#endif
  if (r.comm_timed) {
    session_.mesh().progress();  // account the device-timed intervals that have completed
    r.comm = take_device_comm_times(static_cast<std::uint64_t>(r.step));
  }
  return r;
}

template <class T>
StepResult train_step(Session<T>& session, const StepSettings& st, int step, int& updates, const BatchFiller& fill,
                      bool poison, double counted_targets, const DocFiller* docs, const ReferenceFiller* reference) {
  StepRunner<T> runner(session, st, docs != nullptr, counted_targets > 0);
  StepInput in;
  in.step = step;
  in.fill = &fill;
  in.docs = docs;
  in.reference = reference;
  in.poison = poison;
  in.eager = poison;
  in.counted_targets = counted_targets;
  runner.launch(in, updates);
  StepResult r = runner.collect();
  if (r.applied) ++updates;
  return r;
}

template class StepRunner<float>;
template class StepRunner<bf16>;
template DpoSums global_dpo_sums<float>(const Session<float>&, const DpoSums&);
template DpoSums global_dpo_sums<bf16>(const Session<bf16>&, const DpoSums&);
template StepResult train_step<float>(Session<float>&, const StepSettings&, int, int&, const BatchFiller&, bool, double,
                                      const DocFiller*, const ReferenceFiller*);
template StepResult train_step<bf16>(Session<bf16>&, const StepSettings&, int, int&, const BatchFiller&, bool, double,
                                     const DocFiller*, const ReferenceFiller*);

}  // namespace meshtrain::train
