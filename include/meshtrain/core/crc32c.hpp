#pragma once
/// \brief CRC-32C (Castagnoli; iSCSI, ext4, Btrfs): polynomial 0x1EDC6F41, reflected,
/// initial value and final xor 0xFFFFFFFF. crc32c::value("123456789") == 0xE3069283.
///
/// Besides the checksum of a buffer, this gives the checksum of a byte stream that nobody
/// holds in one piece: CRC is linear over GF(2), so the CRC of a stream is the xor of the
/// contributions of its segments, each the segment's CRC "moved" to the end of the
/// stream (multiplied by x^(8 * bytes that follow it) modulo the polynomial). Checkpoint
/// ranks hold scattered rectangles of a tensor (doc/checkpoints.md), compute their
/// contributions independently, and an xor-reduction gives the CRC-32C of the whole
/// tensor as stored -- the same number on any mesh, and the one any CRC-32C tool computes
/// from the tensor's bytes.
///
/// The SSE4.2 instruction is used where the CPU has it (checked at run time); otherwise a
/// portable slicing-by-8 table. Both give the same values (tested).

#include <cstddef>
#include <cstdint>
#include <vector>

namespace meshtrain::crc32c {

/// CRC-32C of `n` bytes.
std::uint32_t value(const void* data, std::size_t n);
/// CRC-32C of a stream continued by `n` more bytes: value(a || b) == extend(value(a), b).
std::uint32_t extend(std::uint32_t crc, const void* data, std::size_t n);
/// CRC-32C of a || b from value(a), value(b) and b's length.
std::uint32_t combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t len_b);

/// True when the SSE4.2 instruction is in use (for tests and the log).
bool hardware();

namespace detail {
/// The register update without the initial and final inversion (linear in state and data).
std::uint32_t update(std::uint32_t state, const unsigned char* p, std::size_t n, bool allow_hardware = true);
/// x^(8 n) modulo the polynomial: the operator that appends n zero bytes to a raw state.
std::uint32_t zeros_operator(std::uint64_t n);
/// a * b modulo the polynomial (reflected bit order).
std::uint32_t multiply(std::uint32_t a, std::uint32_t b);
}  // namespace detail

/// \brief The contribution of some segments of a stream of `total` bytes to its CRC-32C.
/// Segments may come in any order (increasing order is the fast case: one multiplication
/// per segment, with the operator of a repeated distance cached) and must not overlap.
/// The xor of the contributions of segments that tile the stream, given to `finish`,
/// is its CRC-32C.
class Contribution {
 public:
  explicit Contribution(std::uint64_t total) : total_(total) {}
  /// Adds `n` bytes at `data` that sit at byte `offset` of the stream.
  void add(std::uint64_t offset, const void* data, std::size_t n);
  /// This object's contribution (xor it with the other holders' contributions).
  std::uint32_t get() const;

 private:
  std::uint64_t total_;
  std::uint32_t acc_ = 0;      ///< raw state of the current run of segments, ending at end_
  std::uint64_t end_ = 0;
  std::uint64_t cached_distance_ = 0;
  std::uint32_t cached_op_ = 0x80000000u;  // x^0: the identity
  std::vector<std::pair<std::uint32_t, std::uint64_t>> done_;  ///< (raw state, end) of earlier runs
  std::uint32_t op(std::uint64_t distance);
};

/// The CRC-32C of a stream of `total` bytes from the xor of all its segments' contributions.
std::uint32_t finish(std::uint32_t xor_of_contributions, std::uint64_t total);

}  // namespace meshtrain::crc32c
