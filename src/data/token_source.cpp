#include "data/token_source.hpp"

#include <stdexcept>

#include "core/error.hpp"
#include "data/hash.hpp"

namespace meshtrain::data {

void check_read_range(std::uint64_t offset, int len, std::uint64_t size, const std::string& what) {
  if (len < 0 || offset > size || static_cast<std::uint64_t>(len) > size - offset)
    throw std::out_of_range(strprintf("read of %d tokens at offset %llu is outside %s (%llu tokens)",
                                      len, static_cast<unsigned long long>(offset), what.c_str(),
                                      static_cast<unsigned long long>(size)));
}

RandomTokens::RandomTokens(std::int64_t vocab, std::uint64_t seed)
    : vocab_(vocab), seed_(seed), key_(stream_key(seed, HashStream::RandomTokens)) {
  MESHTRAIN_REQUIRE(vocab >= 1 && vocab <= INT32_MAX,
                    "random tokens need a vocabulary of 1 .. 2^31-1 ids, got %lld",
                    static_cast<long long>(vocab));
}

void RandomTokens::read(std::uint64_t offset, int len, std::int32_t* out) const {
  check_read_range(offset, len, size(), description());
  const auto v = static_cast<std::uint64_t>(vocab_);
  for (int i = 0; i < len; ++i)
    out[i] = static_cast<std::int32_t>(counter_hash(key_, offset + static_cast<std::uint64_t>(i)) % v);
}

std::string RandomTokens::description() const {
  return strprintf("random tokens (vocab %lld, seed %llu)", static_cast<long long>(vocab_),
                   static_cast<unsigned long long>(seed_));
}

}  // namespace meshtrain::data
