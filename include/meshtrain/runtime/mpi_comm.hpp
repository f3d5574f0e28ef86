#pragma once
/// \brief RAII owner of an MPI communicator: `MPI_Comm_dup`/`split` into a shared_ptr
/// whose deleter frees it (while MPI is still initialised).

#include <mpi.h>

#include <memory>

namespace meshtrain {

class MpiComm {
 public:
  MpiComm() = default;
  /// Duplicates `comm` so meshtrain's traffic never mixes with the caller's.
  static MpiComm duplicate(MPI_Comm comm);

  /// `MPI_Comm_split(color, key)`; ranks passing MPI_UNDEFINED get a null MpiComm.
  MpiComm split(int color, int key) const;
  /// Ranks that share memory (one node).
  MpiComm split_shared() const;

  MPI_Comm get() const { return comm_ ? *comm_ : MPI_COMM_NULL; }
  bool valid() const { return comm_ != nullptr; }
  int rank() const;
  int size() const;

 private:
  explicit MpiComm(MPI_Comm owned);
  std::shared_ptr<MPI_Comm> comm_;
};

}  // namespace meshtrain
