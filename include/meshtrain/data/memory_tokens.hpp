#pragma once
/// \file
/// \brief `MemoryTokens`: a TokenSource over ids held in memory (text tokenised on the fly,
/// e.g. `meshtrain eval --text FILE`).

#include <cstdint>
#include <string>
#include <vector>

#include "data/token_source.hpp"

namespace meshtrain::data {

class MemoryTokens final : public TokenSource {
 public:
  /// UserError when an id is outside [0, vocab), naming `description`.
  MemoryTokens(std::vector<std::int32_t> ids, std::int64_t vocab, std::string description);
  std::uint64_t size() const override { return ids_.size(); }
  std::int64_t vocab_size() const override { return vocab_; }
  void read(std::uint64_t offset, int len, std::int32_t* out) const override;
  std::string description() const override { return description_; }

 private:
  std::vector<std::int32_t> ids_;
  std::int64_t vocab_;
  std::string description_;
};

}  // namespace meshtrain::data
