#pragma once
/// \file
/// \brief `Tokenizer`: text <-> token ids. `ByteTokenizer` (one id per UTF-8 byte plus an
/// end-of-text id) needs no vocabulary file; a BPE tokenizer implements the same interface.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace meshtrain::data {

/// \brief Maps text to ids in [0, vocab_size()) and back.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  /// The name `make_tokenizer` knows it by ("byte"); stored in meta.json.
  virtual std::string name() const = 0;
  virtual std::int64_t vocab_size() const = 0;
  /// The id that `prepare` appends after every document.
  virtual std::int32_t eot_id() const = 0;
  /// Never produces eot_id(): document boundaries are added by the caller.
  virtual std::vector<std::int32_t> encode(const std::string& text) const = 0;
  /// decode(encode(t)) == t. eot_id() decodes to "<|endoftext|>"; ids outside the
  /// vocabulary (a model may pad its vocabulary) decode to U+FFFD.
  virtual std::string decode(const std::vector<std::int32_t>& ids) const = 0;
};

/// \brief Ids 0..255 are the bytes of the UTF-8 text, 256 is end-of-text; vocab 257.
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr std::int32_t kEot = 256;
  std::string name() const override { return "byte"; }
  std::int64_t vocab_size() const override { return 257; }
  std::int32_t eot_id() const override { return kEot; }
  std::vector<std::int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<std::int32_t>& ids) const override;
};

/// Names accepted by make_tokenizer, sorted.
std::vector<std::string> known_tokenizers();

/// The tokenizer called `name`; UserError listing the known names otherwise.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name);

}  // namespace meshtrain::data
