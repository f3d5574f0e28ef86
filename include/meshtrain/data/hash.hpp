#pragma once
/// \file
/// \brief Counter-based hashing: value i of a stream is a pure function of (key, i), so
/// any element (a random token, a training window's start) is produced in O(1) without
/// producing the earlier ones. This is what makes the data order independent of the
/// number of ranks and resumable from a single cursor.

#include <cstdint>

namespace meshtrain::data {

/// SplitMix64's output mixer (Steele, Lea & Flood 2014): a bijection on 64-bit words
/// whose output passes BigCrush when fed a Weyl sequence.
constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// Streams that share a user seed but must be independent (random tokens vs. window
/// starts) use different stream ids.
enum class HashStream : std::uint64_t { RandomTokens = 1, TrainWindows = 2, PackOrder = 3 };

/// The key of stream `stream` under `seed`.
constexpr std::uint64_t stream_key(std::uint64_t seed, HashStream stream) {
  return mix64(mix64(seed) ^ (static_cast<std::uint64_t>(stream) * 0xd1b54a32d192ed03ULL));
}

/// Element `counter` of the stream with key `key`: the SplitMix64 sequence started at
/// state `key`, i.e. mix64(key + (counter + 1) * golden gamma).
constexpr std::uint64_t counter_hash(std::uint64_t key, std::uint64_t counter) {
  return mix64(key + (counter + 1) * 0x9e3779b97f4a7c15ULL);
}

}  // namespace meshtrain::data
