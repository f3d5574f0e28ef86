// IntervalLedger: device-timed communication intervals accounted in issue order, never
// blocking, each to the step that issued it (comm/interval_ledger.hpp). The backend's events
// are replaced by a fake clock whose intervals complete when the test says so.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/interval_ledger.hpp"

using namespace meshtrain;

namespace {

struct FakeClock final : IntervalLedger::Clock {
  std::map<int, double> length;  // id -> seconds
  std::set<int> finished;        // ids whose end has happened
  std::vector<int> recycled;
  int seconds_calls = 0;
  bool done(int id) override { return finished.count(id) > 0; }
  double seconds(int id) override {
    ++seconds_calls;
    EXPECT_TRUE(finished.count(id)) << "seconds() of an interval that has not ended: " << id;
    return length.at(id);
  }
  void recycle(int id) override { recycled.push_back(id); }
};

}  // namespace

TEST(IntervalLedger, AccountsCompletedIntervalsInIssueOrderWithoutBlocking) {
  FakeClock clock;
  IntervalLedger ledger;
  std::map<std::uint64_t, DeviceCommTimes> out;
  clock.length = {{0, 0.5}, {1, 0.25}, {2, 2.0}, {3, 0.125}};
  ledger.add(0, IntervalLedger::Kind::Busy, 7);
  ledger.add(1, IntervalLedger::Kind::Exposed, 7);
  ledger.add(2, IntervalLedger::Kind::Busy, 8);
  ledger.add(3, IntervalLedger::Kind::Exposed, 8);
  // Nothing has ended: nothing is read, nothing recycled.
  EXPECT_EQ(ledger.drain(clock, out), 0.0);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(ledger.pending(), 4u);
  // The second and fourth end first (another stream): the first still pending stops the drain.
  clock.finished = {1, 3};
  EXPECT_EQ(ledger.drain(clock, out), 0.0);
  EXPECT_EQ(clock.seconds_calls, 0);
  // The first ends: 0 and 1 are accounted (tag 7), then 2 (pending) stops it.
  clock.finished.insert(0);
  EXPECT_EQ(ledger.drain(clock, out), 0.75);
  EXPECT_EQ(ledger.pending(), 2u);
  EXPECT_EQ(ledger.oldest_tag(), 8u);
  ASSERT_EQ(out.count(7), 1u);
  EXPECT_EQ(out[7].busy, 0.5);
  EXPECT_EQ(out[7].exposed, 0.25);
  EXPECT_EQ(out.count(8), 0u);
  EXPECT_EQ(clock.recycled, (std::vector<int>{0, 1}));
  // Everything ends: tag 8 gets its busy and exposed seconds; each interval read once.
  clock.finished.insert(2);
  EXPECT_EQ(ledger.drain(clock, out), 2.125);
  EXPECT_EQ(ledger.pending(), 0u);
  EXPECT_EQ(out[8].busy, 2.0);
  EXPECT_EQ(out[8].exposed, 0.125);
  EXPECT_EQ(clock.seconds_calls, 4);
  EXPECT_EQ(clock.recycled, (std::vector<int>{0, 1, 2, 3}));
  // A drain with nothing pending is a no-op.
  EXPECT_EQ(ledger.drain(clock, out), 0.0);
}

TEST(IntervalLedger, RecycledIdsAreNewIntervals) {
  // The backend reuses an id once recycled: it is a new interval with its own tag.
  FakeClock clock;
  IntervalLedger ledger;
  std::map<std::uint64_t, DeviceCommTimes> out;
  clock.length = {{0, 1.0}};
  clock.finished = {0};
  ledger.add(0, IntervalLedger::Kind::Exposed, 1);
  ledger.drain(clock, out);
  clock.length[0] = 3.0;
  ledger.add(0, IntervalLedger::Kind::Exposed, 2);
  ledger.drain(clock, out);
  EXPECT_EQ(out[1].exposed, 1.0);
  EXPECT_EQ(out[2].exposed, 3.0);
}

TEST(IntervalLedger, TakeReturnsOneStepAndForgetsOlderOnes) {
  CommStats& stats = comm_stats();
  stats.device.clear();
  stats.device[3] = {0.5, 0.25};
  stats.device[4] = {1.5, 0.75};   // an older step's leftovers (e.g. an evaluation's gathers)
  stats.device[5] = {2.0, 1.0};    // the next step, already partly accounted
  stats.device[2] = {9.0, 9.0};
  const DeviceCommTimes t = take_device_comm_times(4);
  EXPECT_EQ(t.busy, 1.5);
  EXPECT_EQ(t.exposed, 0.75);
  ASSERT_EQ(stats.device.size(), 1u) << "tags <= 4 are forgotten, 5 is kept";
  EXPECT_EQ(stats.device.begin()->first, 5u);
  // A step without device-timed intervals (the MPI backend, a host build): zero.
  const DeviceCommTimes none = take_device_comm_times(4);
  EXPECT_EQ(none.busy, 0.0);
  EXPECT_EQ(none.exposed, 0.0);
  EXPECT_EQ(stats.device.size(), 1u);
  stats.device.clear();
}
