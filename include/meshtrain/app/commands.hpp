#pragma once
/// \brief One function per subcommand. Each receives the arguments after its name and
/// returns an exit status; user errors are thrown as UserError.

#include <string>
#include <vector>

#include "runtime/runtime.hpp"

namespace meshtrain::app {

using Args = std::vector<std::string>;

int command_plan(Runtime& rt, const Args& args);
int command_train(Runtime& rt, const Args& args);
int command_prepare(Runtime& rt, const Args& args);
int command_convert(Runtime& rt, const Args& args);
int command_generate(Runtime& rt, const Args& args);
int command_eval(Runtime& rt, const Args& args);
int command_bench(Runtime& rt, const Args& args);
int command_tokenize(Runtime& rt, const Args& args);
/// `meshtrain bench io` (its own file: it builds the model and mesh like `train`).
int command_bench_io(Runtime& rt, const Args& args);

}  // namespace meshtrain::app
