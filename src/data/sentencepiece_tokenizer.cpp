// SentencePiece through libsentencepiece; GGUF "llama" vocabularies become a serialized
// ModelProto (protobuf wire format written and read here: the Debian package ships no .pb.h).
#include "data/sentencepiece_tokenizer.hpp"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <string_view>
#include <utility>

#include "formats/gguf_file.hpp"
#include "core/checked_int.hpp"
#include "core/error.hpp"
#include "tokenizer_hash.hpp"

namespace meshtrain::data {
namespace {

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


/// A protobuf message's fields read off the wire: next() gives each field's number and wire
/// type in order; a varint's value or a length-delimited field's bytes follow. False at the
/// end or on a malformed message (`bad`).
class WireReader {
 public:
  explicit WireReader(std::string_view bytes) : s_(bytes) {}
  bool next(int& field, int& wire) {
    if (pos_ >= s_.size() || bad) return false;
    const std::uint64_t key = varint();
    field = static_cast<int>(key >> 3);
    wire = static_cast<int>(key & 7);
    return !bad;
  }
  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= s_.size()) break;
      const auto b = static_cast<unsigned char>(s_[pos_++]);
      v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    bad = true;
    return 0;
  }
  std::string_view bytes() {
    const std::uint64_t n = varint();
    if (bad || n > s_.size() - pos_) {
      bad = true;
      return {};
    }
    const std::string_view v = s_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  void skip(int wire) {
    const std::size_t width = wire == 1 ? 8 : wire == 5 ? 4 : 0;
    if (wire == 0) varint();
    else if (wire == 2) bytes();
    else if (width && width <= s_.size() - pos_) pos_ += width;
    else bad = true;
  }
  bool bad = false;

 private:
  std::string_view s_;
  std::size_t pos_ = 0;
};

/// What the stretch planning (plan_cuts) reads of a model: TrainerSpec's model_type (3),
/// split_by_whitespace (22) and treat_whitespace_as_suffix (24), NormalizerSpec's name (1),
/// add_dummy_prefix (3), remove_extra_whitespaces (4), escape_whitespaces (5) and
/// normalization_rule_tsv (6), with the proto's defaults; a field given twice counts as
/// protobuf merges it (the last value).
struct SpShape {
  bool read = false;
  std::uint64_t model_type = 1;  // UNIGRAM
  bool split_by_whitespace = true, whitespace_as_suffix = false;
  std::string normalizer;
  bool add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true, user_rules = false;
};

SpShape sp_shape(std::string_view proto) {
  SpShape shape;
  WireReader model(proto);
  int field = 0, wire = 0;
  while (model.next(field, wire)) {
    if ((field == 2 || field == 3) && wire == 2) {
      WireReader spec(model.bytes());
      int f = 0, w = 0;
      while (spec.next(f, w)) {
        if (field == 2 && f == 3 && w == 0) shape.model_type = spec.varint();
        else if (field == 2 && f == 22 && w == 0) shape.split_by_whitespace = spec.varint() != 0;
        else if (field == 2 && f == 24 && w == 0) shape.whitespace_as_suffix = spec.varint() != 0;
        else if (field == 3 && f == 1 && w == 2) shape.normalizer = std::string(spec.bytes());
        else if (field == 3 && f == 3 && w == 0) shape.add_dummy_prefix = spec.varint() != 0;
        else if (field == 3 && f == 4 && w == 0) shape.remove_extra_whitespaces = spec.varint() != 0;
        else if (field == 3 && f == 5 && w == 0) shape.escape_whitespaces = spec.varint() != 0;
        else if (field == 3 && f == 6 && w == 2) shape.user_rules = shape.user_rules || !spec.bytes().empty();
        else spec.skip(w);
      }
      if (spec.bad) return {};
    } else {
      model.skip(wire);
    }
  }
  if (model.bad) return {};
  shape.read = true;
  return shape;
}

/// The special ids of a SentencePiece tokenizer, -1 where it has none. Kept apart from the
/// processor's own bos_id()/eos_id(): those look the pieces up by the trainer's piece names
/// ("<s>", "</s>" unless trained otherwise), so a GGUF vocabulary with Gemma's "<bos>" /
/// "<eos>" would get -1 although its metadata names the ids.
struct SpecialIds {
  std::int32_t bos = -1, eos = -1, pad = -1;
};

/// \brief SentencePiece with the special pieces matched in the text first, as Hugging Face's
/// Llama tokenizers and llama.cpp do: SentencePiece's own Encode never produces a control
/// piece ("<s>" in the text becomes "▁ < s >"), so a chat template's "<s>", "</s>" or
/// "<|im_end|>" would be trained on as plain text. The text between two special pieces is
/// encoded by SentencePiece alone, each such segment with its own dummy prefix '▁' (when the
/// model adds one): the behaviour of transformers' LlamaTokenizer with legacy=True, of the
/// tokenizer.json of Llama 2 (normalizer Prepend('▁') applied per segment between added
/// tokens), of Meta's reference chat code (each turn encoded alone) and of llama.cpp (a space
/// prefix after every special token). Decoding is the inverse: each run of ordinary ids is
/// decoded by SentencePiece (which drops that run's leading '▁'), a special piece decodes to
/// its text.
class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp, std::string name,
                         SpecialIds ids, bool add_bos, const std::vector<std::int32_t>& split_ids)
      : sp_(std::move(sp)), name_(std::move(name)), ids_(ids), add_bos_(add_bos) {
    Digest d;
    d.add_field("sentencepiece");
    d.add_field(sp_->serialized_model_proto());
    hash_ = d.hex();
    split_.assign(static_cast<std::size_t>(sp_->GetPieceSize()), 0);
    for (const std::int32_t id : split_ids) {
      if (id < 0 || id >= sp_->GetPieceSize() || split_[id]) continue;
      const std::string piece = sp_->IdToPiece(id);
      if (piece.empty()) continue;
      split_[id] = 1;
      specials_.push_back({piece, id});
    }
    // Longest first, so that the first match at a position is the longest there.
    std::stable_sort(specials_.begin(), specials_.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    for (std::size_t k = 0; k < specials_.size(); ++k)
      by_first_byte_[static_cast<unsigned char>(specials_[k].first[0])].push_back(k);
    plan_cuts();
  }
  std::string name() const override { return name_; }
  std::string kind() const override { return "sentencepiece"; }
  std::int64_t vocab_size() const override { return sp_->GetPieceSize(); }
  std::int32_t eot_id() const override { return ids_.eos; }
  std::int32_t bos_id() const override { return ids_.bos; }
  std::int32_t eos_id() const override { return ids_.eos; }
  std::int32_t pad_id() const override { return ids_.pad; }
  bool add_bos() const override { return add_bos_; }
  std::string hash() const override { return hash_; }
  std::int32_t token_id(const std::string& token) const override {
    const int id = sp_->PieceToId(token);
    return id >= 0 && sp_->IdToPiece(id) == token ? id : -1;
  }
  void encode_into(const std::string& text, const IdSink& sink) const override {
    std::size_t pos = 0;
    while (pos < text.size()) {
      std::size_t at = 0;
      const std::pair<std::string, std::int32_t>* hit = find_special(text, pos, at);
      const std::size_t seg_end = hit ? at : text.size();
      if (seg_end > pos) encode_segment(std::string_view(text).substr(pos, seg_end - pos), sink);
      if (!hit) break;
      sink(&hit->second, 1);
      pos = at + hit->first.size();
    }
  }
  bool decode_with_ends(const std::vector<std::int32_t>& ids, std::string& text,
                        std::vector<std::size_t>& ends) const override {
    // Per run of ordinary ids, one decode that reports each piece's byte span in the text it
    // produced (the leading bytes of a byte-fallback character get an empty span at its
    // start); a special piece spans its own text. Ids outside the vocabulary decode to
    // U+FFFD outside the library: the default handles those.
    for (const std::int32_t id : ids)
      if (id < 0 || id >= sp_->GetPieceSize()) return Tokenizer::decode_with_ends(ids, text, ends);
    text.clear();
    ends.assign(ids.size(), 0);
    for (std::size_t k = 0; k < ids.size();) {
      if (split_[ids[k]]) {
        text += sp_->IdToPiece(ids[k]);
        ends[k++] = text.size();
        continue;
      }
      std::size_t e = k;
      while (e < ids.size() && !split_[ids[e]]) ++e;
      const std::vector<int> in(ids.begin() + static_cast<std::ptrdiff_t>(k),
                                ids.begin() + static_cast<std::ptrdiff_t>(e));
      const sentencepiece::ImmutableSentencePieceText spt = sp_->DecodeIdsAsImmutableProto(in);
      if (static_cast<std::size_t>(spt.pieces_size()) != in.size()) return Tokenizer::decode_with_ends(ids, text, ends);
      const std::size_t base = text.size();
      const std::string run = spt.text();
      std::size_t prev = 0;
      for (std::size_t j = 0; j < in.size(); ++j) {
        const auto piece = spt.pieces(static_cast<int>(j));
        // Spans that do not tile the text are not what this relies on: take the slow, sure way.
        if (piece.begin() != prev || piece.end() < piece.begin() || piece.end() > run.size())
          return Tokenizer::decode_with_ends(ids, text, ends);
        prev = piece.end();
        ends[k + j] = base + prev;
      }
      if (prev != run.size()) return Tokenizer::decode_with_ends(ids, text, ends);
      text += run;
      k = e;
    }
    return true;
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
      } else if (split_[id]) {
        // A special piece is its text, as in Hugging Face's decode(skip_special_tokens=False)
        // and the BPE tokenizers' added tokens; the run after it starts afresh (its '▁').
        flush();
        out += sp_->IdToPiece(id);
      } else {
        run.push_back(id);
      }
    }
    flush();
    return out;
  }

 private:
  /// The leftmost special piece at or after `pos` (the longest of those starting there), its
  /// position in `at`; nullptr when none.
  const std::pair<std::string, std::int32_t>* find_special(const std::string& text, std::size_t pos,
                                                            std::size_t& at) const {
    if (specials_.empty()) return nullptr;
    for (std::size_t i = pos; i < text.size(); ++i)
      for (const std::size_t k : by_first_byte_[static_cast<unsigned char>(text[i])])
        if (text.compare(i, specials_[k].first.size(), specials_[k].first) == 0) {
          at = i;
          return &specials_[k];
        }
    return nullptr;
  }
  /// One segment (text between special pieces), a stretch of about kStretch bytes at a time
  /// where the model allows it (plan_cuts), else whole.
  void encode_segment(std::string_view segment, const IdSink& sink) const {
    std::vector<int> ids;
    std::size_t pos = 0;
    while (pos < segment.size()) {
      const std::size_t end = cuts_ ? next_cut(segment, pos + kStretch) : segment.size();
      const sentencepiece::SentencePieceProcessor& sp = pos == 0 ? *sp_ : *continuation_;
      const auto st = sp.Encode(segment.substr(pos, end - pos), &ids);
      MESHTRAIN_REQUIRE(st.ok(), "SentencePiece %s cannot encode the text: %s", name_.c_str(), st.ToString().c_str());
      static_assert(sizeof(int) == sizeof(std::int32_t), "SentencePiece ids are int");
      if (!ids.empty()) sink(reinterpret_cast<const std::int32_t*>(ids.data()), ids.size());
      pos = end;
    }
  }

  /// The first place at or after `from` where a stretch may end: a single space between two
  /// ASCII letters or digits ("a b"), the space starting the next stretch; the end of the
  /// segment when there is none.
  static std::size_t next_cut(std::string_view text, std::size_t from) {
    for (std::size_t c = std::max<std::size_t>(from, 1); c + 1 < text.size(); ++c)
      if (is_cut(text, c)) return c;
    return text.size();
  }
  /// Whether `text[c]` is the space of "a b" (two ASCII letters or digits around it).
  static bool is_cut(std::string_view text, std::size_t c) {
    const auto alnum = [](char ch) {
      return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
    };
    return c > 0 && c + 1 < text.size() && text[c] == ' ' && alnum(text[c - 1]) && alnum(text[c + 1]);
  }

  /// Whether a segment may be encoded in stretches, and with which processor the stretches
  /// after the first go. A stretch ends before the space of "a b" (next_cut), which the text
  /// normalises to "a▁b": a piece spanning that place would hold a "▁" after a character that
  /// is not "▁". Models with no such piece (any model trained with the default
  /// split_by_whitespace: Llama 2, Mistral, Gemma, T5) qualify, and then:
  ///  * BPE: SentencePiece merges two adjacent symbols only into a piece of the vocabulary,
  ///    by score, whatever lies around them; so the merges on either side of the place never
  ///    meet, and the ids are those of encoding the segment whole.
  ///  * Unigram: every segmentation passes through the place, so the best one is the best up
  ///    to it followed by the best from it -- in exact arithmetic. The library's Viterbi
  ///    (unigram_model.cc: Model::EncodeOptimized, the default, as Lattice::Viterbi) keeps at
  ///    each position the best path's score as a float sum from the segment's start and
  ///    replaces it only by a strictly greater one. Where two segmentations score alike --
  ///    exactly ("www" as "ww" "w" or "w" "ww": the same pieces) or within the rounding of
  ///    that sum -- the rounding of the total so far decides, and a stretch starts its sums
  ///    afresh at the cut. So the ids up to the first cut are the whole segment's, and after
  ///    it each stretch's ids are those sentencepiece gives that stretch alone. They differ
  ///    from one encode of the whole segment at such ties alone, never to a worse score
  ///    beyond a stretch's own rounding (tokenizer_parity.py checks both): in its corpus
  ///    (1000-piece models, 58 files, 1.7 million tokens, 155 cuts) a tie falls otherwise at
  ///    13 places in 6 files, the stretches' choice scoring the same or up to 0.08 better.
  ///    Not exactly one whole encode's ids, then, but no worse: its rounding grows with the
  ///    segment (past some 2 million tokens its sum passes 2^24 and rounds by a nat or more,
  ///    and near-ties fall by it: on 16 MB, 1.3% more tokens scoring 0.36% worse,
  ///    perf/results/bench_prepare), while the stretches' sums stay within 16 KiB of text.
  /// The stretch after a cut starts with the space:
  ///  * remove_extra_whitespaces (and a dummy prefix): the leading space is dropped and the
  ///    dummy '▁' added back, as the whole text has it: the model's own processor;
  ///  * whitespace kept and a dummy prefix (Llama 2): the space becomes the '▁' and no prefix
  ///    may be added: the same model with add_dummy_prefix off;
  ///  * neither: the space becomes the '▁': the model's own processor.
  /// Not cut, encoded a segment at a time as before (memory about 80 times the text for BPE,
  /// 130 for unigram): other model types (word, char), models trained with
  /// split_by_whitespace=false (built to hold pieces across words), whitespace as a suffix,
  /// unescaped spaces, remove_extra_whitespaces without a dummy prefix (the stretch would
  /// lose its space), user-defined normalisation rules (which may span the cut), a piece
  /// spanning the cut (the scan below, user-defined pieces included), a piece holding "a b"
  /// itself (a user-defined symbol, which the normaliser matches in the raw text and leaves
  /// unnormalised: a cut inside it changes the normalised text), and a model without "▁" as
  /// a piece (an unknown 'a' and '▁' would merge into one <unk>).
  void plan_cuts() {
    continuation_ = sp_.get();
    cuts_ = false;
    const SpShape shape = sp_shape(sp_->serialized_model_proto());
    const bool unigram = shape.model_type == 1, bpe = shape.model_type == 2;
    if (!shape.read || !(unigram || bpe) || !shape.split_by_whitespace || shape.whitespace_as_suffix ||
        !shape.escape_whitespaces || shape.user_rules || (shape.remove_extra_whitespaces && !shape.add_dummy_prefix))
      return;
    static const char* const kBuiltIn[] = {"identity", "nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf"};
    if (std::none_of(std::begin(kBuiltIn), std::end(kBuiltIn), [&](const char* n) { return shape.normalizer == n; }))
      return;
    static const std::string kSpace = "\xE2\x96\x81";
    const int space = sp_->PieceToId(kSpace);
    if (sp_->IdToPiece(space) != kSpace || sp_->IsUnknown(space) || sp_->IsControl(space) || sp_->IsUnused(space))
      return;
    for (int id = 0; id < sp_->GetPieceSize(); ++id) {
      // Unused pieces count: SentencePiece's BPE merges into them too and splits them back
      // only at the end, by which time the merge has taken both sides' symbols.
      if (sp_->IsControl(id) || sp_->IsUnknown(id) || sp_->IsByte(id)) continue;
      const std::string piece = sp_->IdToPiece(id);
      for (std::size_t at = piece.find(' '); at != std::string::npos; at = piece.find(' ', at + 1))
        if (is_cut(piece, at)) return;
      for (std::size_t at = piece.find(kSpace, 1); at != std::string::npos; at = piece.find(kSpace, at + 1))
        if (at < kSpace.size() || piece.compare(at - kSpace.size(), kSpace.size(), kSpace) != 0) return;
    }
    if (shape.add_dummy_prefix && !shape.remove_extra_whitespaces) {
      // A later normalizer_spec in the serialized proto merges into the first: only
      // add_dummy_prefix changes.
      std::string proto = sp_->serialized_model_proto(), normalizer;
      field_varint(normalizer, 3, 0);
      field_bytes(proto, 3, normalizer);
      auto continuation = std::make_unique<sentencepiece::SentencePieceProcessor>();
      if (!continuation->LoadFromSerializedProto(proto).ok()) return;
      owned_continuation_ = std::move(continuation);
      continuation_ = owned_continuation_.get();
    }
    cuts_ = true;
  }

  /// Bytes of text per SentencePiece call where a segment is cut (plan_cuts): its lattice
  /// and alignment take some 80 bytes per byte of text.
  static constexpr std::size_t kStretch = std::size_t{1} << 14;

  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> owned_continuation_;
  const sentencepiece::SentencePieceProcessor* continuation_ = nullptr;  ///< encodes stretches after a cut
  bool cuts_ = false;                                                     ///< plan_cuts: segments may be cut
  std::string name_;
  SpecialIds ids_;
  bool add_bos_;
  std::string hash_;
  std::vector<char> split_;  ///< per id: a special piece, matched in the text and decoded as its text
  std::vector<std::pair<std::string, std::int32_t>> specials_;  ///< longest first
  std::vector<std::size_t> by_first_byte_[256];                 ///< indices into specials_
};

