// The small host collectives of comm/collectives.hpp at the rank count the test is launched
// with (1, 2 and 4): every result is compared exactly with the value computed locally from
// the rank numbers, which is what each collective must return on every rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/collectives.hpp"
#include "test_support.hpp"

using namespace meshtrain;

namespace {

// A value per rank whose min and max are not rank 0's and not the last rank's alone.
double value_of(int rank, int i) { return (rank % 2 == 0 ? 1.0 : -1.0) * (rank + 1) * (i + 1) + 0.25; }

}  // namespace

TEST(Collectives, ScalarReductions) {
  const MpiComm& world = test::world();
  const int r = world.rank(), n = world.size();
  EXPECT_EQ(all_reduce_value(world, r + 1, ReduceOp::Sum), n * (n + 1) / 2);
  EXPECT_EQ(all_reduce_value<std::int64_t>(world, r, ReduceOp::Max), n - 1);
  EXPECT_EQ(all_reduce_value<std::uint64_t>(world, static_cast<std::uint64_t>(r) + 7, ReduceOp::Min), 7u);
  EXPECT_EQ(all_reduce_value(world, 0.5 * r, ReduceOp::Sum), 0.25 * n * (n - 1));
}

TEST(Collectives, MinMaxOfEachValueInOneReduction) {
  const MpiComm& world = test::world();
  const int n = world.size();
  constexpr int kCount = 3;
  double mine[kCount];
  for (int i = 0; i < kCount; ++i) mine[i] = value_of(world.rank(), i);
  MinMax got[kCount];
  watched_all_min_max("all_reduce", "world", world, mine, got, kCount);
  for (int i = 0; i < kCount; ++i) {
    double mn = value_of(0, i), mx = mn;
    for (int q = 1; q < n; ++q) {
      mn = std::min(mn, value_of(q, i));
      mx = std::max(mx, value_of(q, i));
    }
    EXPECT_EQ(got[i].min, mn) << "value " << i;
    EXPECT_EQ(got[i].max, mx) << "value " << i;
    const MinMax one = all_min_max(world, mine[i]);  // the unwatched scalar form agrees
    EXPECT_EQ(one.min, mn);
    EXPECT_EQ(one.max, mx);
  }
}

TEST(Collectives, BroadcastsFromEveryRoot) {
  const MpiComm& world = test::world();
  for (int root = 0; root < world.size(); ++root) {
    // A different length per root, and an empty string from root 0.
    const std::string expect(static_cast<std::size_t>(root) * 5, static_cast<char>('a' + root));
    const std::string mine = world.rank() == root ? expect : std::string("not the root's");
    EXPECT_EQ(broadcast_string(world, mine, root), expect) << "root " << root;
    EXPECT_EQ(broadcast_value(world, world.rank() * 10 + 3, root), root * 10 + 3);
    double pair[2] = {world.rank() + 0.5, -1.0 * world.rank()};
    broadcast_values(world, pair, 2, root);
    EXPECT_EQ(pair[0], root + 0.5);
    EXPECT_EQ(pair[1], -1.0 * root);
  }
}

TEST(Collectives, ExclusivePrefixSum) {
  const MpiComm& world = test::world();
  const int r = world.rank();
  // Rank q contributes q + 1: the sum below rank r is r (r + 1) / 2.
  EXPECT_EQ(exclusive_prefix_sum(world, static_cast<std::uint64_t>(r) + 1), static_cast<std::uint64_t>(r) * (r + 1) / 2);
  barrier(world);
  sleeping_barrier(world);
  watched_barrier("barrier", "world", world);
}

// sleeping_barrier_within: true when every rank enters it; false on the ranks that entered
// it while one rank stayed away (rank 0 here, held back by a world barrier until they have
// given up: no timing decides the outcome), and the absent rank's later call completes it.
TEST(Collectives, SleepingBarrierWithinSaysWhetherEveryRankCame) {
  const MpiComm& world = test::world();
  const MpiComm all = MpiComm::duplicate(world.get());
  EXPECT_TRUE(sleeping_barrier_within(all, 60.0));
  if (world.size() == 1) return;
  const MpiComm spent = MpiComm::duplicate(world.get());
  if (world.rank() != 0) EXPECT_FALSE(sleeping_barrier_within(spent, 0.05));
  barrier(world);
  if (world.rank() == 0) EXPECT_TRUE(sleeping_barrier_within(spent, 60.0));
  barrier(world);  // the other ranks progress their pending barrier meanwhile
}
