// train::sampling_candidates, the tokens a sampled generation step draws from:
//  * against a PyTorch reference of Hugging Face's temperature, top-k, top-p and min-p
//    warpers (sampling_filter_reference.py; its cases, with what it kept, are
//    sampling_filter_cases.inc): vocabularies of 1 to 50257 tokens, ties, top_p near 0 and
//    1, with top-k, temperature and min-p;
//  * with top-p and min-p off, the top-k tokens and weights generate drew from before they
//    existed, bit for bit, and so the same draws;
//  * a top_p below every token's probability leaves greedy's token (the lower id of a tie).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "train/sampling_filter.hpp"

using meshtrain::train::sampling_candidates;
using meshtrain::train::SamplingCandidates;
using meshtrain::train::SamplingSettings;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

/// A generated vocabulary: logit_i = (((i * mult + add) % mod) - mod / 2) / 2^shift, exact in
/// float32 (the reference computes the same).
struct Generated {
  int vocab;
  std::uint64_t mult, add, mod;
  int shift;
};

struct ReferenceCase {
  const char* name;
  std::vector<float> logits;  // explicit, or empty: `generated`
  Generated generated;
  double temperature;
  int top_k;
  double top_p;
  double min_p;
  int kept;                           // tokens kept
  std::vector<int> ids;               // the first of them (16 at most), most likely first
  std::vector<double> probabilities;  // theirs, after the warpers
};

const ReferenceCase kCases[] = {
#include "sampling_filter_cases.inc"
};

std::vector<float> logits_of(const ReferenceCase& c) {
  if (!c.logits.empty()) return c.logits;
  const Generated& g = c.generated;
  std::vector<float> l(g.vocab);
  for (int i = 0; i < g.vocab; ++i) {
    const long long x = static_cast<long long>((i * g.mult + g.add) % g.mod) - static_cast<long long>(g.mod / 2);
    l[i] = static_cast<float>(std::ldexp(static_cast<double>(x), -g.shift));
  }
  return l;
}

/// Every token, most likely first, equal logits by the lower id.
std::vector<int> ranking(const std::vector<float>& logits) {
  std::vector<int> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  return order;
}

TEST(SamplingFilter, MatchesTheHuggingFaceReference) {
  for (const ReferenceCase& rc : kCases) {
    SCOPED_TRACE(rc.name);
    const std::vector<float> logits = logits_of(rc);
    const SamplingCandidates c = sampling_candidates(logits, {rc.temperature, rc.top_k, rc.top_p, rc.min_p});
    ASSERT_EQ(c.ids.size(), static_cast<std::size_t>(rc.kept));
    ASSERT_EQ(c.weights.size(), c.ids.size());
    // The kept tokens are the first of the ranking (the reference asserts the same of its own).
    const std::vector<int> order = ranking(logits);
    EXPECT_TRUE(std::equal(c.ids.begin(), c.ids.end(), order.begin()));
    const double total = std::accumulate(c.weights.begin(), c.weights.end(), 0.0);
    for (std::size_t i = 0; i < rc.ids.size(); ++i) {
      EXPECT_EQ(c.ids[i], rc.ids[i]) << "position " << i;
      EXPECT_NEAR(c.weights[i] / total, rc.probabilities[i], 1e-12 * std::max(1.0, rc.probabilities[i]))
          << "position " << i;
    }
  }
}

/// generate's draw before top-p and min-p existed (train/generate.cpp's pick_token): the
/// top_k most likely tokens, equal logits by the lower id, weighted at the temperature.
SamplingCandidates top_k_of_before(const std::vector<float>& logits, double temperature, int top_k) {
  std::vector<int> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const int k = top_k > 0 ? std::min<int>(top_k, static_cast<int>(order.size())) : static_cast<int>(order.size());
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  std::vector<double> p(k);
  const double mx = logits[order[0]];
  for (int i = 0; i < k; ++i) p[i] = std::exp((logits[order[i]] - mx) / temperature);
  order.resize(k);
  return {order, p};
}

/// Logits of a small model's step: normal, a few ties, one masked token.
std::vector<float> random_logits(int vocab, std::mt19937_64& gen) {
  std::normal_distribution<float> normal(0.f, 3.f);
  std::vector<float> l(vocab);
  for (float& x : l) x = normal(gen);
  if (vocab > 8) {
    l[vocab / 2] = l[1];
    l[vocab - 1] = -kInf;
  }
  return l;
}

TEST(SamplingFilter, OffIsTheTopKDrawOfBefore) {
  std::mt19937_64 gen(7);
  for (int vocab : {1, 2, 50, 256, 4099}) {
    for (int top_k : {0, 1, 40, vocab}) {
      for (double temperature : {0.3, 0.8, 1.0, 2.5}) {
        const std::vector<float> logits = random_logits(vocab, gen);
        const SamplingCandidates now = sampling_candidates(logits, {temperature, top_k, 1.0, 0.0});
        const SamplingCandidates before = top_k_of_before(logits, temperature, top_k);
        ASSERT_EQ(now.ids, before.ids) << vocab << " tokens, top-k " << top_k;
        ASSERT_EQ(now.weights, before.weights) << vocab << " tokens, top-k " << top_k;  // bitwise
        // So generate's draws, from one generator, are the same tokens.
        std::mt19937_64 a(11), b(11);
        std::discrete_distribution<int> da(now.weights.begin(), now.weights.end());
        std::discrete_distribution<int> db(before.weights.begin(), before.weights.end());
        for (int n = 0; n < 20; ++n) ASSERT_EQ(now.ids[da(a)], before.ids[db(b)]);
      }
    }
  }
}

TEST(SamplingFilter, TinyTopPIsGreedy) {
  std::mt19937_64 gen(3);
  for (int vocab : {2, 3, 64, 1000}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> logits = random_logits(vocab, gen);
      // Every other trial the largest logit twice: greedy's argmax takes the lower id.
      const auto greedy_max = std::max_element(logits.begin(), logits.end());
      if (trial % 2 == 1 && vocab > 2) logits[vocab - 2] = *greedy_max;
      const int greedy = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      for (int top_k : {0, 5}) {
        // Below 1 / vocab, the least the most likely token can hold: the nucleus is one token.
        const SamplingCandidates c = sampling_candidates(logits, {0.8, top_k, 0.5 / vocab, 0.0});
        ASSERT_EQ(c.ids, std::vector<int>{greedy}) << vocab << " tokens, trial " << trial;
      }
    }
  }
}

TEST(SamplingFilter, SettingsAsTheLogsNameThem) {
  EXPECT_EQ(meshtrain::train::sampling_settings_text({0.8, 40, 1.0, 0.0}), "temperature 0.8, top-k 40, top-p 1, min-p 0");
  EXPECT_EQ(meshtrain::train::sampling_settings_text({1.0, 0, 0.95, 0.05}),
            "temperature 1, top-k 0, top-p 0.95, min-p 0.05");
}

}  // namespace
