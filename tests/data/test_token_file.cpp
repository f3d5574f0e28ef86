// Token file format: write/read round trips and one test per corrupt-file case.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "data_test_util.hpp"
#include "core/error.hpp"
#include "data/token_file.hpp"

using namespace meshtrain;
using namespace meshtrain::data;
using test::TempDir;

namespace {

std::string write_tokens(const std::string& path, std::int64_t vocab, const std::vector<std::int32_t>& ids) {
  TokenFileWriter w(path, vocab);
  w.append(ids.data(), ids.size());
  w.close();
  return path;
}

// A valid file of `n` tokens (ids i % vocab), returned as bytes for corrupting.
std::string valid_bytes(const TempDir& dir, std::int64_t vocab, int n) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i % vocab);
  return test::read_file(write_tokens(dir / "valid.bin", vocab, ids));
}

// Expects TokenFile(path) to throw a UserError whose message contains the path and `what`.
void expect_rejected(const std::string& path, const std::string& what) {
  try {
    TokenFile f(path);
    FAIL() << "no error for " << path;
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << "expected '" << what << "' in: " << msg;
  }
}

}  // namespace

TEST(TokenFile, RoundTripUint16) {
  TempDir dir("tokfile");
  std::vector<std::int32_t> ids(1000);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 7919) % 257);
  const std::string path = write_tokens(dir / "a.bin", 257, ids);
  EXPECT_EQ(std::filesystem::file_size(path), kTokenFileHeaderBytes + 2 * ids.size());
  TokenFile f(path);
  EXPECT_EQ(f.size(), ids.size());
  EXPECT_EQ(f.vocab_size(), 257);
  EXPECT_EQ(f.header().bytes_per_token, 2u);
  std::vector<std::int32_t> back(ids.size());
  f.read(0, static_cast<int>(ids.size()), back.data());
  EXPECT_EQ(back, ids);
  std::vector<std::int32_t> mid(10);
  f.read(500, 10, mid.data());
  EXPECT_TRUE(std::equal(mid.begin(), mid.end(), ids.begin() + 500));
}

TEST(TokenFile, HeaderBytesAreLittleEndian) {
  TempDir dir("tokfile");
  const std::string bytes = test::read_file(write_tokens(dir / "a.bin", 300, {1, 299, 258}));
  ASSERT_EQ(bytes.size(), 64u + 6u);
  EXPECT_EQ(bytes.substr(0, 8), "MTTOKENS");
  EXPECT_EQ(bytes[8], 1);    // version
  EXPECT_EQ(bytes[12], 2);   // bytes per token
  EXPECT_EQ(static_cast<unsigned char>(bytes[16]), 300 & 0xff);
  EXPECT_EQ(bytes[17], 1);   // 300 = 0x012c
  EXPECT_EQ(bytes[24], 3);   // count
  for (std::size_t i = 32; i < 64; ++i) EXPECT_EQ(bytes[i], 0) << i;
  EXPECT_EQ(static_cast<unsigned char>(bytes[66]), 299 & 0xff);
  EXPECT_EQ(bytes[67], 1);
}

TEST(TokenFile, LargeVocabUsesUint32) {
  TempDir dir("tokfile");
  EXPECT_EQ(bytes_per_token_for(65536), 2u);
  EXPECT_EQ(bytes_per_token_for(65537), 4u);
  const std::vector<std::int32_t> ids = {0, 65535, 65536, 100276};
  TokenFile f(write_tokens(dir / "a.bin", 100277, ids));
  EXPECT_EQ(f.header().bytes_per_token, 4u);
  std::vector<std::int32_t> back(4);
  f.read(0, 4, back.data());
  EXPECT_EQ(back, ids);
}

TEST(TokenFile, EmptyFileIsValid) {
  TempDir dir("tokfile");
  TokenFile f(write_tokens(dir / "val.bin", 257, {}));
  EXPECT_EQ(f.size(), 0u);
  f.read(0, 0, nullptr);
}

TEST(TokenFile, ReadOutsideThrows) {
  TempDir dir("tokfile");
  TokenFile f(write_tokens(dir / "a.bin", 257, {1, 2, 3}));
  std::int32_t out[4];
  EXPECT_THROW(f.read(1, 3, out), std::out_of_range);
  EXPECT_THROW(f.read(4, 0, out), std::out_of_range);
}

TEST(TokenFile, WriterRejectsOutOfVocabIds) {
  TempDir dir("tokfile");
  TokenFileWriter w(dir / "a.bin", 257);
  const std::int32_t bad[] = {257};
  EXPECT_THROW(w.append(bad, 1), std::out_of_range);
}

