// BPE encode/decode, step for step as Hugging Face tokenizers (tokenizers/src: added_vocabulary.rs,
// pre_tokenizers/{byte_level,split,metaspace,digits}.rs, models/bpe/word.rs, decoders/*).
#include "data/bpe_tokenizer.hpp"

#include <algorithm>
#include <functional>
#include <mutex>
#include <queue>
#include <unordered_map>

#include "core/error.hpp"
#include "regex_split.hpp"
#include "tokenizer_hash.hpp"
#include "core/utf8.hpp"

namespace meshtrain::data {
namespace {

/// GPT-2's byte -> code point table: printable bytes map to themselves, the other 68 to
/// U+0100 onwards in byte order, so that every byte is a visible character.
struct ByteMap {
  std::string byte_to_char[256];
  std::unordered_map<std::uint32_t, unsigned char> char_to_byte;
  ByteMap() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const std::uint32_t cp = printable ? static_cast<std::uint32_t>(b) : 256u + n++;
      utf8::append(byte_to_char[b], cp);
      char_to_byte[cp] = static_cast<unsigned char>(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

// The GPT-2 pattern of HF's ByteLevel pre-tokenizer.
const char* const kGpt2Pattern = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  std::string out;
  std::size_t pos = 0;
  while (true) {
    const std::size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
  }
  out.append(s, pos, std::string::npos);
  return out;
}

bool is_space_byte(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/// A piece of text on its way through the pre-tokenizer; `at_start` when it begins at
/// offset 0 of the original text (Metaspace's "first" prepend scheme needs it).
struct Piece {
  std::string text;
  bool at_start;
};

/// \brief The pieces a split pattern makes of a text, per HF SplitDelimiterBehavior, from its
/// [b, e) matches given in order; each [begin, end) piece is handed to `emit` as soon as it is
/// complete (Merged* and Contiguous hold one back), so a long text's pieces are never listed.
class PieceSplitter {
 public:
  PieceSplitter(SplitBehavior how, std::function<void(std::size_t, std::size_t)> emit)
      : how_(how), emit_(std::move(emit)) {}
  void match(std::size_t b, std::size_t e) {
    if (b > pos_) segment(pos_, b, false);
    segment(b, e, true);
    pos_ = e;
  }
  /// After the last match: the rest of a text of `size` bytes, and the piece held back.
  void finish(std::size_t size) {
    if (pos_ < size) segment(pos_, size, false);
    if (has_) out(cur_b_, cur_e_);
    has_ = false;
  }

 private:
  void out(std::size_t b, std::size_t e) {
    if (e > b) emit_(b, e);
  }
  void start(std::size_t b, std::size_t e) {  // a new piece; the one held back is complete
    if (has_) out(cur_b_, cur_e_);
    cur_b_ = b;
    cur_e_ = e;
    has_ = true;
  }
  void segment(std::size_t b, std::size_t e, bool m) {
    switch (how_) {
      case SplitBehavior::Isolated: out(b, e); break;
      case SplitBehavior::Removed:
        if (!m) out(b, e);
        break;
      case SplitBehavior::MergedWithPrevious:
        if (m && has_) cur_e_ = e;
        else start(b, e);
        break;
      case SplitBehavior::MergedWithNext:
        if (pending_) cur_e_ = e;
        else start(b, e);
        pending_ = m;
        break;
      case SplitBehavior::Contiguous:
        if (m && prev_match_ && has_) cur_e_ = e;
        else start(b, e);
        prev_match_ = m;
        break;
    }
  }
  SplitBehavior how_;
  std::function<void(std::size_t, std::size_t)> emit_;
  std::size_t pos_ = 0, cur_b_ = 0, cur_e_ = 0;
  bool has_ = false, pending_ = false, prev_match_ = false;
};

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeConfig c) : c_(std::move(c)) {
    // Sized once: growing to ~50k vocabulary entries and merges rehashes both tables repeatedly.
    token_to_id_.reserve(c_.vocab.size() + c_.added.size());
    merges_.reserve(c_.merges.size());
    for (std::size_t id = 0; id < c_.vocab.size(); ++id)
      if (!c_.vocab[id].empty()) token_to_id_.emplace(c_.vocab[id], static_cast<std::int32_t>(id));
    for (const auto& a : c_.added) {
      MESHTRAIN_REQUIRE(a.id >= 0 && !a.content.empty(), "tokenizer %s: added token '%s' has id %d",
                        c_.name.c_str(), a.content.c_str(), a.id);
      if (static_cast<std::size_t>(a.id) >= c_.vocab.size()) c_.vocab.resize(a.id + 1);
      if (c_.vocab[a.id].empty()) c_.vocab[a.id] = a.content;
      token_to_id_[a.content] = a.id;
      added_ids_.resize(c_.vocab.size(), 0);
    }
    added_ids_.resize(c_.vocab.size(), 0);
    for (std::size_t k = 0; k < c_.added.size(); ++k) added_ids_[c_.added[k].id] = 1;
    // Longest first, so the first hit at a position is the longest.
    added_by_length_ = c_.added;
    std::stable_sort(added_by_length_.begin(), added_by_length_.end(),
                     [](const AddedToken& x, const AddedToken& y) { return x.content.size() > y.content.size(); });
    // Llama 3 has 256 added tokens all starting with '<': look up only those that can start here.
    for (std::size_t k = 0; k < added_by_length_.size(); ++k)
      added_by_first_byte_[static_cast<unsigned char>(added_by_length_[k].content[0])].push_back(k);
    for (std::size_t r = 0; r < c_.merges.size(); ++r) {
      const auto& [l, rt] = c_.merges[r];
      const std::int32_t a = id_of(l), b = id_of(rt), m = id_of(l + rt);
      MESHTRAIN_REQUIRE(a >= 0 && b >= 0 && m >= 0,
                        "tokenizer %s: merge %zu ('%s' '%s') names a token that is not in the vocabulary",
                        c_.name.c_str(), r, l.c_str(), rt.c_str());
      merges_.emplace(key(a, b), std::make_pair(static_cast<std::int32_t>(r), m));
    }
    if (!c_.unk_token.empty()) {
      unk_id_ = id_of(c_.unk_token);
      MESHTRAIN_REQUIRE(unk_id_ >= 0, "tokenizer %s: unk_token '%s' is not in the vocabulary", c_.name.c_str(),
                        c_.unk_token.c_str());
    }
    for (const auto& s : c_.pre_tokenizer) {
      if (s.kind == PreTokenizerStep::Kind::Split) regexes_.push_back(std::make_unique<Regex>(s.pattern, s.literal));
      else if (s.kind == PreTokenizerStep::Kind::ByteLevel && s.use_regex)
        regexes_.push_back(std::make_unique<Regex>(kGpt2Pattern, false));
      else if (s.kind == PreTokenizerStep::Kind::Metaspace && s.split)
        regexes_.push_back(std::make_unique<Regex>(s.replacement, true));
      else
        regexes_.push_back(nullptr);
    }
    if (c_.byte_fallback)
      for (int b = 0; b < 256; ++b) byte_ids_[b] = id_of(strprintf("<0x%02X>", b));
    hash_ = bpe_hash(c_);
  }

