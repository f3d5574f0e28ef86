// Placing the loss mask on tokens (tokenize_with_mask, Tokenizer::decode_with_ends) and the
// special ids a SentencePiece model brings (issue 28). The SentencePiece models are trained
// here, in process, on a generated corpus, so the test needs no files.
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/checked_int.hpp"
#include "core/error.hpp"
#include "data/bpe_tokenizer.hpp"
#include "data/chat_examples.hpp"
#include "data/chat_prompt.hpp"
#include "data/chat_template.hpp"
#include "data/prepare.hpp"
#include "data/sentencepiece_tokenizer.hpp"
#include "data_test_util.hpp"

namespace fs = std::filesystem;
using namespace meshtrain;
using namespace meshtrain::data;

namespace {

const char* const kWords[] = {"mesh", "rank", "shard", "token", "window", "gather", "reduce", "step", "loss",
                              "the",  "a",    "of",    "train", "model",  "layer",  "head",   "ring", "sum"};

std::string words(std::size_t n, std::size_t seed) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s += (i ? " " : "") + std::string(kWords[(i * 7 + seed * 13 + i / 5) % 18]);
  return s;
}

/// The corpus and the models trained on it, removed when the program ends.
fs::path tmp_dir() {
  static const test::TempDir dir("mask");
  static const fs::path d = [] {
    const fs::path p = dir.str();
    std::ofstream(p / "corpus.txt") << [] {
      std::string t;
      for (std::size_t i = 0; i < 300; ++i) t += words(12, i) + "\n";
      return t;
    }();
    return p;
  }();
  return d;
}

/// A SentencePiece BPE model with byte fallback and no normalisation, trained on the corpus.
std::string sp_model(const std::string& name, const std::string& extra = "") {
  const fs::path prefix = tmp_dir() / name;
  if (!fs::exists(prefix.string() + ".model")) {
    const auto st = sentencepiece::SentencePieceTrainer::Train(
        "--input=" + (tmp_dir() / "corpus.txt").string() + " --model_prefix=" + prefix.string() +
        " --model_type=bpe --vocab_size=400 --hard_vocab_limit=false --byte_fallback=true "
        "--normalization_rule_name=identity --remove_extra_whitespaces=false --minloglevel=2 --num_threads=1 " +
        extra);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  return prefix.string() + ".model";
}

/// Llama 2's tokenizer.json pipeline (Metaspace-style Replace/Prepend, byte fallback; decoder
/// Replace, ByteFallback, Fuse, Strip): its decoding depends on the context (the leading
/// space of a run, bytes that form a character).
std::unique_ptr<Tokenizer> llama2_style_bpe() {
  BpeConfig c;
  c.name = "llama2-style";
  c.vocab = {"<unk>", "<s>", "</s>"};
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    c.vocab.push_back(hex);
  }
  const std::string ws = "\xE2\x96\x81";  // U+2581
  for (const char* t : {"a", "b", "e", "h", "i", "k", "l", "m", "n", "o", "p", "r", "s", "t", "w", "d", "g", "u", "y",
                        "f", "c"})
    c.vocab.push_back(t);
  c.vocab.push_back(ws);
  c.vocab.push_back(ws + "t");
  c.vocab.push_back(ws + "th");
  c.vocab.push_back("th");
  c.merges = {{ws, "t"}, {"t", "h"}, {ws + "t", "h"}};
  c.added = {{0, "<unk>", true}, {1, "<s>", true}, {2, "</s>", true}};
  c.byte_fallback = true;
  c.unk_token = "<unk>";
  c.normalizer = {{NormalizerStep::Kind::Prepend, ws, ""}, {NormalizerStep::Kind::Replace, " ", ws}};
  DecoderStep replace{DecoderStep::Kind::Replace, ws, " "};
  DecoderStep fallback{DecoderStep::Kind::ByteFallback};
  DecoderStep fuse{DecoderStep::Kind::Fuse};
  DecoderStep strip{DecoderStep::Kind::Strip, " "};
  strip.start = 1;
  c.decoder = {replace, fallback, fuse, strip};
  c.bos_id = 1;
  c.eos_id = c.eot_id = 2;
  return make_bpe_tokenizer(std::move(c));
}

