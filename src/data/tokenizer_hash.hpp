#pragma once
// The digest meta.json and compatibility checks use for a tokenizer (internal).
#include <cstdint>
#include <string>

#include "data/bpe_tokenizer.hpp"

namespace meshtrain::data {

/// \brief 128-bit FNV-1a (two 64-bit lanes with different offsets) as 32 hex digits.
/// Not cryptographic: it tells tokenizers apart, it does not authenticate them.
class Digest {
 public:
  void add(const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) {
      a_ = (a_ ^ p[i]) * 0x100000001b3ULL;
      b_ = (b_ ^ p[i]) * 0x100000001b3ULL;
    }
  }
  /// A string followed by a separator, so ("ab","c") and ("a","bc") differ.
  void add_field(const std::string& s) {
    add(s.data(), s.size());
    const unsigned char sep[2] = {0xFF, 0x00};
    add(sep, 2);
  }
  std::string hex() const;

 private:
  std::uint64_t a_ = 0xcbf29ce484222325ULL;
  std::uint64_t b_ = 0x84222325cbf29ce4ULL;
};

/// What defines a BPE tokenizer's ids: vocabulary in id order, merges in rank order, and
/// which ids are added tokens. Equal for the same model read from tokenizer.json or GGUF.
std::string bpe_hash(const BpeConfig& c);

}  // namespace meshtrain::data
