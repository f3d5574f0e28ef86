// GoogleTest main for meshtrain: MPI_Init -> Kokkos init -> tests -> finalize (via Runtime).
// Only rank 0 prints GoogleTest's result listener; a failure on any rank fails the run;
// a skipped test on any rank (and no failure) makes every rank exit 77 (CTest: skipped).
#include <gtest/gtest.h>

#include <string>
#include <cstdio>
#include <mpi.h>

#include "comm/watchdog.hpp"
#include "core/error.hpp"
#include "runtime/runtime.hpp"
#include "test_support.hpp"

namespace {
/// On ranks other than 0 the default printer is removed (one report per job); this
/// listener still shows each failed assertion there, prefixed by the rank, so a failure
/// that happens on rank 3 only is visible in the test log.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  // The test name is remembered at start: GoogleTest holds its mutex while it reports a
  // part result, so asking it for the current test there would deadlock.
  void OnTestStart(const ::testing::TestInfo& t) override {
    test_ = std::string(t.test_suite_name()) + "." + t.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s: %s:%d: %s\n", rank_, test_.c_str(), r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.message());
  }

 private:
  int rank_;
  std::string test_;
};
}  // namespace

int main(int argc, char** argv) {
  meshtrain::Runtime runtime(argc, argv, MPI_COMM_WORLD);
  meshtrain::set_abort_context(&meshtrain::abort_all_ranks, runtime.topology().world_rank);
  meshtrain::watchdog_init(runtime.world());
  meshtrain::test::set_runtime(&runtime);
  ::testing::InitGoogleTest(&argc, argv);
  if (runtime.topology().world_rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(runtime.topology().world_rank));
  }
  int local[2] = {RUN_ALL_TESTS() != 0 ? 1 : 0, ::testing::UnitTest::GetInstance()->skipped_test_count() > 0 ? 1 : 0};
  int any[2] = {0, 0};
  MPI_Allreduce(local, any, 2, MPI_INT, MPI_MAX, runtime.world().get());
  if (any[0] && local[0] && runtime.topology().world_rank != 0)
    std::fprintf(stderr, "[rank %d] had failing tests (see above)\n", runtime.topology().world_rank);
  meshtrain::test::set_runtime(nullptr);
  meshtrain::watchdog_finalize();
  // A GTEST_SKIP anywhere (and no failure) exits with kSkipped, which CTest reports as
  // skipped (SKIP_RETURN_CODE in tests/CMakeLists.txt), never as passed.
  constexpr int kSkipped = 77;
  return any[0] ? 1 : any[1] ? kSkipped : 0;
}
