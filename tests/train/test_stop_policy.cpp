// The stop policy's deadline (train/stop_policy.hpp): train.time_limit counts from the start
// of the rank whose process started first -- the start-up is inside the limit --, the same
// deadline on every rank; the Slurm end time is rank 0's seconds left, shared as a duration.
// The process starts are given (no waiting): rank 0 started 5 s ago, the last rank 100 s ago.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <string>

#include "core/timer.hpp"
#include "test_support.hpp"
#include "train/stop_policy.hpp"

using namespace meshtrain;
using train::StopPolicy;
using train::StopReason;

namespace {

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "'" << (part) << "' not in: " << (text)

/// This rank's process start on its own clock: the last rank's is the oldest, 100 s ago.
double process_start() {
  const MpiComm& w = test::world();
  return now_seconds() - (w.rank() == w.size() - 1 ? 100.0 : 5.0);
}

TEST(StopPolicy, TheTimeLimitCountsFromTheFirstRanksStart) {
  const StopPolicy stop(150, 10, process_start(), test::world());
  // 150 s from the oldest start, 100 s ago: at most 50 s left on every rank (the bound below
  // leaves 20 s for a slow machine; nothing here waits).
  EXPECT_GE(stop.startup_seconds(), 100.0);
  EXPECT_LE(stop.seconds_left(), 50.0);
  EXPECT_GT(stop.seconds_left(), 30.0);
  EXPECT_EQ(stop.check(0), StopReason::None);
  EXPECT_EQ(stop.check(45), StopReason::TimeLimit);  // 10 s margin + a 45 s step: more than is left
  EXPECT_CONTAINS(stop.describe(), "wall-clock limit from train.time_limit=150s: ");
  EXPECT_CONTAINS(stop.describe(), " s left (the start-up took 100 s since the first rank's process started)");
}

TEST(StopPolicy, AStartUpLongerThanTheLimitLeavesNothing) {
  const StopPolicy stop(60, 10, process_start(), test::world());
  EXPECT_LT(stop.seconds_left(), 0.0);
  EXPECT_EQ(stop.check(0), StopReason::TimeLimit);
  EXPECT_CONTAINS(stop.describe(), "wall-clock limit from train.time_limit=60s: 0 s left (the start-up took 100 s");
}

TEST(StopPolicy, TheSlurmEndTimeIsRankZerosSecondsLeft) {
  const MpiComm& w = test::world();
  // Only rank 0 reads it; the others must get its seconds left, not a time on its clock.
  if (w.rank() == 0) setenv("SLURM_JOB_END_TIME", std::to_string(std::time(nullptr) + 100).c_str(), 1);
  const StopPolicy stop(0, 10, process_start(), w);
  unsetenv("SLURM_JOB_END_TIME");
  EXPECT_LE(stop.seconds_left(), 100.0);
  EXPECT_GT(stop.seconds_left(), 80.0);
  EXPECT_CONTAINS(stop.describe(), "wall-clock limit from the Slurm job's end time: ");
  // A train.time_limit that ends earlier wins.
  const StopPolicy both(120, 10, process_start(), w);
  EXPECT_LE(both.seconds_left(), 20.0);
  EXPECT_CONTAINS(both.describe(), "wall-clock limit from train.time_limit=120s");
}

TEST(StopPolicy, NoLimit) {
  const StopPolicy stop(0, 10, process_start(), test::world());
  EXPECT_EQ(stop.check(1e9), StopReason::None);
  EXPECT_EQ(stop.describe(), "no wall-clock limit; SIGUSR1/SIGTERM save and exit with status 75");
}

}  // namespace
