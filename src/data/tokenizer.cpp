#include "meshtrain/data/tokenizer.hpp"

#include "meshtrain/core/error.hpp"

namespace meshtrain::data {

std::vector<std::int32_t> ByteTokenizer::encode(const std::string& text) const {
  std::vector<std::int32_t> ids(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::string out;
  out.reserve(ids.size());
  for (const std::int32_t id : ids) {
    if (id >= 0 && id < 256) out += static_cast<char>(id);
    else if (id == kEot) out += "<|endoftext|>";
    else out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
  }
  return out;
}

std::vector<std::string> known_tokenizers() { return {"byte"}; }

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name) {
  if (name == "byte") return std::make_unique<ByteTokenizer>();
  throw UserError(strprintf("unknown tokenizer '%s'; known tokenizers: %s", name.c_str(),
                            join(known_tokenizers(), ", ").c_str()));
}

}  // namespace meshtrain::data
