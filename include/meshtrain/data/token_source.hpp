#pragma once
/// \file
/// \brief `TokenSource`: a read-only, random-access sequence of token ids (a prepared
/// token file, or synthetic tokens for benchmarks). Samplers cut training windows out of it.

#include <cstdint>
#include <string>

namespace meshtrain::data {

/// \brief A random-access sequence of token ids in [0, vocab_size()).
/// Implementations are immutable after construction, so `read` is safe from several threads.
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  /// Number of tokens.
  virtual std::uint64_t size() const = 0;
  /// Every id satisfies 0 <= id < vocab_size().
  virtual std::int64_t vocab_size() const = 0;
  /// out[0 .. len) = tokens[offset .. offset + len). Throws std::out_of_range when the
  /// range is not inside [0, size()) (a caller bug, not bad input), UserError naming the
  /// source and the position when a stored id is outside [0, vocab_size()) (bad input).
  virtual void read(std::uint64_t offset, int len, std::int32_t* out) const = 0;
  /// What the source is, for messages ("data/train.bin", "random tokens (vocab 50304, seed 1)").
  virtual std::string description() const = 0;
};

/// Throws std::out_of_range unless [offset, offset + len) lies inside a source of `size` tokens.
void check_read_range(std::uint64_t offset, int len, std::uint64_t size, const std::string& what);

/// \brief Synthetic tokens for benchmarks (`data.dir = random`): token i =
/// counter_hash(stream_key(seed, RandomTokens), i) % vocab. Deterministic, uses no
/// memory, and any range is produced in O(len). size() = 2^62.
class RandomTokens final : public TokenSource {
 public:
  /// Throws UserError unless 1 <= vocab <= 2^31 - 1.
  RandomTokens(std::int64_t vocab, std::uint64_t seed);

  std::uint64_t size() const override { return std::uint64_t{1} << 62; }
  std::int64_t vocab_size() const override { return vocab_; }
  void read(std::uint64_t offset, int len, std::int32_t* out) const override;
  std::string description() const override;

 private:
  std::int64_t vocab_;
  std::uint64_t seed_;
  std::uint64_t key_;
};

}  // namespace meshtrain::data
