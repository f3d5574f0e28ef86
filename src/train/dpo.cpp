#include "train/dpo.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "kernels/preference.hpp"

namespace meshtrain::train {

namespace {
/// The first `pairs` pairs of a micro-batch through kernels::pair_terms (the expression the
/// training step's device kernel evaluates), their sums added in pair order.
std::vector<float> pairs_of(const kernels::PairLoss& loss, const std::vector<double>& policy,
                            const std::vector<double>* reference, const std::vector<double>* lengths,
                            double pair_scale, int pairs, DpoSums& sums) {
  std::vector<float> coef(policy.size(), 0.0f);
  for (int j = 0; j < pairs; ++j) {
    const std::size_t c = 2 * static_cast<std::size_t>(j), r = c + 1;
    const kernels::PairTerms t =
        kernels::pair_terms(loss, policy[c], policy[r], reference ? (*reference)[c] : 0.0,
                            reference ? (*reference)[r] : 0.0, lengths ? (*lengths)[c] : 1.0,
                            lengths ? (*lengths)[r] : 1.0, pair_scale);
    double acc[kernels::kPairSums] = {sums.loss,         sums.rewards_chosen, sums.rewards_rejected, sums.correct,
                                      sums.logps_chosen, sums.logps_rejected, sums.pairs};
    kernels::add_pair(acc, t, policy[c], policy[r]);  // the device kernel's additions, in its order
    sums = pair_sums_of(acc);
    coef[c] = static_cast<float>(t.coef_c);
    coef[r] = static_cast<float>(t.coef_r);
  }
  return coef;
}
}  // namespace

std::vector<float> dpo_pairs(const std::vector<double>& policy, const std::vector<double>& reference, double beta,
                             double pair_scale, int pairs, DpoSums& sums) {
  MESHTRAIN_ASSERT(policy.size() == reference.size() && pairs >= 0 && 2 * static_cast<std::size_t>(pairs) <= policy.size(),
                   "DPO: %zu policy and %zu reference sequences for %d pairs", policy.size(), reference.size(), pairs);
  return pairs_of({false, beta, 0.0}, policy, &reference, nullptr, pair_scale, pairs, sums);
}

std::vector<float> simpo_pairs(const std::vector<double>& policy, const std::vector<double>& lengths, double beta,
                               double gamma, double pair_scale, int pairs, DpoSums& sums) {
  MESHTRAIN_ASSERT(policy.size() == lengths.size() && pairs >= 0 && 2 * static_cast<std::size_t>(pairs) <= policy.size(),
                   "SimPO: %zu policy log-probabilities and %zu lengths for %d pairs", policy.size(), lengths.size(),
                   pairs);
  return pairs_of({true, beta, gamma}, policy, nullptr, &lengths, pair_scale, pairs, sums);
}

PreferenceLoss preference_loss(const plan::TrainSpec& t) {
  PreferenceLoss l;
  l.simpo = t.simpo();
  l.beta = l.simpo ? t.simpo_beta : t.dpo_beta;
  l.gamma = l.simpo ? t.simpo_gamma : 0.0;
  return l;
}

std::vector<float> preference_pairs(const PreferenceLoss& loss, const std::vector<double>& policy,
                                    const std::vector<double>& reference, const std::vector<double>& lengths,
                                    double pair_scale, int pairs, DpoSums& sums) {
  return loss.simpo ? simpo_pairs(policy, lengths, loss.beta, loss.gamma, pair_scale, pairs, sums)
                    : dpo_pairs(policy, reference, loss.beta, pair_scale, pairs, sums);
}

std::vector<double> sequence_lengths(const std::int32_t* targets, int B, int T) {
  std::vector<double> n(static_cast<std::size_t>(B), 0.0);
  for (int b = 0; b < B; ++b)
    n[static_cast<std::size_t>(b)] = static_cast<double>(
        std::count_if(targets + static_cast<std::ptrdiff_t>(b) * T, targets + static_cast<std::ptrdiff_t>(b + 1) * T,
                      [](std::int32_t t) { return t >= 0; }));
  return n;
}

void check_dpo_setup(const plan::RunSetup& setup, const std::string& command, bool stored_reference) {
  if (!setup.spec.train.preference()) return;
  const char* objective = choice_name(setup.spec.train.objective);
  MESHTRAIN_REQUIRE(setup.batch.micro_batch % 2 == 0,
                    "%s: train.objective=%s takes a preference pair's chosen and rejected rows in one micro-batch, so "
                    "train.micro_batch must be even; it is %d%s",
                    command.c_str(), objective, setup.batch.micro_batch,
                    setup.spec.batch.micro_batch == 0 ? " (chosen by the planner): give an even train.micro_batch" : "");
  if (setup.spec.train.simpo()) return;  // reference-free
  MESHTRAIN_REQUIRE(stored_reference || setup.spec.dims.lora_rank > 0,
                    "%s: train.objective=dpo needs LoRA adapters (model.lora_rank > 0) here: its reference model is "
                    "the frozen base with the adapters switched off (a training run without adapters stores its "
                    "initial weights' log-probabilities in its output.dir instead, which %s does not read)",
                    command.c_str(), command.c_str());
}

DpoSums pair_sums_of(const double* v) {
  DpoSums s;
  s.loss = v[kernels::kPairLoss];
  s.rewards_chosen = v[kernels::kPairRewardsChosen];
  s.rewards_rejected = v[kernels::kPairRewardsRejected];
  s.correct = v[kernels::kPairCorrect];
  s.logps_chosen = v[kernels::kPairLogpsChosen];
  s.logps_rejected = v[kernels::kPairLogpsRejected];
  s.pairs = v[kernels::kPairCount];
  return s;
}

DpoMetrics dpo_metrics(const DpoSums& s) {
  DpoMetrics m;
  const double n = s.pairs > 0 ? s.pairs : std::numeric_limits<double>::quiet_NaN();
  m.loss = s.loss / n;
  m.rewards_chosen = s.rewards_chosen / n;
  m.rewards_rejected = s.rewards_rejected / n;
  m.margins = (s.rewards_chosen - s.rewards_rejected) / n;
  m.accuracy = s.correct / n;
  m.logps_chosen = s.logps_chosen / n;
  m.logps_rejected = s.logps_rejected / n;
  return m;
}

}  // namespace meshtrain::train
