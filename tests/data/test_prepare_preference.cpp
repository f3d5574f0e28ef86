// prepare --format preference (issue 32): pairs as adjacent rows with masks on the final
// responses, refused for supervised training, validated on load; and the seq_len message of
// train/eval naming what a row holds (issue 30: packed rows are not "one example per row").
// Byte tokenizer + the ChatML template, so every expected row is the rendered text's bytes.
#include <gtest/gtest.h>

#include <filesystem>

#include "data_test_util.hpp"
#include "core/error.hpp"
#include "data/dataset.hpp"
#include "data/prepare.hpp"
#include "data/sampler.hpp"
#include "data/tokenizer.hpp"

using namespace meshtrain;
using namespace meshtrain::data;
using test::TempDir;

namespace {

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

constexpr int kSeq = 255, kRow = kSeq + 1;

PrepareOptions preference_options(const TempDir& dir, const std::string& jsonl) {
  test::write_file(dir / "in/pairs.jsonl", jsonl);
  PrepareOptions o;
  o.inputs = {dir / "in/pairs.jsonl"};
  o.output = dir / "ds";
  o.format = "preference";
  o.chat_template = "chatml";
  o.seq_len = kSeq;
  o.val_fraction = 0;
  return o;
}

// One row of a split: its tokens and mask bytes.
struct Row {
  std::vector<std::int32_t> ids;
  std::vector<std::uint8_t> mask;
};
Row read_row(const Dataset& d, std::uint64_t r) {
  Row row{std::vector<std::int32_t>(kRow), std::vector<std::uint8_t>(kRow)};
  d.train->read(r * kRow, kRow, row.ids.data());
  d.train_mask->read(r * kRow, kRow, row.mask.data());
  return row;
}

// What the row of `text` (rendered conversation) must be: its bytes, the mask on
// [trainable_begin, trainable_end), then padding (end-of-text 256, mask 0).
Row expected_row(const std::string& text, std::size_t trainable_begin, std::size_t trainable_end) {
  Row row{std::vector<std::int32_t>(kRow, 256), std::vector<std::uint8_t>(kRow, 0)};
  for (std::size_t i = 0; i < text.size(); ++i) {
    row.ids[i] = static_cast<unsigned char>(text[i]);
    row.mask[i] = i >= trainable_begin && i < trainable_end ? 1 : 0;
  }
  return row;
}

}  // namespace

TEST(PreparePreference, PairsAreAdjacentRowsWithMasksOnTheFinalResponses) {
  TempDir dir("pref");
  // A text prompt with string responses; a conversation (an earlier assistant turn: context,
  // not trained on) with responses as a message and as a list of one message.
  const std::string jsonl =
      "{\"prompt\": \"2+2?\", \"chosen\": \"4\", \"rejected\": \"5\"}\n"
      "\n"
      "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}, "
      "{\"role\": \"user\", \"content\": \"name?\"}], \"chosen\": {\"role\": \"assistant\", \"content\": \"Mesh\"}, "
      "\"rejected\": [{\"role\": \"assistant\", \"content\": \"no\"}]}\n";
  const PrepareSummary s = prepare(preference_options(dir, jsonl));
  EXPECT_EQ(s.train_examples, 2u);
  EXPECT_EQ(s.train_rows, 4u);
  const Dataset d = Dataset::open(dir / "ds");
  EXPECT_EQ(d.meta.data_format, "preference");
  EXPECT_EQ(d.meta.train_rows, 4u);
  EXPECT_EQ(d.train->size(), 4u * kRow);

  const std::string p0 = "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n";
  const std::string p1 =
      "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n<|im_start|>user\nname?<|im_end|>\n"
      "<|im_start|>assistant\n";
  const std::string end = "<|im_end|>";
  const std::pair<std::string, std::string> rows[4] = {{p0, "4"}, {p0, "5"}, {p1, "Mesh"}, {p1, "no"}};
  for (std::uint64_t r = 0; r < 4; ++r) {
    const auto& [prompt, response] = rows[r];
    const Row want = expected_row(prompt + response + end + "\n", prompt.size(), prompt.size() + response.size() + end.size());
    const Row got = read_row(d, r);
    EXPECT_EQ(got.ids, want.ids) << "row " << r;
    EXPECT_EQ(got.mask, want.mask) << "row " << r << ": the mask is on the final response and its <|im_end|> only";
  }
  // meta.json says how the rows pair up.
  EXPECT_TRUE(contains(test::read_file(dir / "ds/meta.json"), kPreferenceRowLayout));
}

