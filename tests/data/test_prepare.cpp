// prepare: text files -> train.bin/val.bin/meta.json, read back through Dataset::open.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "data_test_util.hpp"
#include "core/error.hpp"
#include "core/utf8.hpp"
#include "data/dataset.hpp"
#include "data/prepare.hpp"
#include "data/sampler.hpp"
#include "data/text_files.hpp"
#include "data/token_file.hpp"
#include "data/tokenizer.hpp"

using namespace meshtrain;
using namespace meshtrain::data;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string kDocA =
    "The quick brown fox\njumps over the lazy dog.\nPack my box with\nfive dozen liquor jugs.\n"
    "How vexingly quick daft zebras jump!\nSphinx of black quartz, judge my vow.\n";
const std::string kDocB = "Ünïcödé text — 日本語の文章。\nsecond line 🙂\nthird line\nfourth line\n";

// A corpus with two text documents and every kind of file prepare must skip.
void make_corpus(const TempDir& dir) {
  test::write_file(dir / "corpus/a.txt", kDocA);
  test::write_file(dir / "corpus/sub/b.md", kDocB);
  test::write_file(dir / "corpus/index.dat", "not read at all");
  test::write_file(dir / "corpus/binary", std::string("ab\0cd", 5));
  test::write_file(dir / "corpus/latin1.txt", "caf\xe9\n");
  test::write_file(dir / "corpus/empty.txt", "");
  fs::create_directory_symlink("..", dir / "corpus/sub/loop");   // a symlink loop
  fs::create_symlink("a.txt", dir / "corpus/z_link_to_a.txt");   // a second name for a.txt
  fs::create_hard_link(dir / "corpus/a.txt", dir / "corpus/sub/hard_link_to_a.txt");  // a third, not a symlink
}

// The pieces of `ids` between end-of-text ids, decoded.
std::vector<std::string> split_documents(const TokenSource& src) {
  ByteTokenizer tok;
  std::vector<std::int32_t> ids(src.size());
  src.read(0, static_cast<int>(ids.size()), ids.data());
  std::vector<std::string> docs;
  std::vector<std::int32_t> cur;
  for (const std::int32_t id : ids) {
    if (id == tok.eot_id()) {
      docs.push_back(tok.decode(cur));
      cur.clear();
    } else {
      cur.push_back(id);
    }
  }
  EXPECT_TRUE(cur.empty()) << "the last document does not end with eot";
  return docs;
}

