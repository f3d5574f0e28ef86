#include "meshtrain/comm/agree.hpp"

#include <climits>
#include <vector>

#include "meshtrain/comm/watchdog.hpp"
#include "meshtrain/core/check.hpp"
#include "meshtrain/core/error.hpp"

namespace meshtrain {

void agree_on_errors(const MpiComm& comm, const std::function<void()>& fn) {
  std::string message;
  int failed_rank = INT_MAX;
  try {
    fn();
  } catch (const UserError& e) {
    message = e.what();
    failed_rank = comm.rank();
  }
  // Under the watchdog: the trainer agrees on every step's token ids, so a rank that
  // stalls between steps must be named and end the job, not leave the others here forever.
  int first = INT_MAX;
  watched_collective("all_reduce (agree on errors)", "world", comm, [&](MPI_Request* r) {
    MPI_CHECK(MPI_Iallreduce(&failed_rank, &first, 1, MPI_INT, MPI_MIN, comm.get(), r));
  });
  if (first == INT_MAX) return;
  int len = static_cast<int>(message.size());
  MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, first, comm.get()));
  std::vector<char> buf(static_cast<std::size_t>(len) + 1, '\0');
  if (comm.rank() == first) std::copy(message.begin(), message.end(), buf.begin());
  MPI_CHECK(MPI_Bcast(buf.data(), len, MPI_CHAR, first, comm.get()));
  throw UserError(std::string(buf.data(), static_cast<std::size_t>(len)));
}

}  // namespace meshtrain