/// A chat example's segments: plain template text, trainable replies.
std::vector<ChatSegment> chat(std::size_t turns, std::size_t len, std::size_t seed,
                              const std::string& reply_tail = "") {
  std::vector<ChatSegment> s;
  for (std::size_t t = 0; t < turns; ++t) {
    s.push_back({"User: " + words(len, seed + t) + "\nAssistant:", false});
    s.push_back({" " + words(len + 3, seed + 7 * t) + reply_tail + "\n", true});
  }
  return s;
}

/// The slow path: the split of the base class (each token alone, else growing prefixes,
/// quadratic) with tokenize_with_mask's rule for a token's mask.
MaskedTokens reference_mask(const Tokenizer& tok, const std::vector<ChatSegment>& segments) {
  std::string text;
  std::vector<std::uint8_t> trainable;
  for (const ChatSegment& s : segments) {
    text += s.text;
    trainable.insert(trainable.end(), s.text.size(), s.trainable ? 1 : 0);
  }
  const std::vector<std::int32_t> ids = tok.encode(text);
  std::string decoded;
  std::vector<std::size_t> ends;
  EXPECT_TRUE(tok.Tokenizer::decode_with_ends(ids, decoded, ends));  // the base class's own, slow way
  EXPECT_EQ(decoded, text);
  MaskedTokens out;
  if (tok.add_bos() && tok.bos_id() >= 0) {
    out.ids.push_back(tok.bos_id());
    out.mask.push_back(0);
  }
  std::size_t begin = 0;
  for (std::size_t k = 0; k < ids.size(); ++k) {
    std::uint8_t m = 0;
    for (std::size_t b = begin; b < ends[k]; ++b) m |= trainable[b];
    if (ends[k] == begin && begin < text.size()) m = trainable[begin];  // no bytes of its own: its first
    out.ids.push_back(ids[k]);
    out.mask.push_back(m);
    begin = ends[k];
  }
  return out;
}

void expect_same_split(const Tokenizer& tok, const std::string& text) {
  const std::vector<std::int32_t> ids = tok.encode(text);
  std::string fast_text, slow_text;
  std::vector<std::size_t> fast, slow;
  ASSERT_TRUE(tok.decode_with_ends(ids, fast_text, fast)) << text;
  ASSERT_TRUE(tok.Tokenizer::decode_with_ends(ids, slow_text, slow)) << text;
  EXPECT_EQ(fast_text, slow_text);
  EXPECT_EQ(fast, slow) << "text: " << text;
}

}  // namespace

TEST(MaskPlacement, SentencePieceSplitIsTheSlowPathsOnSmallInputs) {
  const auto tok = make_sentencepiece_tokenizer(sp_model("sp"), {}, "sp");
  for (std::size_t seed = 0; seed < 6; ++seed) {
    expect_same_split(*tok, words(3 + seed * 5, seed));
    expect_same_split(*tok, " " + words(4, seed) + "\n\n  " + words(2, seed + 1) + "  ");
  }
  for (std::size_t seed = 0; seed < 4; ++seed) {
    const auto segs = chat(1 + seed, 5 + 3 * seed, seed);
    const MaskedTokens got = tokenize_with_mask(*tok, segs), want = reference_mask(*tok, segs);
    EXPECT_EQ(got.ids, want.ids);
    EXPECT_EQ(got.mask, want.mask) << "seed " << seed;
  }
}

TEST(MaskPlacement, ContextDependentBpeSplitIsTheSlowPathsOnSmallInputs) {
  const auto tok = llama2_style_bpe();
  for (const std::string t : {"the thin path", " the", "a  b", "then</s>the", "<s> the", "x\xC3\xA9y the \xE6\x97\xA5"})
    expect_same_split(*tok, t);
  for (std::size_t seed = 0; seed < 4; ++seed) {
    const auto segs = chat(1 + seed, 4 + seed, seed, seed % 2 ? "</s>" : "");
    const MaskedTokens got = tokenize_with_mask(*tok, segs), want = reference_mask(*tok, segs);
    EXPECT_EQ(got.ids, want.ids);
    EXPECT_EQ(got.mask, want.mask) << "seed " << seed;
  }
}