  std::string name() const override { return c_.name; }
  std::string kind() const override { return "bpe"; }
  std::int64_t vocab_size() const override { return static_cast<std::int64_t>(c_.vocab.size()); }
  std::int32_t eot_id() const override { return c_.eot_id; }
  std::int32_t bos_id() const override { return c_.bos_id; }
  std::int32_t eos_id() const override { return c_.eos_id; }
  std::int32_t pad_id() const override { return c_.pad_id; }
  bool add_bos() const override { return c_.add_bos; }
  std::string hash() const override { return hash_; }
  std::int32_t token_id(const std::string& token) const override { return id_of(token); }

  /// Depth first: each piece a pre-tokenizer step makes goes through the later steps and the
  /// BPE model before the next piece is cut, and ids go to `sink` 64 Ki at a time. Every
  /// step after the first works on one piece alone and the BPE model on one final piece
  /// alone, so the order of the work does not change a single id (what Hugging Face's
  /// breadth-first pipeline gives, tested on the corpora of tokenizer_parity).
  void encode_into(const std::string& text, const IdSink& sink) const override {
    IdBuffer out{sink, {}};
    std::size_t pos = 0;
    while (pos < text.size()) {
      std::size_t mb = 0, me = 0;
      const AddedToken* hit = find_added(text, pos, mb, me);
      const std::size_t seg_end = hit ? mb : text.size();
      if (seg_end > pos) encode_segment(text.substr(pos, seg_end - pos), pos == 0, out);
      if (!hit) break;
      out.ids.push_back(hit->id);
      pos = me;
    }
    out.flush();
  }

