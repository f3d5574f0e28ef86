#include "train/sampling_filter.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.hpp"
#include "core/format.hpp"

namespace meshtrain::train {
namespace {

/// Top-p on the weights of the ranked candidates (most likely first): how many stay.
/// TopPLogitsWarper's test, token by token from the least likely end: the probabilities
/// summed so far (this token's included) <= 1 - top_p drops it. The sums only grow, so the
/// first token kept ends the dropping; the most likely token is never tested.
std::size_t nucleus_size(const std::vector<double>& w, double top_p) {
  double total = 0;
  for (std::size_t i = w.size(); i-- > 0;) total += w[i];
  const double drop_at_most = 1 - top_p;
  double cumulative = 0;
  std::size_t keep = w.size();
  for (std::size_t i = w.size(); i-- > 1;) {
    cumulative += w[i] / total;
    if (cumulative > drop_at_most) break;
    keep = i;
  }
  return keep;
}

/// Min-p on the ranked weights: how many stay. MinPLogitsWarper drops a probability below
/// min_p times the largest; the weights are the probabilities over the largest (w[0] = 1),
/// and they fall along the ranking, so the tokens kept are a prefix.
std::size_t min_p_size(const std::vector<double>& w, double min_p) {
  const double floor = min_p * w[0];
  std::size_t keep = 1;
  while (keep < w.size() && !(w[keep] < floor)) ++keep;
  return keep;
}

}  // namespace

SamplingCandidates sampling_candidates(const std::vector<float>& logits, const SamplingSettings& s) {
  MESHTRAIN_ASSERT(!logits.empty() && s.temperature > 0, "sampling_candidates: %zu logits at temperature %g",
                   logits.size(), s.temperature);
  const int n = static_cast<int>(logits.size());
  SamplingCandidates c;
  std::vector<int>& order = c.ids;
  order.resize(n);
  std::iota(order.begin(), order.end(), 0);
  // Top-k: the k most likely, equal logits by the lower id.
  const int k = s.top_k > 0 ? std::min(s.top_k, n) : n;
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  order.resize(k);
  // Temperature: the softmax's numerators over the largest, in double.
  c.weights.resize(k);
  const double mx = logits[order[0]];
  for (int i = 0; i < k; ++i) c.weights[i] = std::exp((logits[order[i]] - mx) / s.temperature);
  // Off means not run (as Hugging Face adds no warper): the top-k draw stays bit for bit.
  std::size_t keep = c.weights.size();
  if (s.top_p < 1) keep = std::min(keep, nucleus_size(c.weights, s.top_p));
  // After top-p, as in Hugging Face; the ratio to the largest does not depend on what top-p
  // dropped (renormalising scales every probability alike).
  if (s.min_p > 0) keep = std::min(keep, min_p_size(c.weights, s.min_p));
  c.ids.resize(keep);
  c.weights.resize(keep);
  return c;
}

std::string sampling_settings_text(const SamplingSettings& s) {
  return strprintf("temperature %g, top-k %d, top-p %g, min-p %g", s.temperature, s.top_k, s.top_p, s.min_p);
}

}  // namespace meshtrain::train
