#pragma once
/// \file
/// \brief `Tokenizer`: text <-> token ids. `ByteTokenizer` (one id per UTF-8 byte plus an
/// end-of-text id) needs no vocabulary file; the BPE (bpe_tokenizer.hpp) and SentencePiece
/// (sentencepiece_tokenizer.hpp) tokenizers of real models implement the same interface and
/// are made by `make_tokenizer` from a tokenizer.json, a Hugging Face model directory, a
/// tokenizer.model or a .gguf file.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace meshtrain::data {

/// \brief Maps text to ids in [0, vocab_size()) and back.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  /// The spec `make_tokenizer` made it from ("byte", or the file/directory path); stored in
  /// meta.json so that the same tokenizer can be made again.
  virtual std::string name() const = 0;
  /// "byte", "bpe" (byte-level or byte-fallback BPE) or "sentencepiece".
  virtual std::string kind() const = 0;
  virtual std::int64_t vocab_size() const = 0;
  /// The id that `prepare` appends after every document: "<|endoftext|>" when the
  /// vocabulary has it, else the end-of-sequence token.
  virtual std::int32_t eot_id() const = 0;
  /// Special ids; -1 when the tokenizer has none.
  virtual std::int32_t bos_id() const { return -1; }
  virtual std::int32_t eos_id() const { return eot_id(); }
  virtual std::int32_t pad_id() const { return -1; }
  /// True when the model expects a BOS token before each sequence (`prepare` adds it).
  virtual bool add_bos() const { return false; }
  /// A hex digest of what defines the tokenizer (vocabulary in id order, merges, special
  /// tokens, pre-tokenizer; for SentencePiece the serialized model). Equal digests mean equal
  /// tokenization, whichever file format held it ("" for byte).
  virtual std::string hash() const { return ""; }
  /// Id of the token spelled `token` (a special token such as "<|im_end|>"); -1 if absent.
  virtual std::int32_t token_id(const std::string& token) const { return -1; }
  /// Receives a tokenization a part at a time: `n` ids at `ids`, valid during the call.
  using IdSink = std::function<void(const std::int32_t* ids, std::size_t n)>;
  /// Ids of `text`. Added/special tokens written in the text (e.g. "<|im_start|>") are
  /// matched before anything else, as Hugging Face tokenizers do. No BOS/EOS are added:
  /// document boundaries are the caller's. UserError for text that is not UTF-8 (BPE).
  std::vector<std::int32_t> encode(const std::string& text) const;
  /// encode(text), handed to `sink` in parts, in order: the parts joined are encode(text),
  /// id for id. The tokenizers work through a long text a stretch at a time, so that the
  /// memory a text takes beyond itself is bounded (tokenizing a 1 GiB document as one string
  /// held some 10 to 80 times its size in pre-tokens, lattices and id vectors); how each
  /// keeps the result exact is its own comment's (a SentencePiece unigram model's ids are
  /// the library's for each stretch, which may break a float tie otherwise than one call on
  /// the whole text: sentencepiece_tokenizer.cpp, plan_cuts).
  virtual void encode_into(const std::string& text, const IdSink& sink) const = 0;
  /// The ids a sequence starts as: BOS first when the model expects one (add_bos), then
  /// encode(text) -- how `prepare` writes a document, so that a prompt, a sample prompt or
  /// an evaluated text gives the model the context training gave it.
  std::vector<std::int32_t> encode_sequence(const std::string& text) const;
  /// decode(encode(t)) == t for the byte and byte-level BPE tokenizers, and for
  /// SentencePiece models without normalisation. Ids outside the vocabulary decode to U+FFFD.
  virtual std::string decode(const std::vector<std::int32_t>& ids) const = 0;
  /// decode(ids) into `text`, and into `ends` (one per id) the byte of `text` just past each
  /// token's share of it: the text split at `ends` gives the tokens' texts in order (a token
  /// that adds no text, like the first byte token of a character, ends where it starts).
  /// The loss mask of chat/instruction examples is placed with it. False when no such split
  /// exists (a prefix of the ids does not decode to a prefix of the text). The default
  /// decodes each id alone and, where that is not the text (context-dependent decoding),
  /// growing prefixes, which is quadratic; the BPE and SentencePiece tokenizers split their
  /// own decoding in one linear pass.
  virtual bool decode_with_ends(const std::vector<std::int32_t>& ids, std::string& text,
                                std::vector<std::size_t>& ends) const;
};

/// \brief Ids 0..255 are the bytes of the UTF-8 text, 256 is end-of-text; vocab 257.
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr std::int32_t kEot = 256;
  std::string name() const override { return "byte"; }
  std::string kind() const override { return "byte"; }
  std::int64_t vocab_size() const override { return 257; }
  std::int32_t eot_id() const override { return kEot; }
  /// One id per byte, handed over 64 KiB at a time.
  void encode_into(const std::string& text, const IdSink& sink) const override;
  std::string decode(const std::vector<std::int32_t>& ids) const override;
};

/// The forms of SPEC make_tokenizer accepts, in words (for help texts and errors).
std::string tokenizer_spec_help();

/// Kept for the help text of subcommands: the built-in names ("byte").
std::vector<std::string> known_tokenizers();

/// \brief The tokenizer described by `spec`:
///   * "byte";
///   * a `tokenizer.json` (Hugging Face tokenizers: byte-level BPE as in GPT-2, SmolLM2,
///     Llama 3, Qwen; BPE with byte fallback and Metaspace as in Llama 2, Mistral);
///   * a Hugging Face model directory (its tokenizer.json, else its tokenizer.model;
///     tokenizer_config.json adds add_bos_token and the special tokens);
///   * a SentencePiece `tokenizer.model` (any file whose name ends in .model);
///   * a `.gguf` file (its tokenizer.ggml.* metadata).
/// UserError naming the spec and the problem otherwise. A meshtrain checkpoint or run
/// directory as the spec (the tokenizer it records) is checkpoint::open_tokenizer's: data/
/// sits below the checkpoint module and cannot read checkpoints.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec);

/// \brief What a dataset or a model records of its tokenizer, for compatibility checks.
struct TokenizerIdentity {
  std::string kind;        ///< "" when unknown
  std::int64_t vocab_size = 0;
  std::string hash;        ///< "" when unknown
};

/// The identity of `tok`.
TokenizerIdentity identity_of(const Tokenizer& tok);

/// \brief UserError when a dataset's tokenizer and a model's differ where both are known:
/// a vocabulary size larger than the model's, or two non-empty hashes that differ. `what`
/// names the two sides in the message ("dataset data/ vs model SmolLM2.gguf").
void check_tokenizer_match(const TokenizerIdentity& dataset, const TokenizerIdentity& model,
                           const std::string& dataset_name, const std::string& model_name);

}  // namespace meshtrain::data
