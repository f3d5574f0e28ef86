// Temporary: commands that later issues implement.
#include <cstdio>

#include "meshtrain/app/commands.hpp"
#include "meshtrain/config/config.hpp"
#include "meshtrain/core/error.hpp"

namespace meshtrain::app {
namespace {
int reserved(const char* name, const Args& args) {
  // --help works already: every command shares the configuration keys.
  const ParsedArgs parsed = parse_config(name, args);
  if (parsed.help) {
    if (world_rank() == 0) std::fputs(parsed.help_text.c_str(), stdout);
    return 0;
  }
  throw UserError(strprintf("`meshtrain %s` is not available in this build yet", name));
}
}  // namespace
}  // namespace meshtrain::app
