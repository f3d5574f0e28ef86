// The resume-settings record (train/resume_settings): the "key = value" text stored in every
// checkpoint reads back as written, and a resume is compared key by key -- a change of a
// key that shapes the trajectory is a conflict naming both values, train.steps and
// data.chat_system are only a change, and a key one side lacks (a record of another meshtrain version) is not compared.
// The end-to-end refusals (train with another seq_len, ...) are tests/train/resume_settings.sh.
#include <gtest/gtest.h>

#include <string>

#include "train/resume_settings.hpp"

using namespace meshtrain;
using train::RunSettings;

namespace {

RunSettings sample() {
  return {{"train.seq_len", "32"},
          {"train.global_batch_tokens", "256"},
          {"train.seed", "1234"},
          {"data.dir", "tokens 16384, crc32c 0x1a2b3c4d"},
          {"train.lr", "0.00029999999999999997"},
          {"train.steps", "400"}};
}

TEST(ResumeSettings, RecordRoundTrips) {
  const RunSettings s = sample();
  const std::string text = train::settings_record(s);
  EXPECT_EQ(text.substr(0, 21), "train.seq_len = 32\ntr");
  EXPECT_EQ(train::parse_settings_record(text), s);
  // A value may itself hold " = " (only the first one separates key and value).
  const RunSettings odd = {{"data.dir", "a = b = c"}, {"train.seed", ""}};
  EXPECT_EQ(train::parse_settings_record(train::settings_record(odd)), odd);
  // The last line without its newline still reads; lines without " = " are skipped.
  EXPECT_EQ(train::parse_settings_record("train.seed = 7\ngarbage\n\ntrain.steps = 3"),
            (RunSettings{{"train.seed", "7"}, {"train.steps", "3"}}));
  EXPECT_TRUE(train::parse_settings_record("").empty());
}

TEST(ResumeSettings, OnlyStepsAndTheRecordedSystemMessageMayChange) {
  EXPECT_TRUE(train::may_change_at_resume("train.steps"));
  // Another system message with the same tokens (every record has its own) trains alike.
  EXPECT_TRUE(train::may_change_at_resume("data.chat_system"));
  for (const char* k : {"train.seq_len", "train.seed", "data.dir", "train.lr", "train.precision", "model.init_std"})
    EXPECT_FALSE(train::may_change_at_resume(k)) << k;
}

TEST(ResumeSettings, ConflictsNameKeyAndBothValues) {
  const RunSettings recorded = sample();
  RunSettings now = sample();
  EXPECT_TRUE(train::resume_conflicts(recorded, now).empty());
  EXPECT_TRUE(train::resume_changes(recorded, now).empty());

  now[0].second = "16";     // train.seq_len
  now[2].second = "99";     // train.seed
  now[5].second = "800";    // train.steps
  const auto conflicts = train::resume_conflicts(recorded, now);
  ASSERT_EQ(conflicts.size(), 2u);
  EXPECT_EQ(conflicts[0], "train.seq_len: 32 in the checkpoint, 16 in this run");
  EXPECT_EQ(conflicts[1], "train.seed: 1234 in the checkpoint, 99 in this run");
  const auto changes = train::resume_changes(recorded, now);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0], "train.steps: 400 in the checkpoint, 800 in this run");
}

TEST(ResumeSettings, KeysOnOneSideOnlyAreNotCompared) {
  // An older checkpoint without train.lr, a newer one with a key this version lacks.
  RunSettings recorded = sample();
  recorded.erase(recorded.begin() + 4);
  recorded.emplace_back("train.future_key", "x");
  RunSettings now = sample();
  now[4].second = "0.1";  // train.lr: not in the record, so not a conflict
  EXPECT_TRUE(train::resume_conflicts(recorded, now).empty());
  // Order does not matter: the comparison is by key.
  RunSettings shuffled(now.rbegin(), now.rend());
  EXPECT_TRUE(train::resume_conflicts(recorded, shuffled).empty());
  shuffled.back().second = "64";  // train.seq_len, now last
  EXPECT_EQ(train::resume_conflicts(recorded, shuffled).size(), 1u);
}

}  // namespace
