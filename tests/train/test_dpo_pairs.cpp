// DPO's arithmetic of a micro-batch's pairs (train/dpo.hpp): the loss is -log sigmoid of the
// margin, stable for any margin; each sequence's coefficient is minus the derivative of the
// pair-averaged loss with respect to that sequence's log-probability (checked by central
// differences in double); padding pairs add nothing; the accuracy counts margins > 0 only.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "train/dpo.hpp"

using meshtrain::train::dpo_metrics;
using meshtrain::train::dpo_pairs;
using meshtrain::train::DpoSums;

namespace {

double loss_of(const std::vector<double>& policy, const std::vector<double>& reference, double beta, int pairs) {
  DpoSums s;
  dpo_pairs(policy, reference, beta, 1.0, pairs, s);
  return s.loss;
}

}  // namespace

TEST(DpoPairs, LossRewardsAndMarginsFollowTheFormula) {
  const double beta = 0.3;
  const std::vector<double> policy = {-10.0, -14.0, -7.5, -6.0}, reference = {-11.0, -12.0, -8.0, -5.0};
  DpoSums s;
  dpo_pairs(policy, reference, beta, 0.5, 2, s);
  const double c0 = beta * 1.0, r0 = beta * -2.0, c1 = beta * 0.5, r1 = beta * -1.0;
  const double z0 = c0 - r0, z1 = c1 - r1;
  EXPECT_NEAR(s.loss, -std::log(1 / (1 + std::exp(-z0))) - std::log(1 / (1 + std::exp(-z1))), 1e-14);
  EXPECT_DOUBLE_EQ(s.rewards_chosen, c0 + c1);
  EXPECT_DOUBLE_EQ(s.rewards_rejected, r0 + r1);
  EXPECT_EQ(s.correct, 2);
  EXPECT_EQ(s.pairs, 2);
  const auto m = dpo_metrics(s);
  EXPECT_NEAR(m.margins, (z0 + z1) / 2, 1e-15);
  EXPECT_DOUBLE_EQ(m.accuracy, 1.0);
  EXPECT_DOUBLE_EQ(m.logps_chosen, (-10.0 - 7.5) / 2);
}

TEST(DpoPairs, CoefficientsAreMinusTheLossDerivative) {
  const double beta = 0.7;
  std::vector<double> policy = {-3.0, -2.5, -20.0, -30.0, -5.0, -5.0}, reference = {-3.2, -2.0, -25.0, -22.0, -4.0, -6.0};
  DpoSums unused;
  const std::vector<float> coef = dpo_pairs(policy, reference, beta, 1.0, 3, unused);
  for (std::size_t i = 0; i < policy.size(); ++i) {
    const double h = 1e-5, x = policy[i];
    policy[i] = x + h;
    const double up = loss_of(policy, reference, beta, 3);
    policy[i] = x - h;
    const double down = loss_of(policy, reference, beta, 3);
    policy[i] = x;
    // coef multiplies the cross-entropy gradient, i.e. d(-logp): coef = -dloss/dlogp.
    EXPECT_NEAR(coef[i], -(up - down) / (2 * h), 1e-6) << "sequence " << i;
  }
  EXPECT_GT(coef[0], 0);  // chosen: its likelihood is raised
  EXPECT_LT(coef[1], 0);  // rejected: lowered
}

TEST(DpoPairs, ExtremeMarginsStayFinite) {
  DpoSums s;
  const std::vector<float> c = dpo_pairs({0.0, -4000.0, -4000.0, 0.0}, {0.0, 0.0, 0.0, 0.0}, 1.0, 1.0, 2, s);
  EXPECT_TRUE(std::isfinite(s.loss));
  EXPECT_NEAR(s.loss, 4000.0, 1e-9);  // the first pair's loss ~ 0, the second's ~ 4000
  EXPECT_EQ(c[0], 0.0f);             // sigmoid(-4000) underflows to 0: no gradient left
  EXPECT_FLOAT_EQ(c[2], 1.0f);       // the wrong pair gets the full beta
}

TEST(DpoPairs, PaddingAndTiesCountNothing) {
  DpoSums s;
  // One real pair with a zero margin (policy = reference), one padding pair.
  const std::vector<float> c = dpo_pairs({-2.0, -3.0, -9.0, -9.0}, {-2.0, -3.0, 0.0, 0.0}, 0.1, 0.25, 1, s);
  EXPECT_EQ(s.pairs, 1);
  EXPECT_EQ(s.correct, 0);  // a margin of 0 is not a preference
  EXPECT_NEAR(s.loss, std::log(2.0), 1e-15);
  EXPECT_FLOAT_EQ(c[0], 0.1f * 0.5f * 0.25f);
  EXPECT_EQ(c[2], 0.0f);
  EXPECT_EQ(c[3], 0.0f);
  EXPECT_TRUE(std::isnan(dpo_metrics(DpoSums{}).loss));
}

