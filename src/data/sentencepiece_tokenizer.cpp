// SentencePiece through libsentencepiece; GGUF "llama" vocabularies become a serialized
// ModelProto (protobuf wire format written here: the Debian package ships no .pb.h).
#include "meshtrain/data/sentencepiece_tokenizer.hpp"

#include <sentencepiece_processor.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "meshtrain/checkpoint/gguf_file.hpp"
#include "meshtrain/core/error.hpp"
#include "tokenizer_hash.hpp"

namespace meshtrain::data {
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp, std::string name, bool add_bos)
      : sp_(std::move(sp)), name_(std::move(name)), add_bos_(add_bos) {
    Digest d;
    d.add_field("sentencepiece");
    d.add_field(sp_->serialized_model_proto());
    hash_ = d.hex();
  }
  std::string name() const override { return name_; }
  std::string kind() const override { return "sentencepiece"; }
  std::int64_t vocab_size() const override { return sp_->GetPieceSize(); }
  std::int32_t eot_id() const override { return sp_->eos_id(); }
  std::int32_t bos_id() const override { return sp_->bos_id(); }
  std::int32_t eos_id() const override { return sp_->eos_id(); }
  std::int32_t pad_id() const override { return sp_->pad_id(); }
  bool add_bos() const override { return add_bos_; }
  std::string hash() const override { return hash_; }
  std::int32_t token_id(const std::string& token) const override {
    const int id = sp_->PieceToId(token);
    return id >= 0 && sp_->IdToPiece(id) == token ? id : -1;
  }
  std::vector<std::int32_t> encode(const std::string& text) const override {
    std::vector<int> ids;
    const auto st = sp_->Encode(text, &ids);
    MESHTRAIN_REQUIRE(st.ok(), "SentencePiece %s cannot encode the text: %s", name_.c_str(), st.ToString().c_str());
    return {ids.begin(), ids.end()};
  }
  std::string decode(const std::vector<std::int32_t>& ids) const override {
    std::string out;
    std::vector<int> run;
    auto flush = [&] {
      if (run.empty()) return;
      std::string piece;
      const auto st = sp_->Decode(run, &piece);
      MESHTRAIN_REQUIRE(st.ok(), "SentencePiece %s cannot decode: %s", name_.c_str(), st.ToString().c_str());
      out += piece;
      run.clear();
    };
    for (const std::int32_t id : ids) {
      if (id < 0 || id >= sp_->GetPieceSize()) {
        flush();
        out += "\xEF\xBF\xBD";
      } else {
        run.push_back(id);
      }
    }
    flush();
    return out;
  }

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string name_;
  bool add_bos_;
  std::string hash_;
};

bool config_add_bos(const std::string& config_json, bool fallback) {
  if (config_json.empty()) return fallback;
  const auto j = nlohmann::json::parse(config_json, nullptr, false);
  if (j.is_object() && j.contains("add_bos_token") && j["add_bos_token"].is_boolean()) return j["add_bos_token"].get<bool>();
  return fallback;
}

// --- protobuf wire format ------------------------------------------------------------
void varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void tag(std::string& out, int field, int wire) { varint(out, (static_cast<std::uint64_t>(field) << 3) | wire); }
void field_varint(std::string& out, int field, std::int64_t v) {
  tag(out, field, 0);
  varint(out, static_cast<std::uint64_t>(v));  // negative int32 -> 10-byte two's complement, as protobuf does
}
void field_bytes(std::string& out, int field, const std::string& v) {
  tag(out, field, 2);
  varint(out, v.size());
  out += v;
}
void field_float(std::string& out, int field, float v) {
  tag(out, field, 5);
  char b[4];
  std::memcpy(b, &v, 4);
  out.append(b, 4);
}

}  // namespace

std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::string& model_path, const std::string& config_json,
                                                        const std::string& name) {
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto st = sp->Load(model_path);
  MESHTRAIN_REQUIRE(st.ok(), "SentencePiece model %s does not load: %s", model_path.c_str(), st.ToString().c_str());
  // SentencePiece's Llama convention: a BOS before each sequence unless the config says otherwise.
  const bool add_bos = config_add_bos(config_json, sp->bos_id() >= 0);
  return std::make_unique<SentencePieceTokenizer>(std::move(sp), name, add_bos);
}

std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer_from_gguf(const checkpoint::GgufFile& gguf,
                                                                  const std::string& name) {
  const auto tokens = gguf.metadata_string_array("tokenizer.ggml.tokens");
  const auto scores = gguf.has_metadata("tokenizer.ggml.scores") ? gguf.metadata_float_array("tokenizer.ggml.scores")
                                                                  : std::vector<double>(tokens.size(), 0.0);
  const auto types = gguf.has_metadata("tokenizer.ggml.token_type")
                         ? gguf.metadata_int_array("tokenizer.ggml.token_type")
                         : std::vector<std::int64_t>(tokens.size(), 1);
  MESHTRAIN_REQUIRE(scores.size() == tokens.size() && types.size() == tokens.size(),
                    "GGUF file %s: tokenizer.ggml.tokens, scores and token_type have different lengths (%zu, %zu, %zu)",
                    gguf.path().c_str(), tokens.size(), scores.size(), types.size());
  std::string proto;
  bool has_bytes = false;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    // GGUF token types use SentencePiece's numbering (1 normal ... 6 byte).
    const std::int64_t t = types[i] >= 1 && types[i] <= 6 ? types[i] : 1;
    has_bytes = has_bytes || t == 6;
    std::string piece;
    field_bytes(piece, 1, tokens[i]);
    field_float(piece, 2, static_cast<float>(scores[i]));
    field_varint(piece, 3, t);
    field_bytes(proto, 1, piece);
  }
  std::string trainer;
  field_varint(trainer, 3, 2);  // model_type = BPE
  field_varint(trainer, 4, static_cast<std::int64_t>(tokens.size()));
  field_varint(trainer, 35, has_bytes ? 1 : 0);  // byte_fallback
  field_varint(trainer, 40, gguf.metadata_int("tokenizer.ggml.unknown_token_id", 0));
  field_varint(trainer, 41, gguf.metadata_int("tokenizer.ggml.bos_token_id", 1));
  field_varint(trainer, 42, gguf.metadata_int("tokenizer.ggml.eos_token_id", 2));
  field_varint(trainer, 43, gguf.metadata_int("tokenizer.ggml.padding_token_id", -1));
  field_bytes(proto, 2, trainer);
  std::string normalizer;
  field_bytes(normalizer, 1, "identity");
  field_varint(normalizer, 3, gguf.metadata_bool("tokenizer.ggml.add_space_prefix", true) ? 1 : 0);
  field_varint(normalizer, 4, 0);  // keep whitespace as it is
  field_varint(normalizer, 5, 1);  // spaces become U+2581
  field_bytes(proto, 3, normalizer);
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto st = sp->LoadFromSerializedProto(proto);
  MESHTRAIN_REQUIRE(st.ok(), "GGUF file %s: its SentencePiece vocabulary does not load: %s", gguf.path().c_str(),
                    st.ToString().c_str());
  return std::make_unique<SentencePieceTokenizer>(std::move(sp), name,
                                                  gguf.metadata_bool("tokenizer.ggml.add_bos_token", true));
}

}  // namespace meshtrain::data