/// The pieces matched in the text before SentencePiece runs: the control pieces (<s>, </s>,
/// a chat model's <|im_end|> ...) and the special ids the tokenizer names (a
/// tokenizer_config.json's eos_token may be a user-defined piece), never <unk> (an unknown
/// character also encodes to it, and it decodes to " ⁇ ").
std::vector<std::int32_t> control_pieces(const sentencepiece::SentencePieceProcessor& sp, const SpecialIds& ids) {
  std::vector<std::int32_t> out;
  for (int i = 0; i < sp.GetPieceSize(); ++i)
    if (sp.IsControl(i)) out.push_back(i);
  for (const std::int32_t id : {ids.bos, ids.eos, ids.pad})
    if (id >= 0 && id < sp.GetPieceSize() && !sp.IsUnknown(id) && !sp.IsByte(id)) out.push_back(id);
  return out;
}

/// The id of the piece spelled `token`, or -1.
std::int32_t piece_id(const sentencepiece::SentencePieceProcessor& sp, const std::string& token) {
  if (token.empty()) return -1;
  const int id = sp.PieceToId(token);
  return id >= 0 && sp.IdToPiece(id) == token ? id : -1;
}

/// The first of `names` that is a piece, or -1 (for vocabularies that do not say).
std::int32_t first_piece(const sentencepiece::SentencePieceProcessor& sp, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (const std::int32_t id = piece_id(sp, n); id >= 0) return id;
  return -1;
}

