#pragma once
/// \brief `meshtrain train`: the step loop (gradient accumulation, clipping, AdamW, LR
/// schedule), evaluation, progress lines, metrics.jsonl and the run record.

#include "runtime/runtime.hpp"
#include "plan/run_setup.hpp"

namespace meshtrain::train {

/// Trains as configured; returns the process exit status (0, or kExitAbort after too many
/// non-finite steps). UserError for bad input (on every rank alike).
int run_training(const Runtime& rt, const plan::RunSetup& setup);

}  // namespace meshtrain::train
