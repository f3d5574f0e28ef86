#include "meshtrain/core/error.hpp"

#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "meshtrain/core/check.hpp"

namespace meshtrain {
namespace {
MPI_Comm g_abort_comm = MPI_COMM_NULL;
int g_world_rank = 0;

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

[[noreturn]] void abort_now(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized && g_abort_comm != MPI_COMM_NULL) MPI_Abort(g_abort_comm, code);
  std::_Exit(code);
}
}  // namespace

void set_abort_context(void* mpi_comm_handle, int world_rank) {
  g_abort_comm = *static_cast<MPI_Comm*>(mpi_comm_handle);
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

namespace detail {
std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, static_cast<std::size_t>(len));
}
}  // namespace detail

}  // namespace meshtrain
