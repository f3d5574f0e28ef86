#pragma once
// Tensor checksums of a checkpoint (doc/checkpoints.md, "Checksums"): the CRC-32C of every
// tensor dataset's bytes as stored (little-endian float32, row-major), one uint32
// attribute `crc32c` per dataset, and `checksum` = "crc32c" on the file.
//
// Why one checksum per tensor and not per written piece: the pieces are the writer mesh's
// hyperslabs, and a reader on another mesh reads other hyperslabs. CRC is linear, so each
// rank computes the contribution of the elements it owns (crc32c::Contribution), on the
// writer's mesh at save as on the reader's at load, and an xor-reduction gives the
// tensor's CRC on any mesh: every element on disk is verified once (by its owner; the
// copies replicas read are not hashed again), with no extra read and one small all-reduce
// per file. A burst of up to 32 bits (a flipped byte anywhere)
// always changes a CRC-32C, whatever the tensor's length.

#include <hdf5.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/crc32c.hpp"
#include "model/param_spec.hpp"
#include "runtime/mpi_comm.hpp"
#include "pieces.hpp"

namespace meshtrain::checkpoint::checksum {

inline constexpr const char* kFileAttr = "checksum";   ///< on "/": the algorithm of the tensor checksums
inline constexpr const char* kAlgorithm = "crc32c";
inline constexpr const char* kTensorAttr = "crc32c";   ///< on every tensor dataset: uint32

/// One rank's contributions to the checksums of the tensors of `arrays` state arrays
/// (0: /model, 1: exp_avg, 2: exp_avg_sq) of every spec.
class Partials {
 public:
  Partials(const std::vector<model::ParamSpec>& specs, int arrays);
  /// Adds the elements of `piece` of array k, held contiguously from `data` in the
  /// piece's order. Each logical element must be added by exactly one rank (its owner).
  void add(int k, const Piece& piece, const float* data);
  /// Marks tensor (spec, k) as read (on every rank alike, whether this rank holds any of it).
  void mark(int spec, int k) { touched_[slot(spec, k)] = 1; }
  /// Seconds spent in add (the cost of checksumming).
  double seconds() const { return seconds_; }

  /// Collective over `comm`: the CRC-32C of every tensor, the same on every rank.
  std::vector<std::uint32_t> reduce(const MpiComm& comm) const;
  bool touched(int spec, int k) const { return touched_[slot(spec, k)] != 0; }
  int arrays() const { return arrays_; }
  const std::vector<model::ParamSpec>& specs() const { return specs_; }
  std::size_t slot(int spec, int k) const { return static_cast<std::size_t>(spec) * arrays_ + k; }

 private:
  const std::vector<model::ParamSpec>& specs_;
  int arrays_;
  std::vector<crc32c::Contribution> parts_;
  std::vector<char> touched_;
  double seconds_ = 0;
};

/// Writes the file marker and every tensor's checksum: `datasets[slot]` is the open dataset
/// of (spec, k) (invalid ids for tensors not written). Collective metadata: every rank
/// makes the same calls with the same values.
void write(hid_t file, const Partials& parts, const std::vector<std::uint32_t>& crcs, const std::vector<hid_t>& datasets);

/// Whether an open file has tensor checksums: false for a checkpoint written before they
/// existed (with a one-line notice when `notice`: rank 0 of a collective reader);
/// UserError for an unknown algorithm. `path` names the file in the messages. Collective
/// when the file is open collectively.
bool present(hid_t file, const std::string& path, bool notice = true);

/// The checksum stored on dataset `ds_path` of an open file; UserError naming the dataset
/// when it lacks one (the file records checksums, so the attribute was lost to damage).
std::uint32_t stored(hid_t file, const std::string& ds_path, const std::string& where);

/// UserError naming `where` (the file and the dataset) when `computed` != `expected`.
void require_match(std::uint32_t expected, std::uint32_t computed, const std::string& where);

/// Collective: reduces `parts`, compares every touched tensor with its stored checksum and
/// raises the same UserError on every rank for the first mismatch; `where(spec, k)` names
/// the file and dataset, `ds_path(spec, k)` is the dataset. A file without checksums is
/// read unverified (the notice of `present`).
void verify(const MpiComm& comm, hid_t file, const std::string& path, const Partials& parts,
            const std::function<std::string(int, int)>& ds_path, const std::function<std::string(int, int)>& where);

}  // namespace meshtrain::checkpoint::checksum
