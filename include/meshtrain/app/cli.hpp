#pragma once
/// \brief The command-line front end: dispatches `meshtrain <command>` and turns
/// UserErrors into one message on rank 0 and exit status 2.

#include "runtime/runtime.hpp"

namespace meshtrain::app {

/// Runs the subcommand named by argv[1]; returns the process exit status.
int run_cli(Runtime& runtime, int argc, char** argv);

/// "meshtrain 0.1.0 (git ...)\n  Kokkos ... \n  MPI ...\n  CUDA/NCCL ..." for --version.
std::string version_text();

}  // namespace meshtrain::app
