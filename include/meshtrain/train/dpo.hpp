#pragma once
/// \brief Direct preference optimization (train.objective = dpo), the arithmetic of its pairs.
///
/// A micro-batch of a preference dataset holds whole pairs: sequence 2j is pair j's chosen
/// response, 2j + 1 its rejected one (data::Sampler::set_pairs). With logp = the sum of
/// log p(token) over a response's counted targets, for the policy (the trained model) and the
/// reference (the base with the adapters off, or the stored initial weights' values):
///
///   rewards_chosen   = beta * (logp_c - ref_c),  rewards_rejected = beta * (logp_r - ref_r)
///   margin z         = rewards_chosen - rewards_rejected
///   loss             = -log sigmoid(z), averaged over the pairs of the global batch
///
/// dloss/dlogp_c = -beta * sigmoid(-z) / P and dloss/dlogp_r = +beta * sigmoid(-z) / P (P pairs
/// in the global batch); since dlogp/dlogits is minus the cross-entropy gradient, each
/// sequence's cross-entropy gradient is scaled by +beta sigmoid(-z) / P (chosen) and
/// -beta sigmoid(-z) / P (rejected). A pair's coefficient depends on that pair alone, so it is
/// known on the rank that holds it, before its backward, on any mesh.

#include <string>
#include <vector>

#include "plan/run_setup.hpp"

namespace meshtrain::train {

/// What train.objective = dpo needs of a resolved run beyond its dataset
/// (data::check_dataset_rows): an even micro-batch, so that every micro-batch holds whole
/// pairs, and LoRA adapters, whose frozen base is the reference -- unless `stored_reference`
/// (training: the initial weights' log-probabilities, train/reference_logps.hpp). UserError
/// naming the command ("train", "eval") and the fix; nothing for train.objective = sft.
void check_dpo_setup(const plan::RunSetup& setup, const std::string& command, bool stored_reference = false);

/// Sums over pairs (this rank's, then the world's): divided by `pairs` they are the metrics.
struct DpoSums {
  double loss = 0, rewards_chosen = 0, rewards_rejected = 0, correct = 0;
  double logps_chosen = 0, logps_rejected = 0;
  double pairs = 0;
};

/// Means over the pairs, as TRL's DPOTrainer logs them (rewards/chosen, rewards/rejected,
/// rewards/margins, rewards/accuracies, logps/chosen, logps/rejected).
struct DpoMetrics {
  double loss = 0, rewards_chosen = 0, rewards_rejected = 0, margins = 0, accuracy = 0;
  double logps_chosen = 0, logps_rejected = 0;
};

/// Adds the first `pairs` pairs of a micro-batch's sequences (policy, reference: (2 x pairs)
/// or more, the rest being padding) to `sums` and returns the coefficient of each sequence's
/// cross-entropy gradient, (policy.size()), padding 0: +-beta sigmoid(-z) * pair_scale
/// (pair_scale = 1 / pairs of the global batch).
std::vector<float> dpo_pairs(const std::vector<double>& policy, const std::vector<double>& reference, double beta,
                             double pair_scale, int pairs, DpoSums& sums);

/// The means of world-summed `sums` (a NaN loss when no pair was counted).
DpoMetrics dpo_metrics(const DpoSums& sums);

}  // namespace meshtrain::train