template <class F>
std::string user_error(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no UserError";
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(Prepare, RoundTripSplitsEachDocumentAtALine) {
  TempDir dir("prepare");
  make_corpus(dir);
  PrepareOptions o;
  o.inputs = {dir / "corpus"};
  o.output = dir / "out";
  o.val_fraction = 0.2;
  const PrepareSummary s = prepare(o);

  EXPECT_EQ(s.files, (std::vector<std::string>{dir / "corpus/a.txt", dir / "corpus/sub/b.md"}));
  ASSERT_EQ(s.skipped.size(), 3u);  // binary, empty.txt, latin1.txt (sorted); index.dat never listed
  EXPECT_TRUE(contains(s.skipped[0], "binary: contains NUL bytes"));
  EXPECT_TRUE(contains(s.skipped[1], "empty.txt: empty"));
  EXPECT_TRUE(contains(s.skipped[2], "latin1.txt: is not valid UTF-8"));
  EXPECT_EQ(s.bytes, kDocA.size() + kDocB.size());
  EXPECT_EQ(s.train_tokens + s.val_tokens, s.bytes + 4);  // 2 documents x (train + val piece) eots

  const Dataset d = Dataset::open(o.output);
  EXPECT_EQ(d.meta.tokenizer, "byte");
  EXPECT_EQ(d.meta.vocab_size, 257);
  EXPECT_EQ(d.meta.eot_id, 256);
  EXPECT_EQ(d.meta.train_tokens, s.train_tokens);
  EXPECT_EQ(d.meta.val_tokens, s.val_tokens);
  EXPECT_EQ(d.meta.val_fraction, 0.2);
  EXPECT_EQ(d.meta.source_files, s.files);
  EXPECT_EQ(d.train->size(), s.train_tokens);
  EXPECT_EQ(d.val->size(), s.val_tokens);

  // train piece + val piece == document; val starts at a line; val is the smaller tail.
  const std::vector<std::string> train = split_documents(*d.train), val = split_documents(*d.val);
  ASSERT_EQ(train.size(), 2u);
  ASSERT_EQ(val.size(), 2u);
  const std::vector<std::string> docs = {kDocA, kDocB};
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(train[i] + val[i], docs[i]);
    EXPECT_EQ(train[i].back(), '\n');
    EXPECT_GT(val[i].size(), 0u);
    EXPECT_LT(val[i].size(), docs[i].size() * 0.4);  // 0.2 of the bytes, give or take a line
  }

  // The entropy is that of the train tokens.
  std::vector<std::uint64_t> counts(257, 0);
  std::vector<std::int32_t> ids(d.train->size());
  d.train->read(0, static_cast<int>(ids.size()), ids.data());
  for (const std::int32_t id : ids) ++counts[static_cast<std::size_t>(id)];
  EXPECT_NEAR(s.train_entropy_bits, unigram_entropy_bits(counts), 1e-12);
  EXPECT_NEAR(s.train_entropy_nats, s.train_entropy_bits * std::log(2.0), 1e-12);
  EXPECT_NEAR(d.meta.train_entropy_bits, s.train_entropy_bits, 1e-12);

  for (const auto& e : fs::directory_iterator(o.output))
    EXPECT_NE(e.path().extension(), ".tmp") << e.path();
  EXPECT_TRUE(contains(format_summary(s), "2 file(s)"));
}

TEST(Prepare, IsDeterministicAndOverwrites) {
  TempDir dir("prepare");
  make_corpus(dir);
  PrepareOptions o;
  o.inputs = {dir / "corpus/sub", dir / "corpus/a.txt"};  // the order of inputs does not matter
  o.output = dir / "out";
  prepare(o);
  const std::string first = test::read_file(dir / "out/train.bin");
  o.inputs = {dir / "corpus/a.txt", dir / "corpus/sub"};
  prepare(o);
  EXPECT_EQ(test::read_file(dir / "out/train.bin"), first);
}

TEST(Prepare, IgnoresItsOwnOutputInsideAnInput) {
  TempDir dir("prepare");
  make_corpus(dir);
  PrepareOptions o;
  o.inputs = {dir / "corpus"};
  o.output = dir / "corpus/dataset";
  const PrepareSummary first = prepare(o);
  const PrepareSummary second = prepare(o);  // meta.json of the first run is not a document
  EXPECT_EQ(second.files, first.files);
  EXPECT_EQ(second.train_tokens, first.train_tokens);
}

