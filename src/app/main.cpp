// meshtrain: one SPMD executable; see `meshtrain --help`.
// The only file that touches MPI_COMM_WORLD: everything else receives a communicator.
#include <mpi.h>

#include "app/cli.hpp"
#include "comm/watchdog.hpp"
#include "core/error.hpp"
#include "core/process_start.hpp"
#include "runtime/runtime.hpp"

int main(int argc, char** argv) {
  // First: train.time_limit counts from here, MPI_Init and every later start-up step included.
  meshtrain::mark_process_start();
  meshtrain::Runtime runtime(argc, argv, MPI_COMM_WORLD);
  meshtrain::set_abort_context(&meshtrain::abort_all_ranks, runtime.topology().world_rank);
  meshtrain::watchdog_init(runtime.world());
  const int status = meshtrain::app::run_cli(runtime, argc, argv);
  meshtrain::watchdog_finalize();
  return status;
}