TEST(MaskPlacement, ByteFallbackCharactersOfAReplyAreTrainedWhole) {
  // Each of these characters is two to four <0xHH> pieces; prefixes of them decode to U+FFFD,
  // so the old growing-prefix placement refused the example.
  const auto tok = make_sentencepiece_tokenizer(sp_model("sp"), {}, "sp");
  const std::vector<ChatSegment> segs = {{"User: w\xC3\xB6rld?\nAssistant:", false},
                                         {" \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80 ok\n", true}};
  const MaskedTokens m = tokenize_with_mask(*tok, segs);
  std::string plain, reply;
  std::vector<std::int32_t> reply_ids;
  std::size_t k = 0;
  for (; k < m.ids.size() && !m.mask[k]; ++k) plain += tok->decode({m.ids[k]});
  for (; k < m.ids.size(); ++k) {
    EXPECT_EQ(m.mask[k], 1) << "token " << k << " of the reply is not trained";
    reply_ids.push_back(m.ids[k]);
  }
  EXPECT_EQ(tok->decode(reply_ids), "\xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80 ok\n");
}

TEST(MaskPlacement, LongExampleIsPlacedInOnePass) {
  // 24k words: the quadratic placement took minutes here. No time is asserted; the result
  // must be the whole example, every reply token trained and every prompt token not.
  const std::vector<ChatSegment> segs = {{"User: " + words(12000, 1) + "\nAssistant:", false},
                                         {" " + words(12000, 2) + "\n", true}};
  for (const auto& tok : {make_sentencepiece_tokenizer(sp_model("sp"), {}, "sp"), llama2_style_bpe()}) {
    const MaskedTokens m = tokenize_with_mask(*tok, segs);
    std::size_t trained = 0;
    for (const std::uint8_t b : m.mask) trained += b;
    EXPECT_GT(trained, 12000u) << tok->name();
    EXPECT_LT(trained, m.ids.size() - 12000u) << tok->name();
    EXPECT_EQ(m.mask.back(), 1) << tok->name();
  }
}

TEST(SpecialIds, SentencePieceWithoutEosHasNoEndOfTextAndPrepareSaysWhoNeedsIt) {
  const std::string model = sp_model("sp_noeos", "--bos_id=-1 --eos_id=-1");
  const auto tok = make_sentencepiece_tokenizer(model, {}, model);
  EXPECT_EQ(tok->eot_id(), -1);
  EXPECT_EQ(tok->bos_id(), -1);
  EXPECT_FALSE(tok->add_bos());
  PrepareOptions o;
  o.inputs = {(tmp_dir() / "corpus.txt").string()};
  o.output = (tmp_dir() / "ds_noeos").string();
  o.tokenizer = model;
  try {
    prepare(o);
    FAIL() << "prepare accepted a tokenizer without end-of-text";
  } catch (const UserError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("sp_noeos.model has no end-of-text token"), std::string::npos) << what;
    EXPECT_NE(what.find("prepare --format text ends every document with it"), std::string::npos) << what;
  }
  EXPECT_FALSE(fs::exists(o.output));
}

TEST(SpecialIds, TokenizerConfigNamesPiecesAndAddBosWithoutBosIsRefused) {
  const std::string model = sp_model("sp_nobos", "--bos_id=-1");
  // The config names the eos by its piece; add_bos_token asks for a BOS the model lacks.
  TokenizerConfig config;
  config.add_bos_token = true;
  config.eos_token = "</s>";
  const auto tok = make_sentencepiece_tokenizer(model, config, model);
  EXPECT_EQ(tok->bos_id(), -1);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->eos_id(), tok->token_id("</s>"));
  PrepareOptions o;
  o.inputs = {(tmp_dir() / "corpus.txt").string()};
  o.output = (tmp_dir() / "ds_nobos").string();
  o.tokenizer = model;
  fs::path cfg = fs::path(model).parent_path() / "tokenizer_config.json";
  std::ofstream(cfg) << R"({"add_bos_token": true})";
  EXPECT_THROW(
      {
        try {
          prepare(o);
        } catch (const UserError& e) {
          EXPECT_NE(std::string(e.what()).find("has no BOS token"), std::string::npos) << e.what();
          throw;
        }
      },
      UserError);
  fs::remove(cfg);
}

