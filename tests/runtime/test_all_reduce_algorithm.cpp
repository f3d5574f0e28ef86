// The all-reduce algorithm the Runtime selects for Open MPI's non-blocking collectives
// (halving-doubling; doc/perf.md) is the one libnbc really runs, and the one the cost model
// times. The value libnbc holds is read back through the MPI tool interface (MPI_T), not
// from the environment variable the Runtime set. The test is registered twice: as the
// Runtime leaves it, and with the user's own choice in the environment (which must win).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <string>

#include "runtime/runtime.hpp"
#include "test_support.hpp"

using namespace meshtrain;

namespace {

/// libnbc's coll_libnbc_iallreduce_algorithm as Open MPI holds it; -1 when this MPI has no
/// such variable.
int libnbc_iallreduce_algorithm() {
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return -1;
  int index = -1, value = -1;
  if (MPI_T_cvar_get_index("coll_libnbc_iallreduce_algorithm", &index) == MPI_SUCCESS) {
    MPI_T_cvar_handle handle;
    int count = 0;
    if (MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
      if (count != 1 || MPI_T_cvar_read(handle, &value) != MPI_SUCCESS) value = -1;
      MPI_T_cvar_handle_free(&handle);
    }
  }
  MPI_T_finalize();
  return value;
}

TEST(AllReduceAlgorithm, LibnbcRunsWhatTheCostModelTimes) {
  const char* expect = std::getenv("MESHTRAIN_TEST_EXPECT_IALLREDUCE");  // the test's registration
  ASSERT_NE(expect, nullptr) << "registered without MESHTRAIN_TEST_EXPECT_IALLREDUCE";
  const int held = libnbc_iallreduce_algorithm();
  if (std::string(mpi_library_version()).rfind("Open MPI", 0) != 0) GTEST_SKIP() << "not Open MPI";
  ASSERT_GE(held, 0) << "Open MPI without coll_libnbc_iallreduce_algorithm";
  EXPECT_EQ(held, std::atoi(expect));
  switch (held) {
    case 3: EXPECT_EQ(mpi_all_reduce_algorithm(), MpiAllReduce::HalvingDoubling); break;
    case 1: EXPECT_EQ(mpi_all_reduce_algorithm(), MpiAllReduce::Ring); break;
    default: EXPECT_EQ(mpi_all_reduce_algorithm(), MpiAllReduce::BinomialTree); break;
  }
}

TEST(AllReduceAlgorithm, SumsAreExactOnEveryRankWithEitherAlgorithm) {
  // Integers in fp32 sum exactly in any order: every rank gets the same, right answer for
  // counts below, at and above the group's power of two (halving-doubling needs count >=
  // that power of two, and libnbc runs a ring below it).
  const MpiComm& world = test::world();
  const int n = world.size();
  for (int count : {1, 3, n, 1000, 4097}) {
    std::vector<float> v(static_cast<std::size_t>(count));
    for (int i = 0; i < count; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>((world.rank() + 1) * (i % 7 + 1));
    MPI_Request r;
    ASSERT_EQ(MPI_Iallreduce(MPI_IN_PLACE, v.data(), count, MPI_FLOAT, MPI_SUM, world.get(), &r), MPI_SUCCESS);
    ASSERT_EQ(MPI_Wait(&r, MPI_STATUS_IGNORE), MPI_SUCCESS);
    const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
    for (int i = 0; i < count; ++i) ASSERT_EQ(v[static_cast<std::size_t>(i)], ranks_sum * static_cast<float>(i % 7 + 1)) << count << " " << i;
  }
}

}  // namespace