// SimPO (train.objective = simpo): length-normalized rewards, a target margin, no reference.
namespace {
double simpo_loss_of(const std::vector<double>& policy, const std::vector<double>& lengths, double beta, double gamma,
                     int pairs) {
  DpoSums s;
  meshtrain::train::simpo_pairs(policy, lengths, beta, gamma, 1.0, pairs, s);
  return s.loss;
}
}  // namespace

TEST(SimpoPairs, LossRewardsAndMarginsFollowTheFormula) {
  const double beta = 2.0, gamma = 0.5;
  const std::vector<double> policy = {-10.0, -14.0, -7.5, -6.0}, lengths = {5, 4, 3, 2};
  DpoSums s;
  meshtrain::train::simpo_pairs(policy, lengths, beta, gamma, 0.5, 2, s);
  const double c0 = beta * -10.0 / 5, r0 = beta * -14.0 / 4, c1 = beta * -7.5 / 3, r1 = beta * -6.0 / 2;
  const double z0 = c0 - r0 - gamma, z1 = c1 - r1 - gamma;
  EXPECT_NEAR(s.loss, std::log1p(std::exp(-z0)) + std::log1p(std::exp(-z1)), 1e-14);
  EXPECT_DOUBLE_EQ(s.rewards_chosen, c0 + c1);
  EXPECT_DOUBLE_EQ(s.rewards_rejected, r0 + r1);
  EXPECT_EQ(s.correct, 2);  // c0 = -4 > r0 = -7; c1 = -5 > r1 = -6
  const auto m = dpo_metrics(s);
  EXPECT_NEAR(m.margins, (c0 - r0 + c1 - r1) / 2, 1e-15);  // the rewards' margin, gamma not subtracted
  // A chosen reward above the rejected one by less than gamma still counts as right, and
  // still has a loss above log 2.
  DpoSums t;
  meshtrain::train::simpo_pairs({-1.0, -1.2}, {1, 1}, 1.0, 0.5, 1.0, 1, t);
  EXPECT_EQ(t.correct, 1);
  EXPECT_GT(t.loss, std::log(2.0));
}

TEST(SimpoPairs, CoefficientsAreMinusTheLossDerivative) {
  const double beta = 2.5, gamma = 0.8;
  std::vector<double> policy = {-3.0, -2.5, -20.0, -30.0, -5.0, -5.0};
  const std::vector<double> lengths = {3, 1, 10, 12, 0, 4};  // a response with no counted target counts as 1
  DpoSums unused;
  const std::vector<float> coef = meshtrain::train::simpo_pairs(policy, lengths, beta, gamma, 1.0, 3, unused);
  for (std::size_t i = 0; i < policy.size(); ++i) {
    const double h = 1e-5, x = policy[i];
    policy[i] = x + h;
    const double up = simpo_loss_of(policy, lengths, beta, gamma, 3);
    policy[i] = x - h;
    const double down = simpo_loss_of(policy, lengths, beta, gamma, 3);
    policy[i] = x;
    EXPECT_NEAR(coef[i], -(up - down) / (2 * h), 1e-6) << "sequence " << i;
  }
  EXPECT_GT(coef[0], 0);
  EXPECT_LT(coef[1], 0);
  // The dispatcher picks the formula the objective names.
  meshtrain::train::PreferenceLoss l;
  l.simpo = true;
  l.beta = beta;
  l.gamma = gamma;
  DpoSums a, b;
  EXPECT_EQ(meshtrain::train::preference_pairs(l, policy, std::vector<double>(6, 0.0), lengths, 1.0, 3, a), coef);
  l.simpo = false;
  EXPECT_EQ(meshtrain::train::preference_pairs(l, policy, std::vector<double>(6, 0.0), lengths, 1.0, 3, b),
            dpo_pairs(policy, std::vector<double>(6, 0.0), beta, 1.0, 3, unused));
}

TEST(SimpoPairs, SequenceLengthsCountTheCountedTargets) {
  const std::vector<std::int32_t> targets = {-1, 4, 5, -1, /**/ -1, -1, -1, -1, /**/ 0, 1, 2, 3};
  EXPECT_EQ(meshtrain::train::sequence_lengths(targets.data(), 3, 4), (std::vector<double>{2, 0, 4}));
}
