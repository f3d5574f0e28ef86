#pragma once
/// \brief What a training run that ran out of device memory can still change to need less:
/// the tail of its OutOfDeviceMemory message (core/memory.hpp). The pool that throws does not
/// know the run's settings and names every way; the trainer names only those left to this run.

#include <string>

#include "plan/run_setup.hpp"

namespace meshtrain::train {

/// The settings of `setup` that lower its memory per rank, as one clause ("a smaller
/// train.micro_batch (this run: 8), train.activation_checkpointing=true or more ranks"):
/// only the changes this run has not made already; more ranks always.
std::string memory_ways_out(const plan::RunSetup& setup);

}  // namespace meshtrain::train
