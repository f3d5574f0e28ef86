#include "data/memory_tokens.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/format.hpp"

namespace meshtrain::data {

MemoryTokens::MemoryTokens(std::vector<std::int32_t> ids, std::int64_t vocab, std::string description)
    : ids_(std::move(ids)), vocab_(vocab), description_(std::move(description)) {
  for (std::size_t i = 0; i < ids_.size(); ++i)
    MESHTRAIN_REQUIRE(ids_[i] >= 0 && ids_[i] < vocab_,
                      "%s: token %zu has id %d, outside the model's vocabulary of %lld; use the model's tokenizer",
                      description_.c_str(), i, ids_[i], static_cast<long long>(vocab_));
}

void MemoryTokens::read(std::uint64_t offset, int len, std::int32_t* out) const {
  check_read_range(offset, len, ids_.size(), description_);
  std::copy(ids_.begin() + static_cast<std::ptrdiff_t>(offset), ids_.begin() + static_cast<std::ptrdiff_t>(offset + len),
            out);
}

}  // namespace meshtrain::data