TEST(CheckedInt, RangesAndTexts) {
  EXPECT_EQ(checked_int<int>(7, "f", "k"), 7);
  EXPECT_THROW(checked_int<int>(4294967298LL, "f.gguf", "llama.block_count"), UserError);
  try {
    checked_int<int>(4294967298LL, "f.gguf", "llama.block_count", 1);
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "f.gguf: llama.block_count = 4294967298 is outside 1..2147483647");
  }
  EXPECT_EQ(parse_checked_int("576", "c.json", "n_embd"), 576);
  EXPECT_EQ(parse_checked_int("576.0", "c.json", "n_embd"), 576);
  EXPECT_EQ(parse_checked_int("1e3", "c.json", "n_embd"), 1000);
  EXPECT_THROW(parse_checked_int("1.5", "c.json", "n_embd"), UserError);
  EXPECT_THROW(parse_checked_int("99999999999999999999", "c.json", "n_embd"), UserError);
  EXPECT_THROW(parse_checked_int("1e300", "c.json", "n_embd"), UserError);
  EXPECT_THROW(parse_checked_int("4294967298", "c.json", "n_layer", 1, 2147483647), UserError);
  EXPECT_THROW(parse_checked_int("", "c.json", "n_layer"), UserError);
  EXPECT_THROW(parse_checked_int("12abc", "c.json", "n_layer"), UserError);
}

TEST(SpecialIds, EncodeSequenceStartsWithBosWhenTheModelExpectsOne) {
  // A prompt (generate, train.sample_prompt) and an evaluated text (eval --text) start as
  // prepare's documents do: BOS first for a Llama-style SentencePiece model, not otherwise.
  const std::string model = sp_model("sp");
  TokenizerConfig bos_config;
  bos_config.add_bos_token = true;
  const auto bos = make_sentencepiece_tokenizer(model, bos_config, model);
  ASSERT_TRUE(bos->add_bos());
  ASSERT_GE(bos->bos_id(), 0);
  std::vector<std::int32_t> want = {bos->bos_id()};
  const std::vector<std::int32_t> body = bos->encode("hello world");
  want.insert(want.end(), body.begin(), body.end());
  EXPECT_EQ(bos->encode_sequence("hello world"), want);
  EXPECT_EQ(bos->encode_sequence(""), std::vector<std::int32_t>{bos->bos_id()});  // an empty prompt starts at BOS
  TokenizerConfig no_bos_config;
  no_bos_config.add_bos_token = false;
  const auto plain = make_sentencepiece_tokenizer(model, no_bos_config, model);
  ASSERT_FALSE(plain->add_bos());
  EXPECT_EQ(plain->encode_sequence("hello world"), plain->encode("hello world"));
  EXPECT_TRUE(ByteTokenizer().encode_sequence("").empty());
}

// ---- Special pieces of SentencePiece models in chat text ------------------------------------
// The reference is what transformers' LlamaTokenizer does with legacy=True (and Llama 2's
// tokenizer.json, Meta's reference chat code, llama.cpp): the text is split at the special
// pieces, each is its id, and each text between them is SentencePiece's own Encode of it,
// with its own dummy prefix. Before, the whole text went to SentencePiece's Encode, which
// spells "<s>" and "</s>" out in ordinary pieces ("▁<", "s", ">").

