#pragma once
/// \brief Which tokens one sampled generation step draws from, and with what weights: Hugging
/// Face generate's warpers in its order -- temperature, top-k, top-p (nucleus), min-p -- on
/// one position's logits. A pure function (no generator, no device): generate_ids draws from
/// its result, tests/train/test_sampling_filter.cpp compares it with a Python reference of
/// Hugging Face's algorithm (tests/train/sampling_filter_reference.py).
///
/// The tokens are ranked most likely first, equal logits by the lower id first (as greedy's
/// argmax picks the lower id); every filter keeps a prefix of that ranking, so ties at a
/// filter's boundary keep the lower ids:
///  * top-k keeps exactly the first k (Hugging Face's TopKLogitsWarper keeps every token equal
///    to the k-th too);
///  * top-p drops a token when it and every token ranked after it hold at most 1 - top_p of
///    the probability left by top-k (TopPLogitsWarper's test, summed from the least likely
///    end in double precision); the first token always stays. So the nucleus is the shortest
///    prefix holding at least top_p. (Hugging Face ranks equal probabilities as torch.sort
///    leaves them -- stable in practice, which drops the lower id first.)
///  * min-p drops the tokens whose probability is below min_p times the most likely one's
///    (MinPLogitsWarper; tokens equal to the most likely always stay).

#include <string>
#include <vector>

namespace meshtrain::train {

/// Sampling settings of one step. temperature 0 (greedy) is generate_ids' argmax and never
/// reaches the filter.
struct SamplingSettings {
  double temperature = 0.8;  ///< > 0: the logits are divided by it
  int top_k = 40;            ///< 0 = whole vocabulary
  double top_p = 1.0;        ///< (0, 1]; 1 = off (the filter does not run, as Hugging Face adds no warper)
  double min_p = 0.0;        ///< [0, 1]; 0 = off
};

/// The tokens a step draws from: a prefix of the ranking above.
struct SamplingCandidates {
  std::vector<int> ids;         ///< token ids, most likely first
  std::vector<double> weights;  ///< exp((logit - max logit) / temperature), unnormalised (the first is 1)
};

/// The candidates of one position's full-vocabulary `logits` (non-empty) under `settings`
/// (temperature > 0). With top_p = 1 and min_p = 0 these are the top-k tokens and weights,
/// bit for bit what generate drew from before top-p and min-p existed.
SamplingCandidates sampling_candidates(const std::vector<float>& logits, const SamplingSettings& settings);

/// The settings as generate's log and the trainer's sample name them: "temperature 0.8,
/// top-k 40, top-p 1, min-p 0".
std::string sampling_settings_text(const SamplingSettings& settings);

}  // namespace meshtrain::train