// The output directory inside an input, holding the user's own text: not one file of it is
// dropped silently -- prepare refuses, naming them, and writes nothing (doc/data.md).
TEST(PrepareErrors, InputFilesInsideTheOutputAreRefused) {
  TempDir dir("prepare");
  test::write_file(dir / "data/a.txt", kDocA);
  for (const char* n : {"b.txt", "c.txt", "d.txt"}) test::write_file(dir / (std::string("data/wiki/") + n), kDocB);
  PrepareOptions o;
  o.inputs = {dir / "data"};
  o.output = dir / "data/wiki";
  std::string msg = user_error([&] { prepare(o); });
  EXPECT_TRUE(contains(msg, "3 input file(s) lie inside the output directory " + o.output)) << msg;
  EXPECT_TRUE(contains(msg, dir / "data/wiki/b.txt") && contains(msg, dir / "data/wiki/d.txt")) << msg;
  EXPECT_TRUE(contains(msg, "give --output a directory of its own")) << msg;
  EXPECT_FALSE(contains(msg, "data/a.txt")) << msg;
  // A file named as the input, in the output directory (nanoGPT's layout): the same error,
  // not "no input files found" for a file that exists.
  o.inputs = {dir / "data/wiki/b.txt"};
  msg = user_error([&] { prepare(o); });
  EXPECT_TRUE(contains(msg, "1 input file(s) lie inside the output directory")) << msg;
  EXPECT_TRUE(contains(msg, dir / "data/wiki/b.txt")) << msg;
  // Also in a subdirectory of the output, and when the output is the input itself.
  o.inputs = {dir / "data"};
  o.output = dir / "data";
  EXPECT_TRUE(contains(user_error([&] { prepare(o); }), "4 input file(s) lie inside the output directory"));
  test::write_file(dir / "out/texts/e.txt", kDocA);
  o.inputs = {dir / "out/texts"};
  o.output = dir / "out";
  EXPECT_TRUE(contains(user_error([&] { prepare(o); }), "1 input file(s) lie inside the output directory"));
  // Nothing was written: no dataset file, no temporary.
  for (const auto& e : fs::recursive_directory_iterator(dir.str()))
    EXPECT_FALSE(e.path().extension() == ".bin" || e.path().extension() == ".tmp" ||
                 e.path().filename() == "meta.json") << e.path();
  // The text beside an earlier dataset already there (a prepare that left it out): that
  // dataset is skipped whole when the inputs are read, its neighbours with it -- yet they
  // are refused as well, not dropped with a notice.
  o.inputs = {dir / "data/a.txt"};
  o.output = dir / "data/wiki";
  PrepareOptions old = o;
  old.output = dir / "old";
  prepare(old);
  for (const char* f : {"train.bin", "val.bin", "meta.json"})
    fs::copy_file(dir / (std::string("old/") + f), dir / (std::string("data/wiki/") + f));
  o.inputs = {dir / "data"};
  msg = user_error([&] { prepare(o); });
  EXPECT_TRUE(contains(msg, "3 input file(s) lie inside the output directory " + o.output)) << msg;
  EXPECT_TRUE(contains(msg, dir / "data/wiki/b.txt")) << msg;
  EXPECT_FALSE(contains(msg, "meta.json") || contains(msg, "train.bin")) << msg;
  fs::remove_all(dir / "old");
  for (const char* f : {"train.bin", "val.bin", "meta.json"}) fs::remove(dir / (std::string("data/wiki/") + f));
  for (const auto& e : fs::recursive_directory_iterator(dir.str()))
    EXPECT_FALSE(e.path().extension() == ".bin" || e.path().extension() == ".tmp" ||
                 e.path().filename() == "meta.json") << e.path();
}

// The files of the dataset being replaced are left out silently: an interrupted run's
// staged meta.json.tmp (text) directly in the output directory is no document.
TEST(Prepare, LeavesOutTheReplacedDatasetsFilesInsideTheOutput) {
  TempDir dir("prepare");
  test::write_file(dir / "data/a.txt", kDocA);
  test::write_file(dir / "data/ds/meta.json.tmp", "{\"format\": \"meshtrain-dataset\"}\n");
  PrepareOptions o;
  o.output = dir / "data/ds";
  o.inputs = {o.output};  // nothing else: the message says why none is used
  const std::string msg = user_error([&] { prepare(o); });
  EXPECT_TRUE(contains(msg, "the 1 found are files of the dataset in --output " + o.output)) << msg;
  o.inputs = {dir / "data"};
  const PrepareSummary s = prepare(o);
  EXPECT_EQ(s.files, std::vector<std::string>{dir / "data/a.txt"});
  EXPECT_NO_THROW(Dataset::open(o.output));
}