namespace {

/// SentencePiece's own encoding of `text` (the library, not meshtrain's tokenizer).
std::vector<std::int32_t> sp_encode(const std::string& model, const std::string& text) {
  sentencepiece::SentencePieceProcessor sp;
  EXPECT_TRUE(sp.Load(model).ok());
  std::vector<int> ids;
  EXPECT_TRUE(sp.Encode(text, &ids).ok());
  return {ids.begin(), ids.end()};
}

std::vector<std::int32_t> cat(std::initializer_list<std::vector<std::int32_t>> parts) {
  std::vector<std::int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

}  // namespace

TEST(SentencePieceSpecials, ControlPiecesInTheTextAreTheirIdsAndEachSegmentKeepsItsDummyPrefix) {
  const std::string model = sp_model("sp");
  const auto tok = make_sentencepiece_tokenizer(model, {}, "sp");
  ASSERT_EQ(tok->bos_id(), 1);
  ASSERT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->encode("<s>"), std::vector<std::int32_t>{1});
  EXPECT_EQ(tok->encode("</s>"), std::vector<std::int32_t>{2});
  const std::string text = "<s>[INST] the mesh [/INST] a rank </s><s>[INST] loss [/INST]";
  const std::vector<std::int32_t> want =
      cat({{1}, sp_encode(model, "[INST] the mesh [/INST] a rank "), {2, 1}, sp_encode(model, "[INST] loss [/INST]")});
  EXPECT_EQ(tok->encode(text), want);
  // "▁[" (with the dummy prefix) after <s>, as Hugging Face's Llama 2 tokenizer writes [INST]
  // there (its 518): the segment after a special piece is encoded as a text of its own.
  EXPECT_EQ(tok->encode("<s>[INST]"), cat({{1}, sp_encode(model, "[INST]")}));
  // Decoding writes the special pieces as their text: the round trip holds, and the loss
  // mask can be placed on them.
  EXPECT_EQ(tok->decode(tok->encode(text)), text);
  expect_same_split(*tok, text);
  expect_same_split(*tok, "the</s>  rank<s>\n");
  // Text without special pieces is encoded as before.
  EXPECT_EQ(tok->encode("the mesh < s > </ s>"), sp_encode(model, "the mesh < s > </ s>"));
}

TEST(SentencePieceSpecials, Llama2ChatTrainsEosAtTheEndOfEachReply) {
  const std::string model = sp_model("sp");
  const auto tok = make_sentencepiece_tokenizer(model, {}, "sp");
  const std::vector<ChatMessage> msgs = {{"system", "be brief"}, {"user", "the mesh?"}, {"assistant", "a rank."},
                                         {"user", "loss?"},      {"assistant", "the sum"}};
  const MaskedTokens m = tokenize_with_mask(*tok, render_chat(chat_format_by_name("llama2"), msgs));
  const std::vector<std::int32_t> want =
      cat({{1}, sp_encode(model, "[INST] <<SYS>>\nbe brief\n<</SYS>>\n\nthe mesh? [/INST] a rank. "), {2, 1},
           sp_encode(model, "[INST] loss? [/INST] the sum "), {2}});
  EXPECT_EQ(m.ids, want);
  ASSERT_EQ(m.mask.size(), m.ids.size());
  std::size_t bos = 0, eos = 0;
  for (std::size_t k = 0; k < m.ids.size(); ++k) {
    if (m.ids[k] == 1) {
      ++bos;
      EXPECT_EQ(m.mask[k], 0) << "BOS at " << k;
    }
    if (m.ids[k] == 2) {
      ++eos;
      EXPECT_EQ(m.mask[k], 1) << "EOS at " << k << " is not trained";
    }
  }
  EXPECT_EQ(bos, 2u);  // one per [INST], none added in front of the first
  EXPECT_EQ(eos, 2u);  // one per reply
  // The trained tokens are the replies and their ends: " a rank. </s>" and " the sum </s>".
  std::vector<std::string> runs;
  std::vector<std::int32_t> run;
  for (std::size_t k = 0; k <= m.ids.size(); ++k) {
    if (k < m.ids.size() && m.mask[k]) {
      run.push_back(m.ids[k]);
    } else if (!run.empty()) {
      runs.push_back(tok->decode(run));
      run.clear();
    }
  }
  EXPECT_EQ(runs, (std::vector<std::string>{"a rank. </s>", "the sum </s>"}));
}

