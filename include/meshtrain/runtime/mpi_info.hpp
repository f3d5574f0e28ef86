#pragma once
/// \brief RAII owner of an `MPI_Info` (hints for MPI-IO and the like): created empty, freed
/// with the object, so that code outside runtime/ never calls MPI itself.

#include <mpi.h>

namespace meshtrain {

class MpiInfo {
 public:
  MpiInfo();
  ~MpiInfo();
  MpiInfo(const MpiInfo&) = delete;
  MpiInfo& operator=(const MpiInfo&) = delete;

  void set(const char* key, const char* value);
  MPI_Info get() const { return info_; }

 private:
  MPI_Info info_ = MPI_INFO_NULL;
};

}  // namespace meshtrain