// Another tool's train.bin/val.bin/meta.json in --output (nanoGPT's prepare.py writes the
// first two): refused before anything is written, every one named; an earlier meshtrain
// dataset there is replaced as before (IsDeterministicAndOverwrites).
TEST(PrepareErrors, AnotherToolsDatasetFilesInTheOutputAreRefused) {
  TempDir dir("prepare");
  test::write_file(dir / "in/a.txt", kDocA);
  const std::string nanogpt(4096, '\x11');  // raw uint16 ids, no header
  test::write_file(dir / "owt/train.bin", nanogpt);
  test::write_file(dir / "owt/val.bin", nanogpt);
  test::write_file(dir / "owt/meta.json", "{\"vocab_size\": 50257}\n");
  test::write_file(dir / "owt/notes.txt", "mine\n");
  PrepareOptions o;
  o.inputs = {dir / "in"};
  o.output = dir / "owt";
  std::string msg = user_error([&] { prepare(o); });
  EXPECT_TRUE(contains(msg, "the output directory " + o.output + " holds files that meshtrain did not write")) << msg;
  EXPECT_TRUE(contains(msg, dir / "owt/train.bin" + " (it does not start with 'MTTOKENS')")) << msg;
  EXPECT_TRUE(contains(msg, dir / "owt/val.bin" + " (it does not start with 'MTTOKENS')")) << msg;
  EXPECT_TRUE(contains(msg, dir / "owt/meta.json" + " (no \"format\": \"meshtrain-dataset\")")) << msg;
  EXPECT_TRUE(contains(msg, "choose a new or empty --output, or move them away")) << msg;
  EXPECT_FALSE(contains(msg, "notes.txt")) << msg;
  for (const std::string& f : {"train.bin", "val.bin"}) EXPECT_EQ(test::read_file(dir / ("owt/" + f)), nanogpt);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir / "owt"), fs::directory_iterator()), 4);  // no temporaries
  // With val.bin alone foreign: still refused, that file named.
  fs::remove(dir / "owt/train.bin");
  fs::remove(dir / "owt/meta.json");
  msg = user_error([&] { prepare(o); });
  EXPECT_TRUE(contains(msg, "owt/val.bin (it does not start with 'MTTOKENS')")) << msg;
  EXPECT_FALSE(contains(msg, "train.bin")) << msg;
  // A meshtrain dataset with a foreign file under one of a row dataset's names beside it.
  fs::remove(dir / "owt/val.bin");
  prepare(o);
  test::write_file(dir / "owt/train.docs", "not a document-boundary file");
  msg = user_error([&] { prepare(o); });
  EXPECT_TRUE(contains(msg, "owt/train.docs (it does not start with 'MTLDOCS1')")) << msg;
  EXPECT_FALSE(contains(msg, "train.bin")) << msg;
  // meshtrain's own files, of every format, are replaced.
  fs::remove(dir / "owt/train.docs");
  o.pack = PackMode::On;
  o.seq_len = 16;
  EXPECT_NO_THROW(prepare(o));
  o.pack = PackMode::Auto;
  o.seq_len = 0;
  EXPECT_NO_THROW(prepare(o));
  EXPECT_NO_THROW(Dataset::open(o.output));
}

TEST(Prepare, ZeroValFractionGivesEmptyVal) {
  TempDir dir("prepare");
  make_corpus(dir);
  PrepareOptions o;
  o.inputs = {dir / "corpus/a.txt"};
  o.output = dir / "out";
  o.val_fraction = 0;
  const PrepareSummary s = prepare(o);
  EXPECT_EQ(s.val_tokens, 0u);
  EXPECT_EQ(s.train_tokens, kDocA.size() + 1);
  const Dataset d = Dataset::open(o.output);
  EXPECT_EQ(d.val->size(), 0u);
  EXPECT_EQ(fs::file_size(dir / "out/val.bin"), kTokenFileHeaderBytes);
}

