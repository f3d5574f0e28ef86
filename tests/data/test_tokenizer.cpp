#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "data/bpe_tokenizer.hpp"
#include "data/dataset.hpp"
#include "data/tokenizer.hpp"
#include "checkpoint/tokenizer_ref.hpp"

using namespace meshtrain;
using namespace meshtrain::data;

TEST(ByteTokenizer, RoundTripsUtf8) {
  const auto tok = make_tokenizer("byte");
  EXPECT_EQ(tok->name(), "byte");
  EXPECT_EQ(tok->vocab_size(), 257);
  EXPECT_EQ(tok->eot_id(), 256);
  const std::string text = "Hello, world!\n\tnaïve café — 日本語 🙂\r\n";
  const std::vector<std::int32_t> ids = tok->encode(text);
  EXPECT_EQ(ids.size(), text.size());
  for (const std::int32_t id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 256);  // encode never produces eot
  }
  EXPECT_EQ(tok->decode(ids), text);
  EXPECT_EQ(tok->encode(""), std::vector<std::int32_t>{});
}

TEST(ByteTokenizer, IdsAreBytes) {
  ByteTokenizer tok;
  EXPECT_EQ(tok.encode("A\xff"), (std::vector<std::int32_t>{65, 255}));
}

TEST(ByteTokenizer, DecodesEotAndUnknownIds) {
  ByteTokenizer tok;
  EXPECT_EQ(tok.decode({104, 105, 256, 300, -1}), "hi<|endoftext|>\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(Tokenizer, UnknownNameListsKnownOnes) {
  try {
    make_tokenizer("gpt9");
    FAIL();
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'gpt9'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("byte"), std::string::npos) << msg;
  }
}

namespace {

/// vocab a b c ab bc abc "<|x|>" "<|xy|>"; merges (b c) before (a b) before (a bc).
BpeConfig tiny_bpe() {
  BpeConfig c;
  c.name = "tiny";
  c.vocab = {"a", "b", "c", "ab", "bc", "abc", "<|x|>", "<|xy|>", " "};
  c.merges = {{"b", "c"}, {"a", "b"}, {"a", "bc"}};
  c.added = {{6, "<|x|>", true, false, false}, {7, "<|xy|>", true, false, false}};
  c.eot_id = 6;
  return c;
}

}  // namespace

TEST(BpeTokenizer, MergesByRankLowestFirst) {
  const auto tok = make_bpe_tokenizer(tiny_bpe());
  // (b c) has rank 0 < (a b) rank 1, so abc = a + bc -> abc, never ab + c.
  EXPECT_EQ(tok->encode("abc"), (std::vector<std::int32_t>{5}));
  EXPECT_EQ(tok->encode("ab"), (std::vector<std::int32_t>{3}));
  // "abab": both (a b) pairs merge, leftmost first; nothing merges ab ab.
  EXPECT_EQ(tok->encode("abab"), (std::vector<std::int32_t>{3, 3}));
  EXPECT_EQ(tok->encode("cab"), (std::vector<std::int32_t>{2, 3}));
  EXPECT_EQ(tok->decode({2, 3, 5}), "cababc");
  EXPECT_EQ(tok->vocab_size(), 9);
}

TEST(BpeTokenizer, AddedTokensLeftmostLongestBeforeBpe) {
  const auto tok = make_bpe_tokenizer(tiny_bpe());
  // "<|xy|>" is longer than "<|x|>" but they never overlap at one start; the leftmost wins.
  EXPECT_EQ(tok->encode("ab<|xy|>c<|x|>"), (std::vector<std::int32_t>{3, 7, 2, 6}));
  EXPECT_EQ(tok->decode({3, 7, 2, 6}), "ab<|xy|>c<|x|>");
  EXPECT_EQ(tok->token_id("<|xy|>"), 7);
  EXPECT_EQ(tok->token_id("zz"), -1);
  EXPECT_EQ(tok->decode({99}), "\xEF\xBF\xBD");
}

TEST(BpeTokenizer, MergeOfUnknownTokenIsAnError) {
  BpeConfig c = tiny_bpe();
  c.merges.push_back({"c", "a"});  // "ca" is not in the vocabulary
  EXPECT_THROW(make_bpe_tokenizer(c), UserError);
}

TEST(BpeTokenizer, ByteLevelRoundTripsAnyUtf8) {
  // Vocabulary: the 256 characters of GPT-2's byte table with id = byte value, no merges,
  // so the ids of a text must be its bytes.
  BpeConfig c;
  c.name = "bytes";
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const std::uint32_t cp = printable ? static_cast<std::uint32_t>(b) : 256u + n++;
    std::string ch;
    if (cp < 0x80) {
      ch += static_cast<char>(cp);
    } else {
      ch += static_cast<char>(0xC0 | (cp >> 6));
      ch += static_cast<char>(0x80 | (cp & 0x3F));
    }
    c.vocab.push_back(ch);
  }
  PreTokenizerStep s{};
  s.kind = PreTokenizerStep::Kind::ByteLevel;
  c.pre_tokenizer.push_back(s);
  DecoderStep d{};
  d.kind = DecoderStep::Kind::ByteLevel;
  c.decoder.push_back(d);
  c.eot_id = 0;
  const auto tok = make_bpe_tokenizer(c);
  const std::string text = "Hello,  world!\n\tnaïve café — 日本語 🙂 1234\r\n  ";
  const auto ids = tok->encode(text);
  ASSERT_EQ(ids.size(), text.size());
  for (std::size_t i = 0; i < text.size(); ++i) EXPECT_EQ(ids[i], static_cast<unsigned char>(text[i]));
  EXPECT_EQ(tok->decode(ids), text);
  EXPECT_THROW(tok->encode("bad \xff utf-8"), UserError);
}

