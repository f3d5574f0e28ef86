#include "runtime/mpi_comm.hpp"

#include "core/check.hpp"

namespace meshtrain {
namespace {
void free_comm(MPI_Comm* c) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && *c != MPI_COMM_NULL) MPI_Comm_free(c);
  delete c;
}
}  // namespace

MpiComm::MpiComm(MPI_Comm owned) : comm_(new MPI_Comm(owned), free_comm) {}

MpiComm MpiComm::duplicate(MPI_Comm comm) {
  MPI_Comm dup;
  MPI_CHECK(MPI_Comm_dup(comm, &dup));
  return MpiComm(dup);
}

MpiComm MpiComm::split(int color, int key) const {
  MPI_Comm out;
  MPI_CHECK(MPI_Comm_split(get(), color, key, &out));
  if (out == MPI_COMM_NULL) return MpiComm();
  return MpiComm(out);
}

MpiComm MpiComm::split_shared() const {
  MPI_Comm out;
  MPI_CHECK(MPI_Comm_split_type(get(), MPI_COMM_TYPE_SHARED, rank(), MPI_INFO_NULL, &out));
  return MpiComm(out);
}

int MpiComm::rank() const {
  int r = 0;
  MPI_CHECK(MPI_Comm_rank(get(), &r));
  return r;
}

int MpiComm::size() const {
  int s = 0;
  MPI_CHECK(MPI_Comm_size(get(), &s));
  return s;
}

}  // namespace meshtrain
