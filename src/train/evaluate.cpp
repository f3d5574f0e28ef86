#include "train/evaluate.hpp"

#include <algorithm>

#include "parallel/micro_step.hpp"
#include "train/step.hpp"

namespace meshtrain::train {

EvalWindows eval_batches_windows(int eval_batches, int grad_accum, std::uint64_t per_micro, std::uint64_t split_windows,
                                 bool* clamped) {
  EvalWindows w;
  w.micro_batches = static_cast<long long>(eval_batches) * grad_accum;
  // In double: eval_batches x grad_accum x per_micro may pass 2^64 (each is checked alone).
  const bool past = split_windows > 0 && static_cast<double>(w.micro_batches) * static_cast<double>(per_micro) >
                                             static_cast<double>(split_windows);
  if (past) {
    w.windows = split_windows;
    w.micro_batches = static_cast<long long>((split_windows + per_micro - 1) / per_micro);
  } else {
    w.windows = static_cast<std::uint64_t>(w.micro_batches) * per_micro;
  }
  if (clamped) *clamped = past;
  return w;
}

template <class T>
EvalResult evaluate(Session<T>& session, const data::EvalSampler& sampler, const EvalWindows& w,
                    TokenBatch& token_batch) {
  const parallel::DeviceMesh& mesh = session.mesh();
  const int B = token_batch.micro_batch, L = token_batch.seq_len;
  const model::BatchShape shape = token_batch.shape();
  double local = 0, counted = 0;
  DpoSums dpo;
  for (long long b = 0; b < w.micro_batches; ++b) {
    const std::uint64_t w0 = data::rank_first_window(0, static_cast<int>(b), B, mesh.shape().dp(), mesh.dp_rank());
    mesh.world().agree_on_error([&] { 
      sampler.fill(w0, B, token_batch.host_in.data(), token_batch.host_tgt.data(), token_batch.host_doc.empty() ? nullptr : token_batch.host_doc.data());
    });
    for (int i = 0; i < B; ++i)
      if (w0 + static_cast<std::uint64_t>(i) >= w.windows)
        std::fill_n(token_batch.host_tgt.begin() + static_cast<std::ptrdiff_t>(i) * L, L, -1);
    counted += token_batch.counted_targets();
    token_batch.upload();
    if (w.preference) {
      // Whole pairs (an even micro-batch from an even window); the padding windows at the end
      // of the last micro-batch are whole pairs too, and are not counted.
      const std::uint64_t real = w.windows > w0 ? std::min<std::uint64_t>(B, w.windows - w0) : 0;
      std::vector<double> stored;
      if (w.pair_loss.simpo) {
        stored.assign(static_cast<std::size_t>(B), 0.0);  // reference-free: no reference forward
      } else if (w.reference_rows) {
        const auto row_tokens = static_cast<std::uint64_t>(L) + 1;
        for (int i = 0; i < B; ++i)
          stored.push_back((*w.reference_rows)[sampler.window_start(w0 + static_cast<std::uint64_t>(i)) / row_tokens]);
      }
      const parallel::SequenceLogps lp = parallel::forward_sequence_logps(
          session.engine(), session.model(), session.context(), token_batch.in.data(), token_batch.tgt.data(), shape,
          w.reference_rows || w.pair_loss.simpo ? &stored : nullptr);
      preference_pairs(w.pair_loss, lp.policy, lp.reference, sequence_lengths(token_batch.host_tgt.data(), B, L), 0.0,
                       static_cast<int>(real / 2), dpo);
      continue;
    }
    local += parallel::forward_loss(session.engine(), session.model(), session.context(), token_batch.in.data(),
                                    token_batch.tgt.data(), shape);
  }
  EvalResult r;
  if (w.preference) {
    r.tokens = session.global_sum(counted);
    r.dpo = dpo_metrics(global_dpo_sums(session, dpo));
    r.loss = r.dpo.loss;
    return r;
  }
  // Unmasked data counts every target of every real window; only masked data needs the sum.
  r.tokens = w.masked || sampler.document_masked() ? session.global_sum(counted) : static_cast<double>(w.windows) * L;
  r.loss = session.global_sum(local) / r.tokens;
  return r;
}

template EvalResult evaluate<float>(Session<float>&, const data::EvalSampler&, const EvalWindows&, TokenBatch&);
template EvalResult evaluate<bf16>(Session<bf16>&, const data::EvalSampler&, const EvalWindows&, TokenBatch&);

}  // namespace meshtrain::train
