// MpiCommunicator: every collective, blocking and async, at the rank count the test is
// launched with (registered at 1, 2 and 4 ranks).
//
// Values are small integers (|v| <= 8), so every sum over <= 4 ranks, every average
// (a division by 1, 2 or 4) and every max/min is exactly representable in fp32, fp64
// and bf16 (8 significant bits): the results are compared exactly. A rounding tolerance
// would hide the bugs these tests are after (wrong block, wrong op, missing 1/size).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "core/bf16.hpp"
#include "core/timer.hpp"
#include "test_support.hpp"

using namespace meshtrain;

namespace {

// Odd and uneven sizes on purpose: 0 (empty collectives must be legal no-ops), 1, a
// prime, and one below a power of two.
const std::size_t kCounts[] = {0, 1, 7, 1023};

template <class T>
T make(double x) {
  if constexpr (std::is_same_v<T, bf16>) {
    return bf16(static_cast<float>(x));
  } else {
    return static_cast<T>(x);
  }
}
template <class T>
double value(T x) {
  if constexpr (std::is_same_v<T, bf16>) {
    return static_cast<double>(static_cast<float>(x));
  } else {
    return static_cast<double>(x);
  }
}

/// The element a rank contributes at index i: an integer in [-8, 8] that differs
/// between ranks and along the buffer.
int pattern(int rank, std::size_t i) { return static_cast<int>((rank * 31 + i * 7) % 17) - 8; }

template <class T>
std::vector<T> filled(std::size_t n, const std::function<double(std::size_t)>& f) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = make<T>(f(i));
  return v;
}

/// Compares all n elements and reports the first mismatch and how many there are,
/// instead of one failure per element.
template <class T>
::testing::AssertionResult matches(const T* got, std::size_t n,
                                   const std::function<double(std::size_t)>& expect) {
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (value(got[i]) != expect(i)) {
      if (bad++ == 0) first = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << n << " elements wrong; first at ["
                                       << first << "]: got " << value(got[first]) << ", expected "
                                       << expect(first);
}

MpiCommunicator make_world_comm() { return MpiCommunicator(MpiComm::duplicate(test::world().get()), "test"); }

/// Reference reduction over ranks 0..size-1 of pattern(r, i).
double reduce_ref(ReduceOp op, int size, std::size_t i) {
  double acc = pattern(0, i);
  for (int r = 1; r < size; ++r) {
    const double x = pattern(r, i);
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg: acc += x; break;
      case ReduceOp::Max: acc = std::max(acc, x); break;
      case ReduceOp::Min: acc = std::min(acc, x); break;
    }
  }
  return op == ReduceOp::Avg ? acc / size : acc;
}

template <class T>
class Collectives : public ::testing::Test {};
using Scalars = ::testing::Types<float, double, bf16>;
struct ScalarName {
  template <class T>
  static std::string GetName(int) {
    if (std::is_same_v<T, float>) return "fp32";
    if (std::is_same_v<T, double>) return "fp64";
    return "bf16";
  }
};
TYPED_TEST_SUITE(Collectives, Scalars, ScalarName);

TYPED_TEST(Collectives, AllGather) {
  using T = TypeParam;
  MpiCommunicator comm = make_world_comm();
  const int me = comm.rank(), p = comm.size();
  for (std::size_t n : kCounts) {
    SCOPED_TRACE("count_per_rank=" + std::to_string(n));
    const auto send = filled<T>(n, [&](std::size_t i) { return pattern(me, i); });
    std::vector<T> recv(n * p, make<T>(99));
    comm.all_gather(send.data(), recv.data(), n, DTypeOf<T>::value);
    EXPECT_TRUE(matches(recv.data(), n * p, [&](std::size_t j) { return pattern(int(j / n), j % n); }));
  }
}

TYPED_TEST(Collectives, AllGatherInPlace) {
  using T = TypeParam;
  MpiCommunicator comm = make_world_comm();
  const int me = comm.rank(), p = comm.size();
  for (std::size_t n : kCounts) {
    SCOPED_TRACE("count_per_rank=" + std::to_string(n));
    // Only this rank's block holds data; the rest is garbage that must be overwritten.
    std::vector<T> buf(n * p, make<T>(99));
    for (std::size_t i = 0; i < n; ++i) buf[me * n + i] = make<T>(pattern(me, i));
    comm.all_gather(buf.data() + me * n, buf.data(), n, DTypeOf<T>::value);
    EXPECT_TRUE(matches(buf.data(), n * p, [&](std::size_t j) { return pattern(int(j / n), j % n); }));
  }
}