TEST(TokenFileErrors, MissingFile) {
  TempDir dir("tokfile");
  expect_rejected(dir / "nope.bin", "cannot open");
}

TEST(TokenFileErrors, ShorterThanHeader) {
  TempDir dir("tokfile");
  test::write_file(dir / "short.bin", "MTTOKENS\x01");
  expect_rejected(dir / "short.bin", "fewer than the 64-byte header");
}

TEST(TokenFileErrors, BadMagic) {
  TempDir dir("tokfile");
  std::string b = valid_bytes(dir, 257, 10);
  b[0] = 'X';
  test::write_file(dir / "bad.bin", b);
  expect_rejected(dir / "bad.bin", "is not a meshtrain token file");
}

TEST(TokenFileErrors, UnsupportedVersion) {
  TempDir dir("tokfile");
  std::string b = valid_bytes(dir, 257, 10);
  b[8] = 2;
  test::write_file(dir / "v2.bin", b);
  expect_rejected(dir / "v2.bin", "version 2");
}

TEST(TokenFileErrors, BadBytesPerToken) {
  TempDir dir("tokfile");
  std::string b = valid_bytes(dir, 257, 10);
  b[12] = 3;
  test::write_file(dir / "w3.bin", b);
  expect_rejected(dir / "w3.bin", "bytes per token 3");
}

TEST(TokenFileErrors, VocabTooLargeForWidth) {
  TempDir dir("tokfile");
  std::string b = valid_bytes(dir, 257, 10);
  b[18] = 1;  // vocab += 65536
  test::write_file(dir / "vw.bin", b);
  expect_rejected(dir / "vw.bin", "does not fit in 2 bytes");
}

TEST(TokenFileErrors, NonzeroReservedBytes) {
  TempDir dir("tokfile");
  std::string b = valid_bytes(dir, 257, 10);
  b[40] = 7;
  test::write_file(dir / "res.bin", b);
  expect_rejected(dir / "res.bin", "must be zero");
}

TEST(TokenFileErrors, Truncated) {
  TempDir dir("tokfile");
  std::string b = valid_bytes(dir, 257, 10);
  b.resize(b.size() - 3);
  test::write_file(dir / "trunc.bin", b);
  expect_rejected(dir / "trunc.bin", "truncated");
}

TEST(TokenFileErrors, TrailingBytes) {
  TempDir dir("tokfile");
  std::string b = valid_bytes(dir, 257, 10) + "xx";
  test::write_file(dir / "long.bin", b);
  expect_rejected(dir / "long.bin", "longer than its header says");
}

TEST(TokenFileErrors, TokenIdOutsideVocab) {
  TempDir dir("tokfile");
  std::string b = valid_bytes(dir, 257, 10);
  b[b.size() - 1] = 0x7f;  // last token (always sampled) becomes >= 257
  test::write_file(dir / "oov.bin", b);
  expect_rejected(dir / "oov.bin", "not below the vocabulary size 257");
}

TEST(TokenFileErrors, EveryIdIsCheckedAsItIsRead) {
  // A file longer than the open-time sample, with an id >= vocab at a position the sample
  // skips: it opens, reads around the id succeed, a read that covers it names the file
  // and the position, for both token widths.
  for (const std::int64_t vocab : {257LL, 70000LL}) {
    TempDir dir("tokfile");
    const std::uint64_t n = 3 * TokenFile::kSampledIds;
    std::vector<std::int32_t> ids(n);
    for (std::uint64_t i = 0; i < n; ++i) ids[i] = static_cast<std::int32_t>(i % 200);
    std::string b = test::read_file(write_tokens(dir / "ok.bin", vocab, ids));
    const std::uint64_t bad = 1;  // sampled positions are k * (n - 1) / (kSampledIds - 1): 0, 3, ...
    const std::size_t width = vocab <= 65536 ? 2 : 4;
    for (std::size_t k = 0; k < width; ++k) b[kTokenFileHeaderBytes + bad * width + k] = static_cast<char>(0xff);
    test::write_file(dir / "oov.bin", b);
    TokenFile f(dir / "oov.bin");
    std::vector<std::int32_t> out(8);
    EXPECT_NO_THROW(f.read(2, 8, out.data()));
    try {
      f.read(0, 8, out.data());
      ADD_FAILURE() << "no error for the id at position " << bad;
    } catch (const UserError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(dir / "oov.bin"), std::string::npos) << msg;
      EXPECT_NE(msg.find("at position 1 is not below the vocabulary size " + std::to_string(vocab)), std::string::npos)
          << msg;
    }
  }
}

TEST(TokenFileErrors, NotARegularFile) {
  TempDir dir("tokfile");
  expect_rejected(dir.str(), "not a regular file");
}
