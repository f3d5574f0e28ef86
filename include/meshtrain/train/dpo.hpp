#pragma once
/// \brief Direct preference optimization (train.objective = dpo), the arithmetic of its pairs.
///
/// A micro-batch of a preference dataset holds whole pairs: sequence 2j is pair j's chosen
/// response, 2j + 1 its rejected one (data::Sampler::set_pairs). With logp = the sum of
/// log p(token) over a response's counted targets, for the policy (the trained model) and the
/// reference (the base with the adapters off, or the initial policy's stored values; see
/// kDpoReferenceSetting):
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
///
/// SimPO (train.objective = simpo; Meng, Xia and Chen 2024) needs no reference: with n the
/// response's counted targets, the rewards are length-normalized log-probabilities,
///
///   rewards_chosen   = beta * logp_c / n_c,  rewards_rejected = beta * logp_r / n_r
///   loss             = -log sigmoid(rewards_chosen - rewards_rejected - gamma)
///
/// (gamma: the target margin), so the coefficients are +-beta sigmoid(-z) / (n P), z the
/// argument of the sigmoid; the margin logged is rewards_chosen - rewards_rejected, and a pair
/// counts as right when the chosen reward is the larger, as TRL's CPOTrainer logs them.
///
/// One expression computes a pair on the host (here) and on the device (the training step,
/// kernels/preference.hpp: kernels::pair_terms).

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/preference.hpp"
#include "plan/run_setup.hpp"

namespace meshtrain::train {

/// What a DPO run's reference is, recorded in its checkpoints' run settings
/// (resume_settings.hpp) under kDpoReferenceSetting, so that a resume keeps it and `eval`
/// can tell whether it can compute it:
///   * kDpoReferenceStored: the initial policy's log-probabilities of every train and
///     validation row, computed before step 1 and stored in output.dir/reference_logps.json
///     (train/reference_logps.hpp). Full fine-tuning, and LoRA whose checkpoint.init_from
///     brought adapters (a LoRA checkpoint whose adapters the run continues): there the
///     initial policy is the base *with* those adapters.
///   * kDpoReferenceAdaptersOff: the frozen base with the adapters switched off, computed
///     alongside every step. LoRA with fresh adapters (B = 0): the initial policy itself.
inline constexpr const char* kDpoReferenceSetting = "train.dpo_reference";
inline constexpr const char* kDpoReferenceStored = "stored";
inline constexpr const char* kDpoReferenceAdaptersOff = "adapters_off";

/// What train.objective = dpo needs of a resolved run beyond its dataset
/// (data::check_dataset_rows): an even micro-batch, so that every micro-batch holds whole
/// pairs, and LoRA adapters, whose frozen base is the reference -- unless `stored_reference`
/// (training: the initial weights' log-probabilities, train/reference_logps.hpp). UserError
/// naming the command ("train", "eval") and the fix; nothing for train.objective = sft.
/// simpo: an even micro-batch only (no reference).
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

/// SimPO's pairs, as dpo_pairs: `lengths` (policy.size()) the counted targets of each sequence
/// (a response with none counts as one: its reward is then 0, not a division by 0).
std::vector<float> simpo_pairs(const std::vector<double>& policy, const std::vector<double>& lengths, double beta,
                               double gamma, double pair_scale, int pairs, DpoSums& sums);

/// Which pair loss, with its settings: simpo, beta (train.dpo_beta or train.simpo_beta) and
/// gamma (train.simpo_gamma, SimPO only); the struct the device kernels take.
using PreferenceLoss = kernels::PairLoss;
/// From train.objective and its keys.
PreferenceLoss preference_loss(const plan::TrainSpec& train);

/// dpo_pairs or simpo_pairs, as `loss` says (`reference` unused by SimPO, `lengths` by DPO).
std::vector<float> preference_pairs(const PreferenceLoss& loss, const std::vector<double>& policy,
                                    const std::vector<double>& reference, const std::vector<double>& lengths,
                                    double pair_scale, int pairs, DpoSums& sums);

/// Counted targets (>= 0) of each of the B sequences of T targets in `targets` (host): SimPO's
/// response lengths.
std::vector<double> sequence_lengths(const std::int32_t* targets, int B, int T);

/// The means of world-summed `sums` (a NaN loss when no pair was counted).
DpoMetrics dpo_metrics(const DpoSums& sums);

/// The sums of kernels::preference_pairs (kernels::kPairSums doubles, in kernels::PairSum
/// order) as DpoSums.
DpoSums pair_sums_of(const double* sums);

}  // namespace meshtrain::train
