#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "meshtrain/comm/mpi_communicator.hpp"
#include "test_support.hpp"

using namespace meshtrain;

TEST(MpiCommunicator, AllReduceSumFp32) {
  MpiCommunicator comm(MpiComm::duplicate(test::world().get()), "test");
  std::vector<float> x(7, static_cast<float>(comm.rank() + 1));
  comm.all_reduce(x.data(), x.data(), x.size(), DType::F32, ReduceOp::Sum);
  const float expect = comm.size() * (comm.size() + 1) / 2.0f;
  for (float v : x) EXPECT_EQ(v, expect);
}
