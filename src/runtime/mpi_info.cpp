#include "runtime/mpi_info.hpp"

#include "core/check.hpp"

namespace meshtrain {

MpiInfo::MpiInfo() { MPI_CHECK(MPI_Info_create(&info_)); }

MpiInfo::~MpiInfo() {
  if (info_ != MPI_INFO_NULL) MPI_Info_free(&info_);
}

void MpiInfo::set(const char* key, const char* value) { MPI_CHECK(MPI_Info_set(info_, key, value)); }

}  // namespace meshtrain
