#pragma once
/// \brief Settings that are valid but silently do less than they say: one key overridden
/// by another, a time-limit margin that leaves no time to train, evaluation steps that
/// add log lines. `train` prints each as a warning at start-up (rank 0), and a LoRA run
/// says so with its trainable-parameter count.

#include <string>
#include <vector>

#include "plan/run_setup.hpp"

namespace meshtrain::train {

/// One sentence per setting of `setup` that does less than (or other than) it says, naming
/// the keys involved and which one wins. Empty when there is none. Pure (no I/O).
std::vector<std::string> setting_warnings(const plan::RunSetup& setup);

/// "LoRA fine-tuning: rank 4, alpha 16 on c_attn: 12288 trainable parameters (1.1% of
/// 1085952); base weights frozen", or "" without LoRA.
std::string lora_summary(const model::ModelDims& dims);

}  // namespace meshtrain::train
