#pragma once
/// \brief When this process started, on now_seconds()'s clock (core/timer.hpp): main() marks
/// it first thing, before MPI_Init and Kokkos's initialisation, and train.time_limit counts
/// from it (train/stop_policy.hpp), so that the start-up -- MPI, a checkpoint's load, the
/// data's checks, the measurements -- is inside the limit, as it is inside a scheduler's.

namespace meshtrain {

/// Records now_seconds() as this process's start; main() calls it first. Later calls
/// change nothing.
void mark_process_start();
/// now_seconds() at mark_process_start() (without a mark, as in a unit test: at the first
/// call of either). Each rank's own steady clock: compare it with now_seconds() of the same
/// process only (hosts' steady clocks count from their own boot).
double process_start_seconds();

}  // namespace meshtrain