/// GGUF metadata `key` (a special token id), `fallback` when absent; range-checked against
/// the vocabulary: an int32 field of the proto would wrap a wider one.
std::int32_t special_id(const formats::GgufFile& gguf, const char* key, std::int64_t fallback) {
  if (!gguf.has_metadata(key)) return static_cast<std::int32_t>(fallback);
  const auto vocab = static_cast<long long>(gguf.metadata_string_array("tokenizer.ggml.tokens").size());
  return checked_int<std::int32_t>(gguf.metadata_int(key), gguf.path(), key, 0, vocab - 1,
                                   "(an id of its tokenizer.ggml.tokens)");
}

}  // namespace

std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::string& model_path, const TokenizerConfig& cfg,
                                                        const std::string& name) {
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto st = sp->Load(model_path);
  MESHTRAIN_REQUIRE(st.ok(), "SentencePiece model %s does not load: %s", model_path.c_str(), st.ToString().c_str());
  // The model's own ids (its trainer's bos/eos/pad pieces), unless tokenizer_config.json
  // names another piece of the vocabulary (a name that is no piece is passed over, as the
  // tokenizer.json reader does).
  SpecialIds ids{sp->bos_id(), sp->eos_id(), sp->pad_id()};
  for (auto [token, id] : {std::pair<const std::string*, std::int32_t*>{&cfg.bos_token, &ids.bos},
                           {&cfg.eos_token, &ids.eos}, {&cfg.pad_token, &ids.pad}})
    if (const std::int32_t named = piece_id(*sp, *token); named >= 0) *id = named;
  // SentencePiece's Llama convention: a BOS before each sequence unless the config says
  // otherwise. A config asking for one the model lacks is kept as asked: prepare refuses it
  // by name rather than writing an id of -1.
  const bool add_bos = cfg.add_bos_token.value_or(ids.bos >= 0);
  const std::vector<std::int32_t> split = control_pieces(*sp, ids);
  return std::make_unique<SentencePieceTokenizer>(std::move(sp), name, ids, add_bos, split);
}

