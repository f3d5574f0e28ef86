#pragma once
// The reference from a LoRA checkpoint to its frozen base weights: checkpoints of a LoRA
// run hold the adapters and their optimizer state only, plus where the base came from and
// how to recognise it again (total size and newest modification time of its files).

#include <hdf5.h>

#include <optional>
#include <string>

#include "checkpoint/checkpoint.hpp"
#include "runtime/mpi_comm.hpp"

namespace meshtrain::checkpoint {

/// Identity of weights `path` (a file, or a directory of *.safetensors files): absolute
/// path, total bytes, newest mtime. Not collective (file-system lookups).
BaseRef describe_base(const std::string& path);

/// UserError naming the base path when it no longer exists or differs from `ref` (size or
/// modification time); `checkpoint` is the file that refers to it. Not collective.
void check_base(const BaseRef& ref, const std::string& checkpoint);

/// Root attributes base_weights, base_weights_bytes, base_weights_mtime_ns, base_weights_seed,
/// base_weights_init_std.
void write_base_ref(hid_t file, const BaseRef& ref);
/// The reference of an open checkpoint; nullopt when it has none (it holds every parameter).
std::optional<BaseRef> read_base_ref(hid_t file);

/// Rank 0's `ref` on every rank.
void broadcast(const MpiComm& comm, BaseRef& ref);

}  // namespace meshtrain::checkpoint