TEST(TokenizerMatch, RefusesAnotherTokenizer) {
  const TokenizerIdentity byte{"byte", 257, ""};
  const TokenizerIdentity bpe{"bpe", 49152, "aaaa"};
  const TokenizerIdentity bpe_other{"bpe", 49152, "bbbb"};
  EXPECT_NO_THROW(check_tokenizer_match(bpe, bpe, "d", "m"));
  EXPECT_NO_THROW(check_tokenizer_match({}, bpe, "d", "m"));  // unknown: nothing to compare
  EXPECT_THROW(check_tokenizer_match(byte, bpe, "d", "m"), UserError);
  EXPECT_THROW(check_tokenizer_match(bpe_other, bpe, "d", "m"), UserError);
  EXPECT_THROW(check_tokenizer_match({"bpe", 50000, ""}, {"bpe", 49152, ""}, "d", "m"), UserError);
  try {
    check_tokenizer_match(bpe_other, bpe, "dataset X", "model Y");
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("dataset X"), std::string::npos) << m;
    EXPECT_NE(m.find("model Y"), std::string::npos) << m;
    EXPECT_NE(m.find("bbbb"), std::string::npos) << m;
  }
}

TEST(BpeTokenizer, AMalformedTokenizerJsonIsNamedInPlainWords) {
  namespace fs = std::filesystem;
  const fs::path file = fs::temp_directory_path() / ("meshtrain_tok_bad_" + std::to_string(::getpid()) + ".json");
  const auto message = [&](const std::string& text) {
    std::ofstream(file) << text;
    try {
      bpe_config_from_tokenizer_json(file.string());
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // The JSON library's own words, without its "[json.exception.NAME.ID] " prefix.
  std::string m = message(R"({"model": {"type": "BPE", "vocab": {}}})");
  EXPECT_NE(m.find("is not a tokenizer.json of the expected form: key 'merges' not found"), std::string::npos) << m;
  EXPECT_EQ(m.find("[json.exception"), std::string::npos) << m;
  m = message(R"({"model": )");
  EXPECT_NE(m.find("is not valid JSON: "), std::string::npos) << m;
  EXPECT_EQ(m.find("[json.exception"), std::string::npos) << m;
  fs::remove(file);
}

TEST(TokenizerMatch, DatasetAgainstAModelDirectory) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("meshtrain_tok_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "<|endoftext|>": 3},
    "merges": ["a b"]}, "added_tokens": [{"id": 3, "content": "<|endoftext|>", "special": true}],
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "decoder": {"type": "ByteLevel"}})";
  const auto tok = make_tokenizer(dir.string());
  EXPECT_EQ(tok->kind(), "bpe");
  EXPECT_EQ(tok->eot_id(), 3);
  EXPECT_EQ(tok->encode("ab<|endoftext|>a"), (std::vector<std::int32_t>{2, 3, 0}));
  DatasetMeta same;
  same.tokenizer = dir.string();
  same.tokenizer_kind = "bpe";
  same.vocab_size = tok->vocab_size();
  same.tokenizer_hash = tok->hash();
  EXPECT_NO_THROW(checkpoint::check_dataset_tokenizer(same, "data", dir.string()));
  DatasetMeta bytes;
  bytes.tokenizer = "byte";
  bytes.tokenizer_kind = "byte";
  bytes.vocab_size = 257;
  EXPECT_THROW(checkpoint::check_dataset_tokenizer(bytes, "data", dir.string()), UserError);
  DatasetMeta random;
  random.tokenizer = "random";
  EXPECT_NO_THROW(checkpoint::check_dataset_tokenizer(random, "data", dir.string()));
  EXPECT_NO_THROW(checkpoint::check_dataset_tokenizer(bytes, "data", "weights.safetensors"));  // no tokenizer known
  fs::remove_all(dir);
}

TEST(DatasetMeta, TokenizerFieldsRoundTripAndOldFilesRead) {
  DatasetMeta m;
  m.tokenizer = "/models/smol.gguf";
  m.tokenizer_kind = "bpe";
  m.tokenizer_hash = "0123abcd";
  m.vocab_size = 49152;
  m.eot_id = 0;
  m.bos_id = 1;
  m.eos_id = 2;
  m.pad_id = 2;
  m.add_bos = true;
  m.val_split = "x";
  m.meshtrain_version = "v";
  const DatasetMeta r = meta_from_json(meta_to_json(m), "meta.json");
  EXPECT_EQ(r.tokenizer, m.tokenizer);
  EXPECT_EQ(r.tokenizer_kind, "bpe");
  EXPECT_EQ(r.tokenizer_hash, "0123abcd");
  EXPECT_EQ(r.bos_id, 1);
  EXPECT_EQ(r.eos_id, 2);
  EXPECT_EQ(r.pad_id, 2);
  EXPECT_TRUE(r.add_bos);
  // A meta.json from before tokenizer files: a byte dataset without the new keys.
  const std::string old = R"({"format": "meshtrain-dataset", "tokenizer": "byte", "vocab_size": 257, "eot_id": 256,
    "train_tokens": 1, "val_tokens": 0, "val_fraction": 0, "val_split": "x", "bytes": 1,
    "train_entropy_bits": 0, "meshtrain_version": "v", "source_files": []})";
  const DatasetMeta o = meta_from_json(old, "meta.json");
  EXPECT_EQ(o.tokenizer_kind, "byte");
  EXPECT_EQ(o.tokenizer_hash, "");
  EXPECT_EQ(o.bos_id, -1);
  EXPECT_FALSE(o.add_bos);
}
