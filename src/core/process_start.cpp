#include "core/process_start.hpp"

#include "core/timer.hpp"

namespace meshtrain {
namespace {

// Initialised by the first call (main's mark), thread-safely.
double start_slot() {
  static const double start = now_seconds();
  return start;
}

}  // namespace

void mark_process_start() { (void)start_slot(); }

double process_start_seconds() { return start_slot(); }

}  // namespace meshtrain