TEST(Prepare, ValSplitPoint) {
  EXPECT_EQ(val_split_point("abc\ndef\n", 0.0), 8u);
  EXPECT_EQ(val_split_point("", 0.5), 0u);
  // The nearest line start: nominal 6 ("abcd\ne|fgh\nij\n") -> 5, nominal 9 -> 10.
  EXPECT_EQ(val_split_point("abcd\nefgh\nij\n", 0.5), 5u);
  EXPECT_EQ(val_split_point("abcd\nefgh\nij\n", 0.3), 10u);
  // A trailing newline is not an inner line start: nominal 11 in the last line -> 10.
  EXPECT_EQ(val_split_point("abcd\nefgh\nijklm\n", 0.3), 10u);
  // Already at a line start.
  EXPECT_EQ(val_split_point("abcd\nefgh\n", 0.5), 5u);
  // No line starts before the last byte: the nominal cut, moved off a UTF-8 continuation.
  EXPECT_EQ(val_split_point("abcdefghij", 0.25), 7u);
  const std::string u = "aaaaaaa\xc3\xa9zz";  // cut floor(11 * 0.75) = 8 lands inside é (bytes 7, 8)
  EXPECT_EQ(val_split_point(u, 0.25), 9u);
}

TEST(TextFiles, CollectSortsDedupsAndSurvivesLoops) {
  TempDir dir("textfiles");
  make_corpus(dir);
  const std::vector<std::string> files = collect_input_files({dir / "corpus"});
  EXPECT_EQ(files, (std::vector<std::string>{dir / "corpus/a.txt", dir / "corpus/binary", dir / "corpus/empty.txt",
                                             dir / "corpus/latin1.txt", dir / "corpus/sub/b.md"}));
  EXPECT_TRUE(contains(user_error([&] { collect_input_files({dir / "missing"}); }), "does not exist"));
}

