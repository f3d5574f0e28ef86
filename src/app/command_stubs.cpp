// Temporary: commands that later issues implement.
#include "meshtrain/app/commands.hpp"
#include "meshtrain/config/config.hpp"
#include "meshtrain/core/error.hpp"

namespace meshtrain::app {
namespace {
int reserved(const char* name, const Args& args) {
  parse_config(name, args);
  throw UserError(strprintf("`meshtrain %s` is not available in this build yet", name));
}
}  // namespace
int command_train(Runtime&, const Args& a) { return reserved("train", a); }
int command_convert(Runtime&, const Args& a) { return reserved("convert", a); }
int command_generate(Runtime&, const Args& a) { return reserved("generate", a); }
int command_eval(Runtime&, const Args& a) { return reserved("eval", a); }
int command_bench(Runtime&, const Args& a) { return reserved("bench", a); }
}  // namespace meshtrain::app