  std::string decode(const std::vector<std::int32_t>& ids) const override {
    std::string out;
    std::vector<std::string> run;
    bool run_at_start = true;
    auto flush = [&] {
      if (!run.empty()) out += decode_run(run, run_at_start);
      run.clear();
    };
    for (std::size_t k = 0; k < ids.size(); ++k) {
      const std::int32_t id = ids[k];
      if (id < 0 || static_cast<std::size_t>(id) >= c_.vocab.size() || c_.vocab[id].empty()) {
        flush();
        run_at_start = false;
        out += "\xEF\xBF\xBD";
      } else if (added_ids_[id]) {
        flush();
        run_at_start = false;
        out += c_.vocab[id];
      } else {
        if (run.empty()) run_at_start = k == 0;
        run.push_back(c_.vocab[id]);
      }
    }
    flush();
    return out;
  }

  bool decode_with_ends(const std::vector<std::int32_t>& ids, std::string& text,
                        std::vector<std::size_t>& ends) const override {
    // Each token decoded alone, but in its place in its run of ordinary tokens: only the
    // run's first token may lose a leading space (Metaspace), only a fused run's ends are
    // stripped (Strip after Fuse). Where that does not reproduce decode(), the default.
    text = decode(ids);
    ends.assign(ids.size(), 0);
    const auto ordinary = [&](std::size_t k) {
      const std::int32_t id = ids[k];
      return id >= 0 && static_cast<std::size_t>(id) < c_.vocab.size() && !c_.vocab[id].empty() && !added_ids_[id];
    };
    std::size_t pos = 0;
    for (std::size_t k = 0; k < ids.size(); ++k) {
      const std::int32_t id = ids[k];
      std::string piece;
      if (ordinary(k)) {
        const bool first = k == 0 || !ordinary(k - 1), last = k + 1 == ids.size() || !ordinary(k + 1);
        piece = decode_run({c_.vocab[id]}, first && k == 0, first, last);
      } else {
        piece = id < 0 || static_cast<std::size_t>(id) >= c_.vocab.size() || c_.vocab[id].empty() ? "\xEF\xBF\xBD"
                                                                                                  : c_.vocab[id];
      }
      if (text.compare(pos, piece.size(), piece) != 0) return Tokenizer::decode_with_ends(ids, text, ends);
      pos += piece.size();
      ends[k] = pos;
    }
    return pos == text.size() || Tokenizer::decode_with_ends(ids, text, ends);
  }

 private:
  static std::uint64_t key(std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }
  std::int32_t id_of(const std::string& t) const {
    const auto it = token_to_id_.find(t);
    return it == token_to_id_.end() ? -1 : it->second;
  }

  /// The leftmost added token at or after `pos` (longest among those starting there), with its
  /// match extended over whitespace for lstrip/rstrip; nullptr when none.
  const AddedToken* find_added(const std::string& text, std::size_t pos, std::size_t& mb, std::size_t& me) const {
    if (added_by_length_.empty()) return nullptr;
    for (std::size_t i = pos; i < text.size(); ++i) {
      for (const std::size_t k : added_by_first_byte_[static_cast<unsigned char>(text[i])]) {
        const AddedToken& a = added_by_length_[k];
        if (text.compare(i, a.content.size(), a.content) != 0) continue;
        mb = i;
        me = i + a.content.size();
        if (a.lstrip)
          while (mb > pos && is_space_byte(text[mb - 1])) --mb;
        if (a.rstrip)
          while (me < text.size() && is_space_byte(text[me])) ++me;
        return &a;
      }
    }
    return nullptr;
  }

  /// Ids on their way to a sink, handed over when 64 Ki have gathered.
  struct IdBuffer {
    const IdSink& sink;
    std::vector<std::int32_t> ids;
    void maybe_flush() {
      if (ids.size() >= (std::size_t{1} << 16)) flush();
    }
    void flush() {
      if (!ids.empty()) sink(ids.data(), ids.size());
      ids.clear();
    }
  };

  void encode_segment(std::string s, bool at_start, IdBuffer& out) const {
    for (const auto& n : c_.normalizer) {
      if (n.kind == NormalizerStep::Kind::Prepend) {
        if (!s.empty()) s = n.a + s;
      } else {
        s = replace_all(s, n.a, n.b);
      }
    }
    pre_tokenize(0, Piece{std::move(s), at_start}, out);
  }

