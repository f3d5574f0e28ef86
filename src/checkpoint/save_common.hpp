#pragma once
// The parts of a checkpoint save shared by the synchronous save (save.cpp: every rank
// writes through collective MPI-IO) and the asynchronous one (async_save.cpp: rank 0 lays
// the file out, each rank's background thread writes its bytes): the directory probe, the
// file's metadata, the agreement on errors and the commit (doc/checkpoints.md).

#include <hdf5.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "h5.hpp"
#include "checkpoint/checkpoint.hpp"
#include "model/param_spec.hpp"

namespace meshtrain::checkpoint::save_common {

/// Every collective of a save (MPI and HDF5) is one of this watchdog group on the world
/// communicator, so a rank that stalls anywhere inside a save is named (watchdog.hpp).
inline constexpr const char* kWatchGroup = "checkpoint";

/// Rank 0: the directory exists and a file can be created in it (the create that follows
/// would otherwise fail with HDF5's stack instead of a sentence).
void prepare_directory(const std::string& dir, const std::string& probe);

/// The largest errno any rank saw (0: every call succeeded), the same on every rank. A
/// watched all-reduce: ranks stalled before it are named.
int agree_errno(const MpiComm& comm, int err);

/// Tensor bytes of a save (3 arrays of every trainable parameter); the file adds a little
/// metadata.
std::uint64_t tensor_bytes(const std::vector<model::ParamSpec>& specs);

std::uint64_t count_nonfinite(const float* p, std::int64_t n);

/// The metadata of a save: root attributes, groups, /model's attributes, the sampler's
/// windows (written by `writes_windows`; the others take part with an empty selection), a
/// LoRA run's base reference (`has_frozen`) and every dataset (spec x {master, exp_avg,
/// exp_avg_sq}: contiguous, allocated at creation, never filled), in spec order. `failed`
/// records a failed call; after one every call is still made (under MPI-IO they are
/// collective). Not watched itself: a collective caller wraps it in a WatchedBlockingCall.
void create_metadata(const std::vector<model::ParamSpec>& specs, bool has_frozen, const parallel::DeviceMesh& mesh,
                     const CheckpointMeta& meta, const TrainState& st, hid_t file, hid_t dxpl, bool writes_windows,
                     std::vector<std::array<h5::Handle, 3>>& datasets, const std::function<void(bool)>& failed);

/// Rank 0 commits the complete, closed `tmp`: fsync, rename to `path`, replace `latest`,
/// apply retention (doc/checkpoints.md, the commit protocol). Collective (the errors).
void commit(const MpiComm& comm, const std::string& dir, const std::string& tmp, const std::string& path,
            const std::string& name, int keep);

}  // namespace meshtrain::checkpoint::save_common
