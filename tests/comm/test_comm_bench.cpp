// What `bench comm` times (comm/bench.hpp): the collective alone. A fake one-rank
// communicator records what its buffer holds when each broadcast is posted and then
// overwrites it, as a non-root's receive does: any work the benchmark does on the buffer
// between two operations (a device copy of the send buffer before each broadcast, counted in
// the broadcast's time) shows as a buffer that is not what the previous broadcast left.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "comm/bench.hpp"
#include "test_support.hpp"

using namespace meshtrain;

namespace {

constexpr float kReceived = 1000.0f;  // what a "received" broadcast leaves; no value the benchmark sends

class RecordingComm : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* backend() const override { return "fake"; }
  Work all_gather_async(const void* send, void* recv, std::size_t count, DType dtype) override {
    copy(send, recv, count, dtype);
    return Work();
  }
  Work reduce_scatter_async(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp) override {
    copy(send, recv, count, dtype);
    return Work();
  }
  Work all_reduce_async(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp) override {
    copy(send, recv, count, dtype);
    return Work();
  }
  /// fp32 buffers only (the test's): records element 0, then fills the buffer with kReceived.
  Work broadcast_async(void* buffer, std::size_t count, DType dtype, int) override {
    EXPECT_EQ(dtype, DType::F32);
    float* data = static_cast<float*>(buffer);
    seen.push_back(test::to_host(data, 1)[0]);
    Kokkos::deep_copy(UView<float>(data, count), kReceived);
    Kokkos::fence();
    return Work();
  }
  void barrier() override {}

  std::vector<float> seen;  ///< element 0 of the buffer as each broadcast was posted

 private:
  static void copy(const void* send, void* recv, std::size_t count, DType dtype) {
    if (send == recv) return;
    Kokkos::deep_copy(UView<char>(static_cast<char*>(recv), count * dtype_size(dtype)),
                      UView<char>(static_cast<char*>(const_cast<void*>(send)), count * dtype_size(dtype)));
  }
};

}  // namespace

TEST(CommBench, BroadcastTimesTheCollectiveAlone) {
  for (const int iters : {1, 50}) {
    RecordingComm comm;
    bench_collective(comm, CollectiveKind::Broadcast, 4096, DType::F32, /*warmup=*/2, iters);
    ASSERT_EQ(comm.seen.size(), static_cast<std::size_t>(2 + iters));
    // The first broadcast sends the root's data; every later one finds the buffer as the
    // previous broadcast left it: nothing was copied into it in between.
    EXPECT_NE(comm.seen[0], kReceived) << "the root's buffer did not hold its data";
    for (std::size_t i = 1; i < comm.seen.size(); ++i)
      EXPECT_EQ(comm.seen[i], kReceived) << "iters " << iters << ": the buffer was refilled before broadcast " << i;
  }
}
