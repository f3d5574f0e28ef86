#include "comm/agree.hpp"

#include <climits>

#include "comm/collectives.hpp"
#include "comm/watchdog.hpp"
#include "core/check.hpp"
#include "core/error.hpp"

namespace meshtrain {

void agree_on_errors(const MpiComm& comm, const std::function<void()>& fn, const char* watch_group) {
  std::string message;
  int failed_rank = INT_MAX;
  int status = kExitUserError;
  try {
    fn();
  } catch (const UserError& e) {
    message = e.what();
    failed_rank = comm.rank();
    status = e.exit_status();
  }
  int first = INT_MAX;
  if (watch_group) {
    watched_collective("all_reduce", watch_group, comm, [&](MPI_Request* r) {
      MPI_CHECK(MPI_Iallreduce(&failed_rank, &first, 1, MPI_INT, MPI_MIN, comm.get(), r));
    });
  } else {
    MPI_CHECK(MPI_Allreduce(&failed_rank, &first, 1, MPI_INT, MPI_MIN, comm.get()));
  }
  if (first == INT_MAX) return;
  // Past this point a rank has failed and all ranks know it: the broadcasts below follow
  // at once on every rank, so they need no watchdog.
  status = broadcast_value(comm, status, first);
  message = broadcast_string(comm, std::move(message), first);
  throw UserError(message, status);
}

}  // namespace meshtrain