TEST(PreparePreference, OnlyTheDpoObjectiveTakesIt) {
  TempDir dir("pref");
  prepare(preference_options(dir, "{\"prompt\": \"a\", \"chosen\": \"b\", \"rejected\": \"c\"}\n"));
  const Dataset d = Dataset::open(dir / "ds");
  for (const char* command : {"train", "eval"}) {
    const std::string msg = user_error([&] { check_dataset_rows(d, kSeq, command); });
    EXPECT_TRUE(contains(msg, std::string(command) + ": data.dir=" + (dir / "ds") + " is a preference dataset") &&
                contains(msg, "would count the rejected responses as targets") &&
                contains(msg, "set train.objective=dpo"))
        << msg;
    // The objective that reads the pairs accepts it, and refuses anything else.
    EXPECT_NO_THROW(check_dataset_rows(d, kSeq, command, Objective::Dpo));
    const std::string not_pairs =
        user_error([&] { check_dataset_rows(Dataset::random(300, 1), kSeq, command, Objective::Dpo); });
    EXPECT_TRUE(contains(not_pairs, std::string(command) + ": train.objective=dpo needs a dataset of preference pairs"))
        << not_pairs;
  }
}

TEST(PreparePreference, LoadRefusesABrokenPairLayout) {
  TempDir dir("pref");
  const PrepareOptions o = preference_options(dir, "{\"prompt\": \"a\", \"chosen\": \"b\", \"rejected\": \"c\"}\n");
  prepare(o);
  const std::string meta = test::read_file(dir / "ds/meta.json");
  auto edited = [&](const std::string& from, const std::string& to) {
    std::string m = meta;
    const std::size_t at = m.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    m.replace(at, from.size(), to);
    test::write_file(dir / "ds/meta.json", m);
  };
  // Rows that are not two per pair.
  edited("\"train_rows\": 2", "\"train_rows\": 3");
  std::string msg = user_error([&] { Dataset::open(dir / "ds"); });
  EXPECT_TRUE(contains(msg, "two rows per pair") && contains(msg, "train_rows 3 for 1 pairs")) << msg;
  // Another layout.
  edited("row 2i is the chosen", "row 2i is the rejected");
  msg = user_error([&] { Dataset::open(dir / "ds"); });
  EXPECT_TRUE(contains(msg, "\"row_layout\" is")) << msg;
  // Two pairs said, the rows of one.
  edited("\"train_examples\": 1", "\"train_examples\": 2");
  msg = user_error([&] { Dataset::open(dir / "ds"); });
  EXPECT_TRUE(contains(msg, "two rows per pair")) << msg;
  test::write_file(dir / "ds/meta.json", meta);
  EXPECT_NO_THROW(Dataset::open(dir / "ds"));
}

TEST(PreparePreference, BadRecordsAreOneErrorNamingTheLineAndWriteNothing) {
  const std::pair<std::string, std::string> cases[] = {
      {"{\"prompt\": \"a\", \"chosen\": \"b\"}", "the record has no \"rejected\" field"},
      {"{\"prompt\": \"a\", \"chosen\": \"\", \"rejected\": \"c\"}", "\"chosen\" is an empty response"},
      {"{\"prompt\": \"a\", \"chosen\": \"b\", \"rejected\": \"b\"}", "\"chosen\" and \"rejected\" are the same response"},
      {"{\"prompt\": \"a\", \"chosen\": {\"role\": \"system\", \"content\": \"b\"}, \"rejected\": \"c\"}",
       "\"chosen\" has role 'system'"},
      {"{\"prompt\": \"" + std::string(300, 'x') + "\", \"chosen\": \"b\", \"rejected\": \"c\"}", "the prompt is"},
      {"{\"prompt\": \"a\", \"chosen\": \"b\", \"rejected\": \"" + std::string(300, 'y') + "\"}",
       "the prompt with the rejected response is"},
      {"{\"messages\": [{\"role\": \"assistant\", \"content\": \"b\"}], \"chosen\": \"b\", \"rejected\": \"c\"}",
       "the last of \"messages\" has role 'assistant'"},
      {"{\"chosen\": \"b\", \"rejected\": \"c\"}", "the record has no \"prompt\" and no \"messages\""},
      {"{\"prompt\": 3, \"chosen\": \"b\", \"rejected\": \"c\"}", "the record: \"prompt\" must be a string, not number"},
  };
  for (const auto& [line, want] : cases) {
    TempDir dir("pref");
    const PrepareOptions o = preference_options(dir, "{\"prompt\": \"ok\", \"chosen\": \"b\", \"rejected\": \"c\"}\n" + line + "\n");
    const std::string msg = user_error([&] { prepare(o); });
    EXPECT_TRUE(contains(msg, "pairs.jsonl:2: " + want)) << msg;
    EXPECT_FALSE(std::filesystem::exists(dir / "ds")) << line;
  }
  TempDir dir("pref");
  PrepareOptions o = preference_options(dir, "{\"prompt\": \"a\", \"chosen\": \"b\", \"rejected\": \"c\"}\n");
  o.pack = PackMode::On;
  EXPECT_TRUE(contains(user_error([&] { prepare(o); }), "--pack does not apply to --format preference"));
}

