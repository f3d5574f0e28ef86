// DirectWriter (the asynchronous save's writes, direct_writer.hpp): whatever mix of
// O_DIRECT interiors and buffered edges a set of runs takes, the file holds exactly the
// bytes written -- runs of every length from 1 byte to several bounce buffers, at every
// alignment of file offset and source address, from two writers interleaved (two ranks
// sharing the pages at their runs' edges) -- and where the file system takes O_DIRECT the
// long runs' interiors went through it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/direct_writer.hpp"

namespace fs = std::filesystem;
using meshtrain::checkpoint::DirectWriter;

namespace {

std::string scratch(const std::string& name) {
  const fs::path d = "direct_writer_test";
  fs::create_directories(d);
  const fs::path p = d / name;
  fs::remove(p);
  return p.string();
}

/// A file of `n` zero bytes (a checkpoint's datasets are allocated before the writes).
void make_file(const std::string& path, std::size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.seekp(static_cast<std::streamoff>(n) - 1);
  out.put('\0');
}

std::vector<unsigned char> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Whether this file system accepts O_DIRECT at all (tmpfs refuses it at open).
bool direct_supported(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_DIRECT);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

struct ByteRun {
  std::uint64_t off;
  std::size_t len;
};

}  // namespace

TEST(DirectWriter, RandomRunsFromTwoWritersLandExactly) {
  const std::size_t n = 3 * DirectWriter::kBounce + 123457;  // ~12.1 MiB
  const std::string path = scratch("runs.bin");
  make_file(path, n);
  std::mt19937_64 rng(20261202);
  // The expected file image, and a source buffer holding it at a shifted address so that
  // source and file alignment differ (as a staging buffer's pieces do).
  std::vector<unsigned char> want(n);
  for (auto& b : want) b = static_cast<unsigned char>(rng());
  const std::size_t shift = 13;
  std::vector<unsigned char> src(n + shift);
  std::copy(want.begin(), want.end(), src.begin() + shift);

  // Cut [0, n) into runs: single bytes, a few bytes, sub-page, just under and over the
  // O_DIRECT threshold, and multi-bounce lengths.
  const std::size_t lengths[] = {1, 3, 4095, 4096, 4097, DirectWriter::kMinDirect - 1, DirectWriter::kMinDirect + 4096,
                                 DirectWriter::kMinDirect + 777, DirectWriter::kBounce + 5, 2 * DirectWriter::kBounce / 3};
  std::vector<ByteRun> runs;
  for (std::uint64_t at = 0; at < n;) {
    const std::size_t len = std::min<std::size_t>(lengths[rng() % std::size(lengths)], n - at);
    runs.push_back({at, len});
    at += len;
  }
  std::shuffle(runs.begin(), runs.end(), rng);

  DirectWriter a(path), b(path);
  ASSERT_EQ(a.open_error(), 0);
  ASSERT_EQ(b.open_error(), 0);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    DirectWriter& w = i % 2 ? b : a;
    ASSERT_EQ(w.write(src.data() + shift + runs[i].off, runs[i].len, runs[i].off), 0) << "run " << i;
  }
  ASSERT_EQ(a.sync(), 0);
  ASSERT_EQ(b.sync(), 0);
  ASSERT_EQ(a.close(), 0);
  ASSERT_EQ(b.close(), 0);

  const std::vector<unsigned char> got = read_all(path);
  ASSERT_EQ(got.size(), n);
  const auto diff = std::mismatch(got.begin(), got.end(), want.begin());
  EXPECT_TRUE(diff.first == got.end()) << "first wrong byte at offset " << (diff.first - got.begin());
  const std::uint64_t total = a.direct_bytes() + a.buffered_bytes() + b.direct_bytes() + b.buffered_bytes();
  EXPECT_EQ(total, n);  // every byte written once
  if (direct_supported(path)) {
    // The long runs' interiors (most of the bytes) bypassed the page cache.
    EXPECT_GT(a.direct_bytes() + b.direct_bytes(), n / 2);
    EXPECT_EQ((a.direct_bytes() + b.direct_bytes()) % DirectWriter::kAlign, 0u);
  } else {
    EXPECT_EQ(a.direct_bytes() + b.direct_bytes(), 0u);
  }
}

TEST(DirectWriter, ShortRunsStayBuffered) {
  const std::string path = scratch("short.bin");
  make_file(path, 1 << 20);
  std::vector<unsigned char> data(DirectWriter::kMinDirect - 1, 0xAB);
  DirectWriter w(path);
  ASSERT_EQ(w.write(data.data(), data.size(), 8192), 0);  // aligned, but under the threshold
  ASSERT_EQ(w.sync(), 0);
  ASSERT_EQ(w.close(), 0);
  EXPECT_EQ(w.direct_bytes(), 0u);
  EXPECT_EQ(w.buffered_bytes(), data.size());
  const std::vector<unsigned char> got = read_all(path);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), got.begin() + 8192));
  EXPECT_EQ(got[8191], 0);
  EXPECT_EQ(got[8192 + data.size()], 0);
}

TEST(DirectWriter, MissingFileIsAnOpenError) {
  DirectWriter w(scratch("absent.bin"));
  EXPECT_EQ(w.open_error(), ENOENT);
}