TYPED_TEST(Collectives, ReduceScatterSumAndAvg) {
  using T = TypeParam;
  MpiCommunicator comm = make_world_comm();
  const int me = comm.rank(), p = comm.size();
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
    for (std::size_t n : kCounts) {
      SCOPED_TRACE(std::string(reduce_op_name(op)) + " count_per_rank=" + std::to_string(n));
      // Rank r contributes pattern(r, j) at global index j; block b goes to rank b.
      const auto send = filled<T>(n * p, [&](std::size_t j) { return pattern(me, j); });
      std::vector<T> recv(n, make<T>(99));
      comm.reduce_scatter(send.data(), recv.data(), n, DTypeOf<T>::value, op);
      EXPECT_TRUE(matches(recv.data(), n, [&](std::size_t i) { return reduce_ref(op, p, me * n + i); }));
      // The input is left untouched by the out-of-place form.
      EXPECT_TRUE(matches(send.data(), n * p, [&](std::size_t j) { return pattern(me, j); }));
    }
  }
}

TYPED_TEST(Collectives, ReduceScatterInPlace) {
  using T = TypeParam;
  MpiCommunicator comm = make_world_comm();
  const int me = comm.rank(), p = comm.size();
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
    for (std::size_t n : kCounts) {
      SCOPED_TRACE(std::string(reduce_op_name(op)) + " count_per_rank=" + std::to_string(n));
      auto buf = filled<T>(n * p, [&](std::size_t j) { return pattern(me, j); });
      comm.reduce_scatter(buf.data(), buf.data() + me * n, n, DTypeOf<T>::value, op);
      EXPECT_TRUE(matches(buf.data() + me * n, n, [&](std::size_t i) { return reduce_ref(op, p, me * n + i); }));
    }
  }
}

TYPED_TEST(Collectives, AllReduceEveryOp) {
  using T = TypeParam;
  MpiCommunicator comm = make_world_comm();
  const int me = comm.rank(), p = comm.size();
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
    for (std::size_t n : kCounts) {
      SCOPED_TRACE(std::string(reduce_op_name(op)) + " count=" + std::to_string(n));
      const auto send = filled<T>(n, [&](std::size_t i) { return pattern(me, i); });
      std::vector<T> recv(n, make<T>(99));
      comm.all_reduce(send.data(), recv.data(), n, DTypeOf<T>::value, op);
      EXPECT_TRUE(matches(recv.data(), n, [&](std::size_t i) { return reduce_ref(op, p, i); }));
      EXPECT_TRUE(matches(send.data(), n, [&](std::size_t i) { return pattern(me, i); }));
    }
  }
}

TYPED_TEST(Collectives, AllReduceInPlace) {
  using T = TypeParam;
  MpiCommunicator comm = make_world_comm();
  const int me = comm.rank(), p = comm.size();
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
    for (std::size_t n : kCounts) {
      SCOPED_TRACE(std::string(reduce_op_name(op)) + " count=" + std::to_string(n));
      auto buf = filled<T>(n, [&](std::size_t i) { return pattern(me, i); });
      comm.all_reduce(buf.data(), buf.data(), n, DTypeOf<T>::value, op);
      EXPECT_TRUE(matches(buf.data(), n, [&](std::size_t i) { return reduce_ref(op, p, i); }));
    }
  }
}

TYPED_TEST(Collectives, BroadcastFromEveryRoot) {
  using T = TypeParam;
  MpiCommunicator comm = make_world_comm();
  const int me = comm.rank(), p = comm.size();
  for (int root = 0; root < p; ++root) {
    for (std::size_t n : kCounts) {
      SCOPED_TRACE("root=" + std::to_string(root) + " count=" + std::to_string(n));
      auto buf = filled<T>(n, [&](std::size_t i) { return me == root ? pattern(root, i) : 99; });
      comm.broadcast(buf.data(), n, DTypeOf<T>::value, root);
      EXPECT_TRUE(matches(buf.data(), n, [&](std::size_t i) { return pattern(root, i); }));
    }
  }
}

TEST(MpiCommunicator, IntegerReductions) {
  MpiCommunicator comm = make_world_comm();
  const int me = comm.rank(), p = comm.size();
  std::vector<std::int32_t> a = {me, -me, 7};
  comm.all_reduce_inplace(a.data(), a.size(), ReduceOp::Max);
  EXPECT_EQ(a, (std::vector<std::int32_t>{p - 1, 0, 7}));
  std::vector<std::int64_t> b = {std::int64_t(1) << 40, me};
  comm.all_reduce_inplace(b.data(), b.size(), ReduceOp::Sum);
  EXPECT_EQ(b, (std::vector<std::int64_t>{(std::int64_t(1) << 40) * p, std::int64_t(p) * (p - 1) / 2}));
}

