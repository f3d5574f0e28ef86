#pragma once
/// \brief What the checkpoint module needs of a run, made from its setup: the module below
/// (checkpoint/) takes this plain data instead of the whole RunSetup.

#include <cstdint>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "plan/run_setup.hpp"

namespace meshtrain::train {

/// The model, resolved mesh, strategy and batch split, schedule, effective configuration
/// and checkpoint.keep of `setup`.
checkpoint::CheckpointMeta checkpoint_meta(const plan::RunSetup& setup);

/// The first training window of every data-parallel rank at the step after `cursor`
/// windows (data::rank_first_window at micro-step 0): TrainState::rank_first_windows.
std::vector<std::uint64_t> next_step_windows(std::uint64_t cursor, const plan::RunSetup& setup);

}  // namespace meshtrain::train