TEST(SentencePieceSpecials, ChatPromptEncodesLikeTrainingData) {
  // generate --chat encodes chat_generation_prompt's text with the same encode: Llama 2's
  // prompt is BOS, the [INST] block as text, and its end-of-turn marker is the EOS id.
  const std::string model = sp_model("sp");
  const auto tok = make_sentencepiece_tokenizer(model, {}, "sp");
  const ChatPrompt p = chat_generation_prompt(chat_format_by_name("llama2"), "the mesh?");
  EXPECT_EQ(tok->encode(p.text), cat({{1}, sp_encode(model, "[INST] the mesh? [/INST]")}));
  EXPECT_EQ(tok->encode(p.end_of_turn), std::vector<std::int32_t>{2});
  // The prompt's ids are where the training ids of the same conversation leave off for the
  // reply (no lone '▁' after [/INST]: the space is the reply's first piece's, as trained).
  const MaskedTokens train = tokenize_with_mask(
      *tok, render_chat(chat_format_by_name("llama2"), {{"user", "the mesh?"}, {"assistant", "a rank."}}));
  const std::vector<std::int32_t> prompt = tok->encode(p.text);
  ASSERT_LT(prompt.size(), train.ids.size());
  EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), train.ids.begin()));
  EXPECT_EQ(train.mask[prompt.size() - 1], 0);
  EXPECT_EQ(train.mask[prompt.size()], 1);
}

TEST(ChatMarkers, EndOfTurnMarkerOfEachTemplateIsTheOneRenderedAfterAReply) {
  for (const std::string& name : known_chat_templates()) {
    const ChatFormat f = chat_format_by_name(name);
    EXPECT_EQ(end_of_turn_marker(f), chat_generation_prompt(f, "hi").end_of_turn) << name;
  }
}

TEST(ChatMarkers, AnEndOfTurnMarkerThatIsNotOneTokenIsRefusedByName) {
  const auto sp = make_sentencepiece_tokenizer(sp_model("sp"), {}, "sp.model");
  EXPECT_NO_THROW(require_end_of_turn_token(*sp, chat_format_by_name("llama2"), "llama2"));
  EXPECT_NO_THROW(require_end_of_turn_token(*sp, chat_format_by_name("alpaca"), "alpaca"));
  for (const char* name : {"chatml", "llama3"}) {
    const std::string marker = name == std::string("chatml") ? "<|im_end|>" : "<|eot_id|>";
    try {
      require_end_of_turn_token(*sp, chat_format_by_name(name), name);
      ADD_FAILURE() << name << " accepted with a vocabulary that lacks " << marker;
    } catch (const UserError& e) {
      const std::string what = e.what();
      const std::string n = std::to_string(sp->encode(marker).size());
      EXPECT_GT(sp->encode(marker).size(), 1u);
      for (const std::string& part :
           {"the " + std::string(name) + " chat template ends each assistant turn with '" + marker + "'",
            "the tokenizer sp.model encodes as " + n + " ids, not one token", std::string("--chat_template"),
            "a tokenizer that has '" + marker + "'"})
        EXPECT_NE(what.find(part), std::string::npos) << "missing: " << part << "\nin: " << what;
    }
  }
  // A BPE vocabulary with the marker as an added token, and without it.
  const auto bpe = llama2_style_bpe();
  EXPECT_NO_THROW(require_end_of_turn_token(*bpe, chat_format_by_name("llama2"), "llama2"));
  EXPECT_THROW(require_end_of_turn_token(*bpe, chat_format_by_name("chatml"), "chatml"), UserError);
  // The byte tokenizer has no vocabulary: its markers are bytes in prepare and generate alike.
  const ByteTokenizer bytes;
  EXPECT_NO_THROW(require_end_of_turn_token(bytes, chat_format_by_name("chatml"), "chatml"));
}

TEST(ChatMarkers, PrepareRefusesTheTemplateBeforeWritingAnything) {
  PrepareOptions o;
  const fs::path in = tmp_dir() / "chat_refused.jsonl";
  std::ofstream(in) << R"({"messages": [{"role": "user", "content": "the mesh"}, )"
                    << R"({"role": "assistant", "content": "a rank"}]})" << "\n";
  o.inputs = {in.string()};
  o.output = (tmp_dir() / "ds_refused").string();
  o.tokenizer = sp_model("sp");
  o.format = "chat";
  o.chat_template = "llama3";
  o.seq_len = 64;
  o.val_fraction = 0;
  try {
    prepare(o);
    ADD_FAILURE() << "prepare trained <|eot_id|> as plain text";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("the llama3 chat template ends each assistant turn with '<|eot_id|>'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(o.output));
  // llama2's </s> is the model's EOS: prepared, with the EOS trained.
  o.chat_template = "llama2";
  prepare(o);
  EXPECT_TRUE(fs::exists(fs::path(o.output) / "meta.json"));
}