  /// Pre-tokenizer step `k` on `p`, each piece it makes on through the steps after it; past the
  /// last step, the BPE model.
  void pre_tokenize(std::size_t k, Piece p, IdBuffer& out) const {
    if (k == c_.pre_tokenizer.size()) {
      bpe_piece(p.text, out.ids);
      out.maybe_flush();
      return;
    }
    const PreTokenizerStep& st = c_.pre_tokenizer[k];
    if (st.kind == PreTokenizerStep::Kind::ByteLevel) {
      if (st.add_prefix_space && p.text.compare(0, 1, " ") != 0) p.text = " " + p.text;
    } else if (st.kind == PreTokenizerStep::Kind::Metaspace) {
      p.text = replace_all(p.text, " ", st.replacement);
      const bool starts = p.text.compare(0, st.replacement.size(), st.replacement) == 0;
      if (!starts && (st.prepend == PreTokenizerStep::Prepend::Always ||
                      (st.prepend == PreTokenizerStep::Prepend::First && p.at_start)))
        p.text = st.replacement + p.text;
    }
    const auto next = [&](Piece q) {
      if (st.kind == PreTokenizerStep::Kind::ByteLevel) {
        std::string mapped;
        for (const char ch : q.text) mapped += byte_map().byte_to_char[static_cast<unsigned char>(ch)];
        q.text = std::move(mapped);
      }
      pre_tokenize(k + 1, std::move(q), out);
    };
    if (!regexes_[k]) {
      next(std::move(p));
      return;
    }
    const SplitBehavior how = st.kind == PreTokenizerStep::Kind::Metaspace ? SplitBehavior::MergedWithNext
                              : st.kind == PreTokenizerStep::Kind::ByteLevel ? SplitBehavior::Isolated
                                                                             : st.behavior;
    PieceSplitter split(how, [&](std::size_t b, std::size_t e) { next(Piece{p.text.substr(b, e - b), p.at_start && b == 0}); });
    regexes_[k]->for_each_match(p.text, [&](std::size_t b, std::size_t e) { split.match(b, e); });
    split.finish(p.text.size());
  }

