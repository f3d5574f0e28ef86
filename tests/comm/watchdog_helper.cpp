// Test-only program for tests/comm/test_watchdog.sh: one rank deliberately skips a
// collective; the collective watchdog of the ranks left waiting must abort the whole
// job naming the absent rank.
//
//   watchdog_helper world TIMEOUT   (>= 2 ranks) the last rank skips an all_reduce on the
//                                   world group
//   watchdog_helper tp TIMEOUT      (4 ranks, mesh 1x2x2) rank 3 skips the second
//                                   all_reduce of its tp group [2,3]; before that, rank 3
//                                   uses a private group first, so its watchdog group ids
//                                   differ from its peers' (the diagnosis must match
//                                   groups by name, not by id)
//
// Ranks that are not expected to time out sleep instead of exiting, so that the only
// message comes from the waiting rank and nobody hangs in MPI_Finalize.
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "comm/mpi_communicator.hpp"
#include "comm/watchdog.hpp"
#include "core/error.hpp"
#include "parallel/device_mesh.hpp"
#include "runtime/runtime.hpp"

using namespace meshtrain;

namespace {

/// Long enough that the watchdog (a few seconds) fires first; short enough that a
/// broken watchdog shows up as a timeout of the test script rather than a stuck CI.
void idle() { sleep(60); }

int run_world(const Runtime& rt) {
  MpiCommunicator comm(rt.world(), "world");
  float x = 1.0f;
  comm.all_reduce(&x, &x, 1, DType::F32, ReduceOp::Sum);  // everyone: #1
  if (comm.rank() == comm.size() - 1) {
    idle();  // skips #2
    return 0;
  }
  comm.all_reduce(&x, &x, 1, DType::F32, ReduceOp::Sum);  // #2: the last rank never comes
  std::fprintf(stderr, "watchdog_helper: all_reduce completed without the last rank\n");
  return 1;
}

int run_tp(const Runtime& rt) {
  if (rt.world().size() != 4) {
    std::fprintf(stderr, "watchdog_helper tp: needs 4 ranks\n");
    return 1;
  }
  const parallel::DeviceMesh mesh(rt.world(), resolve_mesh_shape({1, 2, 2}, 4, std::nullopt), Backend::Mpi);
  MpiComm self_group = rt.world().split(rt.world().rank(), 0);
  MpiCommunicator self(self_group, "private");
  Communicator& tp = mesh.tp().comm();
  float x = 1.0f;
  if (rt.world().rank() == 3)
    for (int i = 0; i < 5; ++i) self.all_reduce(&x, &x, 1, DType::F32, ReduceOp::Sum);
  tp.all_reduce(&x, &x, 1, DType::F32, ReduceOp::Sum);  // everyone: tp #1
  if (rt.world().rank() == 3) {
    idle();  // skips tp #2
    return 0;
  }
  tp.all_reduce(&x, &x, 1, DType::F32, ReduceOp::Sum);  // tp #2: rank 2 waits for rank 3
  if (rt.world().rank() == 2) {
    std::fprintf(stderr, "watchdog_helper: tp all_reduce completed without rank 3\n");
    return 1;
  }
  idle();  // ranks 0 and 1 (tp group [0,1]) are done; rank 2's watchdog ends the job
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Runtime rt(argc, argv, MPI_COMM_WORLD);
  set_abort_context(&abort_all_ranks, rt.topology().world_rank);
  watchdog_init(rt.world());
  if (argc != 3) {
    std::fprintf(stderr, "usage: watchdog_helper world|tp TIMEOUT_SECONDS\n");
    return 1;
  }
  set_collective_timeout(std::atof(argv[2]));
  const std::string scenario = argv[1];
  const int status = scenario == "world" ? run_world(rt) : scenario == "tp" ? run_tp(rt) : 1;
  watchdog_finalize();
  return status;
}