TEST(MpiCommunicator, BarrierHoldsEveryRankUntilTheLastArrives) {
  MpiCommunicator comm = make_world_comm();
  // The last rank arrives 300 ms late; nobody may leave the barrier before it arrives.
  // Measured against a common start (a first barrier), so a rank that leaves early
  // shows an elapsed time far below the delay.
  constexpr double kDelay = 0.3;
  comm.barrier();
  const double start = now_seconds();
  if (comm.rank() == comm.size() - 1) usleep(static_cast<useconds_t>(kDelay * 1e6));
  comm.barrier();
  const double elapsed = now_seconds() - start;
  if (comm.size() > 1) EXPECT_GE(elapsed, 0.9 * kDelay) << "rank " << comm.rank() << " left the barrier early";
}

TEST(MpiCommunicator, TwoAsyncOperationsInFlightCompleteInAnyWaitOrder) {
  MpiCommunicator comm = make_world_comm();
  const int me = comm.rank(), p = comm.size();
  const std::size_t n = 1023;
  auto reduce_buf = filled<float>(n, [&](std::size_t i) { return pattern(me, i); });
  const auto gather_send = filled<bf16>(7, [&](std::size_t i) { return pattern(me, i + 3); });
  std::vector<bf16> gathered(7 * p, make<bf16>(99));

  // Post both, drive progress the way the compute loop does between kernels, then wait
  // in the reverse order of posting.
  Work a = comm.all_reduce_async(reduce_buf.data(), reduce_buf.data(), n, DType::F32, ReduceOp::Avg);
  Work b = comm.all_gather_async(gather_send.data(), gathered.data(), 7, DType::BF16);
  EXPECT_TRUE(a.pending());
  EXPECT_TRUE(b.pending());
  for (int i = 0; i < 10; ++i) comm.progress();
  b.wait();
  EXPECT_FALSE(b.pending());
  a.wait();
  EXPECT_FALSE(a.pending());
  EXPECT_TRUE(matches(reduce_buf.data(), n, [&](std::size_t i) { return reduce_ref(ReduceOp::Avg, p, i); }));
  EXPECT_TRUE(matches(gathered.data(), 7 * p, [&](std::size_t j) { return pattern(int(j / 7), j % 7 + 3); }));

  // Completion by polling: test() finishes the bookkeeping (the 1/size of Avg) too.
  auto rs_send = filled<double>(3 * p, [&](std::size_t j) { return pattern(me, j); });
  std::vector<double> rs_recv(3, 99);
  auto bc = filled<double>(5, [&](std::size_t i) { return me == 0 ? pattern(0, i) : 99; });
  Work c = comm.reduce_scatter_async(rs_send.data(), rs_recv.data(), 3, DType::F64, ReduceOp::Avg);
  Work d = comm.broadcast_async(bc.data(), bc.size(), DType::F64, 0);
  const double deadline = now_seconds() + 60;
  bool c_done = false, d_done = false;
  while (!(c_done && d_done) && now_seconds() < deadline) {
    d_done = d.test();
    c_done = c.test();
  }
  ASSERT_TRUE(c_done && d_done) << "async operations did not complete by polling within 60 s";
  EXPECT_TRUE(matches(rs_recv.data(), 3, [&](std::size_t i) { return reduce_ref(ReduceOp::Avg, p, me * 3 + i); }));
  EXPECT_TRUE(matches(bc.data(), 5, [&](std::size_t i) { return pattern(0, i); }));
}

TEST(MpiCommunicator, DestroyingAnUnwaitedWorkWaits) {
  MpiCommunicator comm = make_world_comm();
  const int me = comm.rank(), p = comm.size();
  auto buf = filled<float>(7, [&](std::size_t i) { return pattern(me, i); });
  { Work w = comm.all_reduce_async(buf.data(), buf.data(), 7, DType::F32, ReduceOp::Avg); }
  EXPECT_TRUE(matches(buf.data(), 7, [&](std::size_t i) { return reduce_ref(ReduceOp::Avg, p, i); }));
}

TEST(MpiCommunicator, CountsOperationsAndBytes) {
  MpiCommunicator comm = make_world_comm();
  const CommStats before = comm_stats();
  std::vector<float> x(10, 1.0f);
  comm.all_reduce(x.data(), x.data(), x.size(), DType::F32, ReduceOp::Sum);
  const CommStats after = comm_stats();
  EXPECT_EQ(after.operations - before.operations, 1u);
  EXPECT_EQ(after.bytes - before.bytes, 2u * 10 * sizeof(float));  // all-reduce moves 2x its input
}

}  // namespace
