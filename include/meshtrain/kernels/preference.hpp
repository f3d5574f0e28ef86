#pragma once
/// \brief The pair losses of preference tuning (train.objective = dpo or simpo; the formulas
/// are in train/dpo.hpp) as one expression, pair_terms, for the host (train::dpo_pairs and
/// simpo_pairs: evaluation, tests) and the device (preference_pairs: the training step, which
/// then reads nothing back inside a step and can be replayed from a CUDA graph,
/// train/step_graph.hpp); and the device halves of what feeds it: each sequence's
/// log-probability from the head's per-row losses, and SimPO's response lengths.
///
/// On the host the kernels compute exactly the host functions' double operations in the same
/// order (one thread keeps the pairs' sums in pair order), so a host build's step is bit for
/// bit what it was when the pairs were computed on the host.

#include <cstdint>

#include "core/kokkos_compat.hpp"

namespace meshtrain::kernels {

/// Which pair loss, with its settings (train::PreferenceLoss).
struct PairLoss {
  bool simpo = false;  ///< false: DPO
  double beta = 0.1;
  double gamma = 0;    ///< SimPO's target margin
};

/// The sums over pairs that preference_pairs adds to, in the order of train::DpoSums.
enum PairSum : int {
  kPairLoss = 0,
  kPairRewardsChosen,
  kPairRewardsRejected,
  kPairCorrect,
  kPairLogpsChosen,
  kPairLogpsRejected,
  kPairCount,
  kPairSums
};

/// One pair's terms: its loss, rewards, whether it is right (1 or 0), and the coefficients of
/// its chosen (c) and rejected (r) sequences' cross-entropy gradients.
struct PairTerms {
  double loss = 0, chosen = 0, rejected = 0, correct = 0;
  double coef_c = 0, coef_r = 0;
};

/// The terms of the pair (chosen c, rejected r) from the policy's log-probabilities, the
/// reference's (DPO; unused by SimPO) and the response lengths (SimPO's counted targets, at
/// least 1; unused by DPO); `pair_scale`: 1 / the pairs of the global batch.
KOKKOS_INLINE_FUNCTION PairTerms pair_terms(const PairLoss& p, double policy_c, double policy_r, double ref_c,
                                            double ref_r, double len_c, double len_r, double pair_scale) {
  PairTerms t;
  // DPO divides nothing: n = 1 (x / 1.0 is x exactly).
  const double nc = p.simpo ? math::max(1.0, len_c) : 1.0, nr = p.simpo ? math::max(1.0, len_r) : 1.0;
  t.chosen = p.simpo ? p.beta * policy_c / nc : p.beta * (policy_c - ref_c);
  t.rejected = p.simpo ? p.beta * policy_r / nr : p.beta * (policy_r - ref_r);
  const double z = p.simpo ? t.chosen - t.rejected - p.gamma : t.chosen - t.rejected;
  // -log sigmoid(z) = log(1 + exp(-z)), without overflow for either sign of z.
  t.loss = math::log1p(math::exp(-math::fabs(z))) + math::max(-z, 0.0);
  t.correct = (p.simpo ? t.chosen > t.rejected : z > 0) ? 1 : 0;
  const double sig_neg = 1.0 / (1.0 + math::exp(z));  // sigmoid(-z)
  t.coef_c = p.beta * sig_neg * pair_scale / nc;
  t.coef_r = -p.beta * sig_neg * pair_scale / nr;
  return t;
}

/// Adds a pair's terms to sums (kPairSums doubles), in the order of train::DpoSums.
KOKKOS_INLINE_FUNCTION void add_pair(double* sums, const PairTerms& t, double policy_c, double policy_r) {
  sums[kPairLoss] += t.loss;
  sums[kPairRewardsChosen] += t.chosen;
  sums[kPairRewardsRejected] += t.rejected;
  sums[kPairCorrect] += t.correct;
  sums[kPairLogpsChosen] += policy_c;
  sums[kPairLogpsRejected] += policy_r;
  sums[kPairCount] += 1;
}

/// \brief One micro-batch of B sequences (B / 2 pairs: sequence 2j chosen, 2j + 1 rejected)
/// of T rows each, on the device: adds every pair's terms to `sums` (kPairSums doubles) in pair
/// order, writes each sequence's coefficient to `coef` (B floats) and then to each of its T
/// rows of `row_scale` (B*T floats: the head's per-row cross-entropy gradient scale).
/// policy, reference (DPO; may be null for SimPO), lengths (SimPO; may be null for DPO): (B)
/// device doubles. Host twin: train::preference_pairs (test_preference_kernels compares them).
void preference_pairs(const PairLoss& loss, int B, int T, const double* policy, const double* reference,
                      const double* lengths, double pair_scale, double* sums, float* coef, float* row_scale);

/// lengths[b] = the targets >= 0 among row b's T (B sequences; device): SimPO's response
/// lengths. Host twin: train::sequence_lengths.
void sequence_lengths(const std::int32_t* targets, int B, int T, double* lengths);

/// logp[b] = -(((0 - losses[b T]) - losses[b T + 1]) ... ) in double, in token order: each
/// sequence's log-probability from the head's per-row losses (-log p(target), 0 where the
/// target is ignored; cross_entropy_row_losses), B sequences of T rows, device.
template <class A>
void sequence_logps(const A* losses, int B, int T, double* logp);

/// sums[i] = 0 for i < n (a kernel, for a graph).
void zero_sums(double* sums, int n);

}  // namespace meshtrain::kernels