std::string sentencepiece_model_proto_from_gguf(const formats::GgufFile& gguf) {
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
  const auto special = [&](const char* key, std::int64_t fallback) { return special_id(gguf, key, fallback); };
  // These four fields of the proto are what the hash has always covered: their values stay
  // llama.cpp's defaults when the metadata is silent, whatever the vocabulary is named.
  field_varint(trainer, 40, special("tokenizer.ggml.unknown_token_id", 0));
  field_varint(trainer, 41, special("tokenizer.ggml.bos_token_id", 1));
  field_varint(trainer, 42, special("tokenizer.ggml.eos_token_id", 2));
  field_varint(trainer, 43, special("tokenizer.ggml.padding_token_id", -1));
  field_bytes(proto, 2, trainer);
  std::string normalizer;
  field_bytes(normalizer, 1, "identity");
  field_varint(normalizer, 3, gguf.metadata_bool("tokenizer.ggml.add_space_prefix", true) ? 1 : 0);
  field_varint(normalizer, 4, 0);  // keep whitespace as it is
  field_varint(normalizer, 5, 1);  // spaces become U+2581
  field_bytes(proto, 3, normalizer);
  return proto;
}

std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer_from_gguf(const formats::GgufFile& gguf,
                                                                  const std::string& name) {
  const std::string proto = sentencepiece_model_proto_from_gguf(gguf);
  const auto special = [&](const char* key, std::int64_t fallback) { return special_id(gguf, key, fallback); };
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto st = sp->LoadFromSerializedProto(proto);
  MESHTRAIN_REQUIRE(st.ok(), "GGUF file %s: its SentencePiece vocabulary does not load: %s", gguf.path().c_str(),
                    st.ToString().c_str());
  // The special ids the metadata names; where it is silent, the piece of a known name
  // (Llama's <s>/</s>, Gemma's <bos>/<eos>), never a fixed id that may be another token.
  SpecialIds ids;
  ids.bos = gguf.has_metadata("tokenizer.ggml.bos_token_id") ? special("tokenizer.ggml.bos_token_id", -1)
                                                              : first_piece(*sp, {"<s>", "<bos>", "<|begin_of_text|>"});
  ids.eos = gguf.has_metadata("tokenizer.ggml.eos_token_id")
                ? special("tokenizer.ggml.eos_token_id", -1)
                : first_piece(*sp, {"</s>", "<eos>", "<|endoftext|>", "<|end_of_text|>"});
  ids.pad = special("tokenizer.ggml.padding_token_id", -1);
  // Control (3) and user-defined (4) tokens are matched in the text first, as llama.cpp's
  // special-token cache does (and the BPE GGUF reader).
  std::vector<std::int32_t> split = control_pieces(*sp, ids);
  if (gguf.has_metadata("tokenizer.ggml.token_type")) {
    const auto types = gguf.metadata_int_array("tokenizer.ggml.token_type");
    for (std::size_t i = 0; i < types.size(); ++i)
      if (types[i] == 4) split.push_back(static_cast<std::int32_t>(i));
  }
  return std::make_unique<SentencePieceTokenizer>(
      std::move(sp), name, ids, gguf.metadata_bool("tokenizer.ggml.add_bos_token", ids.bos >= 0), split);
}

}  // namespace meshtrain::data
