// The learning-rate schedule (src/optim/schedule.cpp) against values worked out by hand
// from its definition in doc/training.md, never by calling the schedule to get them:
//   step s is 0-based; warmup: lr * (s + 1) / warmup_steps for s < warmup_steps;
//   cosine: min_lr + (lr - min_lr) * cos^2(pi/2 * p), p = min(1, (s - warmup) / (steps - warmup))
//   (the same curve as min_lr + (lr - min_lr) * (1 + cos(pi p)) / 2, written differently on
//   purpose), reaching min_lr at s = steps (one past the last step) and staying there;
//   constant: lr after the warmup.
// Literal constants were computed with a pocket calculator / Python's math module.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "optim/schedule.hpp"

namespace {

using meshtrain::optim::LrSchedule;

LrSchedule cosine(double lr, double min_lr, int warmup, int steps) {
  LrSchedule s;
  s.lr = lr;
  s.min_lr = min_lr;
  s.warmup_steps = warmup;
  s.total_steps = steps;
  s.cosine = true;
  return s;
}

/// The cosine part by its cos^2 form (independent of the code's 1 + cos form).
double cos2_form(double lr, double min_lr, int warmup, int steps, int s) {
  const double p = std::min(1.0, static_cast<double>(s - warmup) / (steps - warmup));
  const double c = std::cos(M_PI / 2 * p);
  return min_lr + (lr - min_lr) * c * c;
}

// The tiny test configs: lr 1e-3, min_lr 1e-4, warmup 2, 20 steps.
TEST(LrSchedule, WarmupThenCosineHandValues) {
  const LrSchedule s = cosine(1e-3, 1e-4, 2, 20);
  EXPECT_DOUBLE_EQ(s.at(0), 5e-4) << "step 0 is the first warmup step: lr * 1/2";
  EXPECT_DOUBLE_EQ(s.at(1), 1e-3) << "the last warmup step reaches lr";
  EXPECT_DOUBLE_EQ(s.at(2), 1e-3) << "the first decay step: progress 0";
  // Step 11: progress 9/18 = 1/2, halfway between lr and min_lr.
  EXPECT_DOUBLE_EQ(s.at(11), 5.5e-4);
  // Step 19, the last: progress 17/18; 1e-4 + 9e-4 * cos^2(17 pi / 36) = 1.068365111445064e-4.
  EXPECT_NEAR(s.at(19), 1.068365111445064e-4, 1e-18);
  EXPECT_DOUBLE_EQ(s.at(20), 1e-4) << "min_lr one past the last step";
  EXPECT_DOUBLE_EQ(s.at(100), 1e-4) << "past the end stays at min_lr";
}

TEST(LrSchedule, CosineMatchesClosedFormAtEveryStep) {
  for (const auto& [lr, min_lr, warmup, steps] :
       {std::tuple{1e-3, 1e-4, 2, 20}, std::tuple{6e-4, 6e-5, 10, 137}, std::tuple{3e-4, 0.0, 1, 2}}) {
    const LrSchedule s = cosine(lr, min_lr, warmup, steps);
    for (int i = 0; i < steps + 5; ++i) {
      const double want = i < warmup ? lr * (i + 1) / warmup : cos2_form(lr, min_lr, warmup, steps, i);
      EXPECT_NEAR(s.at(i), want, 1e-15 * lr) << "lr " << lr << " min_lr " << min_lr << " warmup " << warmup
                                             << " steps " << steps << " step " << i;
    }
    // Monotone: up through the warmup, then never up again.
    for (int i = 1; i < steps + 5; ++i) {
      if (i < warmup) EXPECT_GT(s.at(i), s.at(i - 1)) << "warmup step " << i;
      else EXPECT_LE(s.at(i), s.at(i - 1)) << "decay step " << i;
    }
  }
}

TEST(LrSchedule, NoWarmupStartsAtLr) {
  const LrSchedule s = cosine(3e-4, 3e-5, 0, 10);
  EXPECT_DOUBLE_EQ(s.at(0), 3e-4) << "warmup 0: the first step uses the full lr";
  EXPECT_DOUBLE_EQ(s.at(5), 1.65e-4) << "progress 1/2";
  // progress 9/10: 3e-5 + 2.7e-4 * cos^2(0.45 pi) = 3.660737030015427e-05
  EXPECT_NEAR(s.at(9), 3.660737030015427e-05, 1e-18);
  EXPECT_DOUBLE_EQ(s.at(10), 3e-5);
}

TEST(LrSchedule, MinLrZeroDecaysToZero) {
  const LrSchedule s = cosine(1e-3, 0.0, 0, 4);
  EXPECT_DOUBLE_EQ(s.at(2), 5e-4);
  EXPECT_EQ(s.at(4), 0.0);
  EXPECT_EQ(s.at(50), 0.0);
  EXPECT_GT(s.at(3), 0.0) << "the last step still learns";
}

TEST(LrSchedule, MinLrEqualToLrIsConstant) {
  const LrSchedule s = cosine(2e-4, 2e-4, 3, 12);
  for (int i = 3; i < 20; ++i) EXPECT_DOUBLE_EQ(s.at(i), 2e-4) << "step " << i;
}

TEST(LrSchedule, ConstantAfterWarmup) {
  LrSchedule s = cosine(1e-3, 1e-4, 4, 20);
  s.cosine = false;
  EXPECT_DOUBLE_EQ(s.at(0), 2.5e-4);
  EXPECT_DOUBLE_EQ(s.at(2), 7.5e-4);
  EXPECT_DOUBLE_EQ(s.at(3), 1e-3);
  for (int i = 4; i < 40; ++i) EXPECT_DOUBLE_EQ(s.at(i), 1e-3) << "step " << i;
  s.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(s.at(0), 1e-3) << "constant without warmup";
}

TEST(LrSchedule, WarmupLongerThanTheRunNeverReachesLr) {
  const LrSchedule s = cosine(1e-3, 1e-4, 10, 5);
  for (int i = 0; i < 5; ++i) EXPECT_DOUBLE_EQ(s.at(i), 1e-4 * (i + 1)) << "step " << i;
}

}  // namespace
