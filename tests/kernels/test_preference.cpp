// The device kernels of DPO's and SimPO's training step (kernels/preference.hpp) against their
// host twins in train/dpo.hpp, which test_dpo_pairs checks against the formulas and central
// differences: the pair sums and each sequence's coefficient (and its T rows of the row
// scale) from random log-probabilities, two micro-batches accumulating into the same sums;
// the response lengths from targets with ignored positions; each sequence's log-probability
// from per-row losses against a sum in double. On the host the kernels do the host twins'
// double operations in the same order, so there the results are compared bit for bit; on a
// GPU the device's exp/log1p may differ in the last place, so within 1e-12 (a coefficient,
// a float, within one float ulp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/views.hpp"
#include "kernels/preference.hpp"
#include "test_support.hpp"
#include "train/dpo.hpp"

using namespace meshtrain;
using namespace meshtrain::test;
namespace k = meshtrain::kernels;

namespace {

std::vector<double> uniform(std::size_t n, double lo, double hi, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = u(rng);
  return v;
}

/// rtol: the device's allowance (1e-12 for doubles; a float rounded from a double that
/// differs in its last place may differ by one float ulp).
void expect_same(double got, double want, const char* what, double rtol = 1e-12) {
  if (kDeviceIsHost)
    EXPECT_EQ(got, want) << what;
  else
    EXPECT_NEAR(got, want, rtol * std::abs(want) + 1e-300) << what;
}

void check_pairs(const k::PairLoss& loss) {
  const int B = 8, T = 5;
  const double pair_scale = 1.0 / 12;
  Buffer<double> sums = to_device(std::vector<double>(k::kPairSums, 0.0));
  Buffer<float> coef(B, MemCategory::Workspace), rows(static_cast<std::size_t>(B) * T, MemCategory::Workspace);
  train::DpoSums host;
  for (int micro = 0; micro < 2; ++micro) {
    // Log-probabilities of responses of a few hundred tokens; some margins far beyond
    // exp's range, so the stable form of -log sigmoid is exercised on both sides.
    std::vector<double> policy = uniform(B, -400.0, -5.0, 11 + micro), reference = uniform(B, -400.0, -5.0, 21 + micro);
    std::vector<double> lengths = uniform(B, 0.0, 300.0, 31 + micro);
    for (double& n : lengths) n = std::floor(n);
    lengths[3] = 0;  // a response with no counted target
    policy[0] = -5.0;
    policy[1] = -4000.0;  // a margin of thousands: sigmoid(-z) underflows to 0
    const Buffer<double> d_policy = to_device(policy), d_reference = to_device(reference),
                         d_lengths = to_device(lengths);
    k::preference_pairs(loss, B, T, d_policy.data(), loss.simpo ? nullptr : d_reference.data(),
                        loss.simpo ? d_lengths.data() : nullptr, pair_scale, sums.data(), coef.data(), rows.data());
    const std::vector<float> want = train::preference_pairs(loss, policy, reference, lengths, pair_scale, B / 2, host);
    const std::vector<float> got = to_host(coef), got_rows = to_host(rows);
    for (int b = 0; b < B; ++b) {
      expect_same(got[b], want[b], "coefficient", 2.4e-7);
      for (int t = 0; t < T; ++t) EXPECT_EQ(got_rows[static_cast<std::size_t>(b) * T + t], got[b]) << b << " " << t;
    }
  }
  const std::vector<double> s = to_host(sums);
  const train::DpoSums d = train::pair_sums_of(s.data());
  expect_same(d.loss, host.loss, "loss");
  expect_same(d.rewards_chosen, host.rewards_chosen, "rewards_chosen");
  expect_same(d.rewards_rejected, host.rewards_rejected, "rewards_rejected");
  EXPECT_EQ(d.correct, host.correct);
  EXPECT_EQ(d.logps_chosen, host.logps_chosen);
  EXPECT_EQ(d.logps_rejected, host.logps_rejected);
  EXPECT_EQ(d.pairs, 8);
  EXPECT_TRUE(std::isfinite(d.loss));
}

}  // namespace

TEST(PreferenceKernels, DpoPairsAreTheHostTwins) { check_pairs({false, 0.1, 0.0}); }

TEST(PreferenceKernels, SimpoPairsAreTheHostTwins) { check_pairs({true, 2.0, 1.0}); }

TEST(PreferenceKernels, SequenceLengthsCountTheTargetsOfEachRow) {
  const int B = 3, T = 7;
  std::vector<std::int32_t> targets(static_cast<std::size_t>(B) * T);
  for (int i = 0; i < B * T; ++i) targets[i] = (i * 5) % 3 == 0 ? -1 : i;
  for (int t = 0; t < T; ++t) targets[static_cast<std::size_t>(2) * T + t] = -1;  // row 2: nothing counted
  Buffer<std::int32_t> d_targets = to_device(targets);
  Buffer<double> lengths(B, MemCategory::Workspace);
  k::sequence_lengths(d_targets.data(), B, T, lengths.data());
  EXPECT_EQ(to_host(lengths), train::sequence_lengths(targets.data(), B, T));
  EXPECT_EQ(to_host(lengths)[2], 0.0);
}

TEST(PreferenceKernels, SequenceLogpsSumEachRowInDouble) {
  const int B = 4, T = 33;
  std::vector<float> losses(static_cast<std::size_t>(B) * T);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.0f, 12.0f);
  for (float& l : losses) l = u(rng);
  losses[5] = 0.0f;  // an ignored target
  Buffer<float> d_losses = to_device(losses);
  Buffer<double> logp(B, MemCategory::Workspace);
  k::sequence_logps(d_losses.data(), B, T, logp.data());
  const std::vector<double> got = to_host(logp);
  for (int b = 0; b < B; ++b) {
    double want = 0.0;  // the same order: token 0 first
    for (int t = 0; t < T; ++t) want -= static_cast<double>(losses[static_cast<std::size_t>(b) * T + t]);
    EXPECT_EQ(got[b], want) << b;  // IEEE double additions in one order: the same bits on any device
  }
}