TEST(DatasetRows, SeqLenMessageSaysWhatARowHolds) {
  TempDir dir("rows");
  test::write_file(dir / "in/chat.jsonl",
                   "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": "
                   "\"hello\"}]}\n{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", "
                   "\"content\": \"b\"}]}\n");
  PrepareOptions o;
  o.inputs = {dir / "in/chat.jsonl"};
  o.format = "chat";
  o.chat_template = "chatml";
  o.seq_len = 200;
  o.val_fraction = 0;
  o.output = dir / "padded";
  o.pack = PackMode::Off;
  prepare(o);
  o.output = dir / "packed";
  o.pack = PackMode::On;
  prepare(o);
  const Dataset padded = Dataset::open(dir / "padded"), packed = Dataset::open(dir / "packed");
  EXPECT_NO_THROW(check_dataset_rows(padded, 200, "train"));
  EXPECT_NO_THROW(check_dataset_rows(packed, 200, "train"));
  std::string msg = user_error([&] { check_dataset_rows(padded, 64, "train"); });
  EXPECT_TRUE(contains(msg, "holds one example per row of 201 tokens (prepared with --seq_len 200): set "
                            "train.seq_len=200, or prepare the dataset again with --seq_len 64"))
      << msg;
  msg = user_error([&] { check_dataset_rows(packed, 64, "eval"); });
  EXPECT_TRUE(contains(msg, "holds packed rows of 201 tokens, several examples each (prepared with --seq_len 200 "
                            "--pack): set train.seq_len=200, or prepare the dataset again with --seq_len 64 --pack"))
      << msg;
  EXPECT_FALSE(contains(msg, "one example per row")) << msg;
  // A text dataset (a token stream) has no rows to match.
  EXPECT_NO_THROW(check_dataset_rows(Dataset::random(300, 1), 64, "train"));
}

TEST(PrepareDefaultPacking, PacksWhenExamplesShareRowsElseOnePerRow) {
  // Two chat examples of 68 and 63 bytes (byte tokenizer): at --seq_len 200 both fit one row,
  // so the default packs them (as --pack does); at --seq_len 100 no two fit, so the default
  // writes the rows of --pack=false, unpacked.
  TempDir dir("defpack");
  test::write_file(dir / "in/chat.jsonl",
                   "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": "
                   "\"hello\"}]}\n{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", "
                   "\"content\": \"b\"}]}\n");
  PrepareOptions o;
  o.inputs = {dir / "in/chat.jsonl"};
  o.format = "chat";
  o.chat_template = "chatml";
  o.val_fraction = 0;
  auto run = [&](const std::string& name, int seq_len, PackMode mode) {
    o.output = dir / name;
    o.seq_len = seq_len;
    o.pack = mode;
    return prepare(o);
  };
  const PrepareSummary wide = run("wide", 200, PackMode::Auto);
  EXPECT_TRUE(wide.packed);
  EXPECT_EQ(wide.train_rows, 1u);
  EXPECT_TRUE(contains(format_summary(wide), "packing is the default when examples share rows"));
  run("wide_on", 200, PackMode::On);
  for (const char* f : {"train.bin", "train.mask", "train.docs"})
    EXPECT_EQ(test::read_file(dir / (std::string("wide/") + f)), test::read_file(dir / (std::string("wide_on/") + f))) << f;
  const PrepareSummary narrow = run("narrow", 100, PackMode::Auto);
  EXPECT_FALSE(narrow.packed);
  EXPECT_EQ(narrow.train_rows, 2u);
  EXPECT_TRUE(contains(format_summary(narrow), "not packed: no two examples fit a row")) << format_summary(narrow);
  EXPECT_FALSE(std::filesystem::exists(dir / "narrow/train.docs"));
  run("narrow_off", 100, PackMode::Off);
  for (const char* f : {"train.bin", "train.mask", "meta.json"})
    EXPECT_EQ(test::read_file(dir / (std::string("narrow/") + f)), test::read_file(dir / (std::string("narrow_off/") + f)))
        << f;
  const PrepareSummary off = run("wide_off", 200, PackMode::Off);
  EXPECT_FALSE(off.packed);
  EXPECT_EQ(off.train_rows, 2u);
}
