#include "core/error.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "core/check.hpp"

namespace meshtrain {

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

namespace {
AbortAllRanks g_abort_all = nullptr;
int g_world_rank = 0;

[[noreturn]] void abort_now(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (g_abort_all != nullptr) g_abort_all(code);  // ends every rank; returns when MPI is down
  std::_Exit(code);
}
}  // namespace

void set_abort_context(AbortAllRanks abort_all, int world_rank) {
  g_abort_all = abort_all;
  g_world_rank = world_rank;
}

int world_rank() { return g_world_rank; }

void fatal(const char* library, const std::string& message, const char* call, const char* file,
           int line) {
  std::fprintf(stderr, "[meshtrain] rank %d (%s): %s error at %s:%d: %s\n    in: %s\n",
               g_world_rank, host_name().c_str(), library, file, line, message.c_str(), call);
  abort_now(kExitAbort);
}

void abort_job(const std::string& message, int code) {
  std::fprintf(stderr, "[meshtrain] rank %d (%s): aborting the job: %s\n", g_world_rank,
               host_name().c_str(), message.c_str());
  abort_now(code);
}

void abort_job_silently(int code) { abort_now(code); }

}  // namespace meshtrain
