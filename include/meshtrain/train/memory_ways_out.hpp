#pragma once
/// \brief What a training run (or an eval, a generate) that ran out of device memory can still
/// change to need less: the tail of its OutOfDeviceMemory message (core/memory.hpp). The pool
/// that throws does not know the run's settings and names every way; the command names only
/// those left to it.

#include <string>

#include "plan/run_setup.hpp"

namespace meshtrain::train {

/// The settings of `setup` that lower its memory per rank, as one clause ("a smaller
/// train.micro_batch (this run: 8), train.activation_checkpointing=true or more ranks"):
/// only the changes this run has not made already; more ranks always.
std::string memory_ways_out(const plan::RunSetup& setup);

/// The same for `meshtrain eval` on `setup`: no backward, so no activation checkpointing;
/// a smaller micro-batch (or, at 1, a shorter window), the weights' ways, more ranks.
std::string eval_memory_ways_out(const plan::RunSetup& setup);

/// The same for `meshtrain generate --tokens tokens`: one sequence, whose KV cache holds the
/// prompt and the new tokens; the weights' ways, more ranks.
std::string generate_memory_ways_out(const plan::RunSetup& setup, int tokens);

}  // namespace meshtrain::train
