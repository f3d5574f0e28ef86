#pragma once
/// \brief Asynchronous checkpoint saves (checkpoint.async, doc/checkpoints.md
/// "Asynchronous saves"): the file `save` writes, written while training goes on.
///
/// `start`, at a step boundary, copies each rank's owned master weights and moments to host
/// memory (pinned on GPUs), and rank 0 creates the `.tmp` file with every attribute and
/// dataset (contiguous, allocated, placeholder checksums) on the main thread and shares the
/// datasets' file offsets. Each rank's background thread then writes its pieces' bytes at
/// those offsets with pwrite, computes their checksums, counts non-finite values and syncs
/// its writes: no MPI and no HDF5 off the main thread (MPI is initialised FUNNELED and
/// Debian's HDF5 is not thread-safe). At a later step boundary (`poll`, or `wait`) the ranks
/// agree: a failure on any rank removes the `.tmp` and ends every rank alike (exit 74, like
/// a synchronous save's write error); otherwise rank 0 writes the reduced checksums into
/// the file and commits it exactly as `save` does (fsync, rename, `latest`, retention).
/// The datasets and attributes are those `save` writes for the same state, bit for bit.
///
/// One save is in flight at a time: `start` waits for and completes the previous one.

#include <memory>
#include <optional>
#include <string>

#include "checkpoint/checkpoint.hpp"

namespace meshtrain::checkpoint {

class AsyncSave {
 public:
  AsyncSave();
  /// Waits for a background write still running (it touches this object's buffers) and
  /// commits nothing: the `.tmp` stays until the next save's retention removes it, and
  /// `latest` names the previous checkpoint. Reached only when the run is ending anyway.
  ~AsyncSave();
  AsyncSave(const AsyncSave&) = delete;
  AsyncSave& operator=(const AsyncSave&) = delete;

  /// Collective over mesh.world(): begins saving `state` with the engine's current
  /// optimizer state into `dir`/step_%08d.h5; returns once the state is in host memory and
  /// the file is laid out. A save still in flight is completed first (`wait`); its result
  /// is returned (nullopt when there was none). UserError / write error (exit 74) on every
  /// rank alike, as `save`.
  template <class T>
  std::optional<IoStats> start(const parallel::FsdpEngine<T>& engine, const parallel::DeviceMesh& mesh,
                               const CheckpointMeta& meta, const TrainState& state, const std::string& dir);

  /// Whether a save is in flight (the same on every rank).
  bool pending() const;

  /// Collective (one small all-reduce): when every rank's background write has finished,
  /// completes the save (the agreement, the checksums, the commit) and returns its result;
  /// nullopt while any rank is still writing. Call at step boundaries while pending().
  std::optional<IoStats> poll(const MpiComm& comm);

  /// Collective: waits for every rank's background write and completes the save.
  /// written == false when the state held a non-finite value (nothing committed, as save).
  IoStats wait(const MpiComm& comm);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshtrain::checkpoint