TEST(TextFiles, Utf8Validation) {
  EXPECT_TRUE(utf8::valid("plain ascii"));
  EXPECT_TRUE(utf8::valid("é 日本 🙂"));
  EXPECT_FALSE(utf8::valid("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(utf8::valid("\xe0\x80\xaf"));      // overlong
  EXPECT_FALSE(utf8::valid("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(utf8::valid("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(utf8::valid("\xe2\x82"));          // truncated
  EXPECT_FALSE(utf8::valid("\x80"));              // lone continuation
  EXPECT_EQ(text_rejection("ok\n"), "");
  EXPECT_EQ(text_rejection("\xed\xa0\x80"), "is not valid UTF-8");
}

TEST(PrepareErrors, NoInputFiles) {
  TempDir dir("prepare");
  PrepareOptions o;
  o.output = dir / "out";
  EXPECT_TRUE(contains(user_error([&] { prepare(o); }), "no input"));
  fs::create_directories(dir / "emptydir");
  test::write_file(dir / "emptydir/x.dat", "index");
  o.inputs = {dir / "emptydir"};
  EXPECT_TRUE(contains(user_error([&] { prepare(o); }), "no input files found"));
  o.inputs = {dir / "nope"};
  EXPECT_TRUE(contains(user_error([&] { prepare(o); }), "does not exist"));
  EXPECT_FALSE(fs::exists(dir / "out"));
}

TEST(PrepareErrors, EmptyCorpusLeavesNoOutput) {
  TempDir dir("prepare");
  test::write_file(dir / "in/empty.txt", "");
  test::write_file(dir / "in/bin", std::string("\0\0", 2));
  PrepareOptions o;
  o.inputs = {dir / "in"};
  o.output = dir / "out";
  const std::string msg = user_error([&] { prepare(o); });
  EXPECT_TRUE(contains(msg, "corpus is empty")) << msg;
  EXPECT_TRUE(contains(msg, "empty.txt: empty")) << msg;
  EXPECT_FALSE(fs::exists(dir / "out"));  // created for the temporaries, then removed
  // An existing directory is kept, without temporaries.
  fs::create_directories(dir / "out");
  user_error([&] { prepare(o); });
  EXPECT_TRUE(fs::is_empty(dir / "out"));
}

TEST(PrepareErrors, OutputNotWritable) {
  TempDir dir("prepare");
  test::write_file(dir / "in/a.txt", kDocA);
  PrepareOptions o;
  o.inputs = {dir / "in"};
  o.output = dir / "in/a.txt/out";  // under a regular file: cannot be created, even by root
  EXPECT_TRUE(contains(user_error([&] { prepare(o); }), "cannot create the output directory"));
  o.output = dir / "in/a.txt";
  EXPECT_TRUE(contains(user_error([&] { prepare(o); }), "is not a directory"));
}

TEST(PrepareErrors, BadOptions) {
  TempDir dir("prepare");
  test::write_file(dir / "in/a.txt", kDocA);
  PrepareOptions o;
  o.inputs = {dir / "in"};
  o.output = dir / "out";
  o.val_fraction = 1.0;
  EXPECT_TRUE(contains(user_error([&] { prepare(o); }), "--val_fraction must be in [0, 1)"));
  o.val_fraction = 0.1;
  o.tokenizer = "bpe42";
  EXPECT_TRUE(contains(user_error([&] { prepare(o); }), "neither 'byte' nor an existing file"));
  EXPECT_FALSE(fs::exists(dir / "out"));
}

TEST(DatasetErrors, MissingDirectoryOrFilesSayRunPrepare) {
  TempDir dir("dataset");
  std::string msg = user_error([&] { Dataset::open(dir / "nope"); });
  EXPECT_TRUE(contains(msg, dir / "nope") && contains(msg, "meshtrain prepare")) << msg;
  test::write_file(dir / "in/a.txt", kDocA);
  PrepareOptions o;
  o.inputs = {dir / "in"};
  o.output = dir / "ds";
  prepare(o);
  fs::remove(dir / "ds/meta.json");
  msg = user_error([&] { Dataset::open(dir / "ds"); });
  EXPECT_TRUE(contains(msg, "meta.json is missing") && contains(msg, "meshtrain prepare")) << msg;
}

TEST(DatasetErrors, InconsistentMeta) {
  TempDir dir("dataset");
  test::write_file(dir / "in/a.txt", kDocA);
  PrepareOptions o;
  o.inputs = {dir / "in"};
  o.output = dir / "ds";
  const PrepareSummary s = prepare(o);
  const std::string meta = test::read_file(dir / "ds/meta.json");
  std::string edited = meta;
  const std::string key = "\"train_tokens\": " + std::to_string(s.train_tokens);
  edited.replace(edited.find(key), key.size(), "\"train_tokens\": 5");
  test::write_file(dir / "ds/meta.json", edited);
  EXPECT_TRUE(contains(user_error([&] { Dataset::open(dir / "ds"); }), "but " + (dir / "ds/meta.json") + " says 5"));
  test::write_file(dir / "ds/meta.json", "{\"tokenizer\": ");
  EXPECT_TRUE(contains(user_error([&] { Dataset::open(dir / "ds"); }), "is not valid JSON"));
}

TEST(Dataset, MetaJsonRoundTrip) {
  DatasetMeta m;
  m.tokenizer = "byte";
  m.vocab_size = 257;
  m.eot_id = 256;
  m.train_tokens = (std::uint64_t{1} << 60) + 3;  // beyond double precision
  m.val_tokens = 7;
  m.val_fraction = 0.05;
  m.val_split = "rule \"quoted\"\n";
  m.source_files = {"a \\ b.txt", "c\td"};
  m.train_entropy_bits = 4.25;
  m.meshtrain_version = "0.1.0";
  const DatasetMeta r = meta_from_json(meta_to_json(m), "meta.json");
  EXPECT_EQ(r.train_tokens, m.train_tokens);
  EXPECT_EQ(r.val_split, m.val_split);
  EXPECT_EQ(r.source_files, m.source_files);
  EXPECT_EQ(r.val_fraction, m.val_fraction);
  EXPECT_EQ(r.train_entropy_bits, m.train_entropy_bits);
}

// meta.json's chat_system: the system message prepare rendered records without one with; ""
// (none) is recorded, absent (a dataset prepared before it was recorded) reads as unknown.
TEST(Dataset, MetaJsonChatSystem) {
  DatasetMeta m;
  m.tokenizer = "byte";
  m.vocab_size = 257;
  m.eot_id = 256;
  m.val_split = "rule";
  m.meshtrain_version = "0.1.0";
  m.data_format = "chat";
  m.row_tokens = 33;
  m.chat_template = "chatml";
  for (const std::string system : {"", "Answer in one word.\n\"Quoted\" \xe6\x97\xa5"}) {
    m.chat_system = system;
    const std::string text = meta_to_json(m);
    EXPECT_TRUE(contains(text, "\"chat_system\"")) << text;
    EXPECT_EQ(meta_from_json(text, "meta.json").chat_system, std::optional<std::string>(system));
  }
  m.chat_system.reset();
  const std::string older = meta_to_json(m);
  EXPECT_FALSE(contains(older, "chat_system")) << older;
  EXPECT_FALSE(meta_from_json(older, "meta.json").chat_system.has_value());
}

TEST(Dataset, RandomAndLoad) {
  const Dataset d = Dataset::load(DataSource::random(), 512, 9);
  EXPECT_EQ(d.train->vocab_size(), 512);
  EXPECT_EQ(d.meta.tokenizer, "random");
  std::vector<std::int32_t> a(64), b(64);
  d.train->read(0, 64, a.data());
  d.val->read(0, 64, b.data());
  EXPECT_NE(a, b);  // val is another stream
  EXPECT_TRUE(contains(user_error([] { Dataset::load(DataSource::directory(""), 512, 9); }), "data.dir is not set"));
}

TEST(Dataset, CheckVocab) {
  check_vocab(257, 257);
  check_vocab(257, 320);
  EXPECT_EQ(user_error([] { check_vocab(50257, 32000); }).rfind(
                "the dataset's vocabulary (50257) is larger than model.vocab_size (32000)", 0),
            0u);
}

TEST(Dataset, LoadRefusesAVocabularyLargerThanTheModels) {
  TempDir dir("dataset");
  make_corpus(dir);
  PrepareOptions o;
  o.inputs = {dir / "corpus"};
  o.output = dir / "ds";
  prepare(o);
  EXPECT_EQ(Dataset::load(DataSource::directory(o.output), 257, 1).meta.vocab_size, 257);
  EXPECT_EQ(Dataset::load(DataSource::directory(o.output), 264, 1).meta.vocab_size, 257);
  EXPECT_EQ(user_error([&] { Dataset::load(DataSource::directory(o.output), 10, 1); }).rfind(
                "the dataset's vocabulary (257) is larger than model.vocab_size (10)", 0),
            0u);
}

TEST(Dataset, SamplersReadThePreparedTokens) {
  TempDir dir("dataset");
  make_corpus(dir);
  PrepareOptions o;
  o.inputs = {dir / "corpus"};
  o.output = dir / "ds";
  o.val_fraction = 0.3;
  prepare(o);
  const Dataset d = Dataset::open(o.output);
  const int T = 16;
  const std::string text = kDocA + kDocB;
  Sampler train(d.train, T, 11);
  std::vector<std::int32_t> in(4 * T), tg(4 * T), ref(T + 1);
  train.fill(1000, 4, in.data(), tg.data());
  for (int j = 0; j < 4; ++j) {
    d.train->read(train.window_start(1000 + static_cast<std::uint64_t>(j)), T + 1, ref.data());
    EXPECT_TRUE(std::equal(ref.begin(), ref.end() - 1, in.begin() + j * T));
    EXPECT_TRUE(std::equal(ref.begin() + 1, ref.end(), tg.begin() + j * T));
  }
  ASSERT_TRUE(has_window(*d.val, T));
  EvalSampler val(d.val, T);
  val.fill(0, 1, in.data(), tg.data());
  d.val->read(0, T + 1, ref.data());
  EXPECT_TRUE(std::equal(ref.begin(), ref.end() - 1, in.begin()));
  EXPECT_TRUE(std::equal(ref.begin() + 1, ref.end(), tg.begin()));
}