  /// The BPE model on one piece: characters (or byte-fallback bytes) to ids, then the
  /// lowest-ranked adjacent pair merged first (leftmost on ties) until no merge applies.
  void bpe_piece(const std::string& piece, std::vector<std::int32_t>& ids) const {
    if (piece.empty()) return;
    if (c_.ignore_merges) {
      const std::int32_t id = id_of(piece);
      if (id >= 0) {
        ids.push_back(id);
        return;
      }
    }
    {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      const auto it = cache_.find(piece);
      if (it != cache_.end()) {
        ids.insert(ids.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    struct Sym {
      std::int32_t id;
      int prev, next;
      bool alive;
    };
    std::vector<Sym> syms;
    bool last_unk = false;
    for (std::size_t i = 0; i < piece.size();) {
      const std::size_t len = std::min(utf8::char_len(static_cast<unsigned char>(piece[i])), piece.size() - i);
      const std::int32_t id = id_of(piece.substr(i, len));
      if (id >= 0) {
        syms.push_back({id, 0, 0, true});
        last_unk = false;
      } else if (c_.byte_fallback && std::all_of(piece.begin() + i, piece.begin() + i + len, [&](char ch) {
                   return byte_ids_[static_cast<unsigned char>(ch)] >= 0;
                 })) {
        for (std::size_t k = i; k < i + len; ++k) syms.push_back({byte_ids_[static_cast<unsigned char>(piece[k])], 0, 0, true});
        last_unk = false;
      } else if (unk_id_ >= 0) {
        if (!(c_.fuse_unk && last_unk)) syms.push_back({unk_id_, 0, 0, true});
        last_unk = true;
      }  // else: HF drops a character it cannot represent
      i += len;
    }
    const int n = static_cast<int>(syms.size());
    for (int k = 0; k < n; ++k) {
      syms[k].prev = k - 1;
      syms[k].next = k + 1 < n ? k + 1 : -1;
    }
    struct Cand {
      std::int32_t rank;
      int pos;
      std::int32_t new_id;
      bool operator<(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Cand> q;
    auto push = [&](int pos) {
      const int nx = syms[pos].next;
      if (nx < 0) return;
      const auto it = merges_.find(key(syms[pos].id, syms[nx].id));
      if (it != merges_.end()) q.push({it->second.first, pos, it->second.second});
    };
    for (int k = 0; k + 1 < n; ++k) push(k);
    while (!q.empty()) {
      const Cand top = q.top();
      q.pop();
      Sym& s = syms[top.pos];
      if (!s.alive || s.next < 0) continue;
      const auto it = merges_.find(key(s.id, syms[s.next].id));
      if (it == merges_.end() || it->second.second != top.new_id) continue;  // stale entry
      Sym& right = syms[s.next];
      s.id = top.new_id;
      right.alive = false;
      s.next = right.next;
      if (right.next >= 0) syms[right.next].prev = top.pos;
      if (s.prev >= 0) push(s.prev);
      push(top.pos);
    }
    std::vector<std::int32_t> out;
    for (int k = n > 0 ? 0 : -1; k >= 0; k = syms[k].next) out.push_back(syms[k].id);
    ids.insert(ids.end(), out.begin(), out.end());
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() < 200000) cache_.emplace(piece, std::move(out));
  }

  /// Runs the decoder steps over the token strings of a run of ordinary (non-added) tokens.
  /// `run_first` / `run_last`: `toks` begins / ends the run (false only when
  /// decode_with_ends decodes one token of a run: a Strip after a Fuse applies to the fused
  /// run's start and end, not to every token).
  std::string decode_run(std::vector<std::string> toks, bool at_start, bool run_first = true,
                         bool run_last = true) const {
    bool fused = false;
    for (const DecoderStep& d : c_.decoder) {
      switch (d.kind) {
        case DecoderStep::Kind::ByteLevel:
          for (auto& t : toks) {
            std::string bytes;
            for (std::size_t i = 0; i < t.size();) {
              const std::size_t len = std::min(utf8::char_len(static_cast<unsigned char>(t[i])), t.size() - i);
              const auto it = byte_map().char_to_byte.find(utf8::decode_at(t, i, len));
              if (it != byte_map().char_to_byte.end()) bytes += static_cast<char>(it->second);
              else bytes.append(t, i, len);
              i += len;
            }
            t = std::move(bytes);
          }
          break;
        case DecoderStep::Kind::Replace:
          for (auto& t : toks) t = replace_all(t, d.a, d.b);
          break;
        case DecoderStep::Kind::ByteFallback: {
          // Consecutive <0xHH> tokens become their bytes (the text's own UTF-8).
          std::vector<std::string> out;
          std::string bytes;
          auto flush = [&] {
            if (!bytes.empty()) out.push_back(bytes);
            bytes.clear();
          };
          for (auto& t : toks) {
            unsigned v = 0;
            if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::sscanf(t.c_str() + 3, "%2x", &v) == 1) {
              bytes += static_cast<char>(v);
            } else {
              flush();
              out.push_back(t);
            }
          }
          flush();
          toks = std::move(out);
          break;
        }
        case DecoderStep::Kind::Fuse: {
          fused = true;
          std::string all;
          for (const auto& t : toks) all += t;
          toks = {all};
          break;
        }
        case DecoderStep::Kind::Strip:
          for (auto& t : toks) {
            int a = 0;
            while (a < d.start && (run_first || !fused) && t.compare(0, d.a.size(), d.a) == 0 && !d.a.empty()) {
              t.erase(0, d.a.size());
              ++a;
            }
            int z = 0;
            while (z < d.stop && (run_last || !fused) && t.size() >= d.a.size() && !d.a.empty() &&
                   t.compare(t.size() - d.a.size(), d.a.size(), d.a) == 0) {
              t.erase(t.size() - d.a.size());
              ++z;
            }
          }
          break;
        case DecoderStep::Kind::Metaspace:
          for (std::size_t k = 0; k < toks.size(); ++k) {
            toks[k] = replace_all(toks[k], d.a, " ");
            if (k == 0 && at_start && d.prepend != PreTokenizerStep::Prepend::Never && !toks[k].empty() &&
                toks[k][0] == ' ')
              toks[k].erase(0, 1);
          }
          break;
      }
    }
    std::string out;
    for (const auto& t : toks) out += t;
    return out;
  }

  BpeConfig c_;
  std::unordered_map<std::string, std::int32_t> token_to_id_;
  std::vector<char> added_ids_;
  std::vector<AddedToken> added_by_length_;
  std::vector<std::size_t> added_by_first_byte_[256];  // indices into added_by_length_, longest first
  std::unordered_map<std::uint64_t, std::pair<std::int32_t, std::int32_t>> merges_;  // pair -> (rank, new id)
  std::vector<std::unique_ptr<Regex>> regexes_;  // per pre-tokenizer step (nullptr: none)
  std::int32_t unk_id_ = -1;
  std::int32_t byte_ids_[256] = {};
  std::string hash_;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>> cache_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(BpeConfig config) {
  return std::make_unique<BpeTokenizer>(std::move(config));
}

}  // namespace meshtrain::data
