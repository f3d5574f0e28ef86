// core/crc32c: the published CRC-32C check values (the CRC catalogue's "123456789" and the
// RFC 3720 B.4 iSCSI vectors), a bit-at-a-time reference written here for longer buffers,
// the SSE4.2 and portable paths against each other, and the segment contributions that
// checkpoints combine across ranks against the CRC of the whole stream.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/crc32c.hpp"

using namespace meshtrain;

namespace {

// Straight from the definition: reflected, polynomial 0x82F63B78, init and xorout ~0.
std::uint32_t reference(const unsigned char* p, std::size_t n) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

std::vector<unsigned char> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(g());
  return v;
}

}  // namespace

TEST(Crc32c, CheckValues) {
  const std::string s = "123456789";
  EXPECT_EQ(crc32c::value(s.data(), s.size()), 0xE3069283u);
  EXPECT_EQ(crc32c::value(nullptr, 0), 0u);
  std::vector<unsigned char> v(32, 0);
  EXPECT_EQ(crc32c::value(v.data(), v.size()), 0x8A9136AAu);
  std::fill(v.begin(), v.end(), 0xFF);
  EXPECT_EQ(crc32c::value(v.data(), v.size()), 0x62A8AB43u);
  std::iota(v.begin(), v.end(), 0);
  EXPECT_EQ(crc32c::value(v.data(), v.size()), 0x46DD794Eu);
  std::reverse(v.begin(), v.end());
  EXPECT_EQ(crc32c::value(v.data(), v.size()), 0x113FDB5Cu);
}

TEST(Crc32c, HardwareAndPortableAgreeWithTheDefinition) {
  std::printf("SSE4.2 crc32 instruction: %s\n", crc32c::hardware() ? "in use" : "not available");
  // 70003 bytes: the longest length (70000) read from the furthest start (+3).
  const std::vector<unsigned char> data = random_bytes(70003, 1);
  // Lengths around the 8-byte words and the 3 x 4096-byte interleaved blocks, at odd starts.
  for (std::size_t n : {0, 1, 7, 8, 9, 63, 4095, 4096, 12287, 12288, 12289, 24577, 70000})
    for (std::size_t at : {0, 1, 3}) {
      const unsigned char* p = data.data() + at;
      const std::uint32_t want = reference(p, n);
      EXPECT_EQ(crc32c::value(p, n), want) << n << " bytes at +" << at;
      EXPECT_EQ(~crc32c::detail::update(~0u, p, n, /*allow_hardware=*/false), want) << n << " bytes at +" << at;
    }
}

TEST(Crc32c, ExtendAndCombine) {
  const std::vector<unsigned char> d = random_bytes(30000, 2);
  const std::uint32_t whole = crc32c::value(d.data(), d.size());
  for (std::size_t cut : {0, 1, 5000, 12288, 29999, 30000}) {
    const std::uint32_t a = crc32c::value(d.data(), cut), b = crc32c::value(d.data() + cut, d.size() - cut);
    EXPECT_EQ(crc32c::extend(a, d.data() + cut, d.size() - cut), whole) << cut;
    EXPECT_EQ(crc32c::combine(a, b, d.size() - cut), whole) << cut;
  }
}

// A stream cut into segments held by "ranks" (each segment to a random holder, each
// holder's segments in shuffled or increasing order): the xor of the holders'
// contributions finishes to the stream's CRC; a flipped bit anywhere changes it.
TEST(Crc32c, ContributionsOfScatteredSegmentsGiveTheStreamsCrc) {
  std::mt19937 g(3);
  for (int trial = 0; trial < 40; ++trial) {
    const std::size_t total = 1 + g() % 50000;
    std::vector<unsigned char> d = random_bytes(total, 100 + trial);
    if (trial % 5 == 0) std::fill(d.begin(), d.begin() + total / 2, 0);  // zero runs: a zero raw state
    std::vector<std::size_t> cuts = {0, total};
    for (int i = 0, n = static_cast<int>(g() % 40); i < n; ++i) cuts.push_back(g() % total);
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    const int holders = 1 + static_cast<int>(g() % 4);
    std::vector<std::vector<std::pair<std::size_t, std::size_t>>> segs(holders);
    for (std::size_t i = 0; i + 1 < cuts.size(); ++i) segs[g() % holders].emplace_back(cuts[i], cuts[i + 1] - cuts[i]);
    const auto combined = [&](const std::vector<unsigned char>& bytes) {
      std::uint32_t x = 0;
      for (auto& s : segs) {
        if (trial % 2) std::shuffle(s.begin(), s.end(), g);
        crc32c::Contribution c(total);
        for (const auto& [off, n] : s) c.add(off, bytes.data() + off, n);
        x ^= c.get();
      }
      return crc32c::finish(x, total);
    };
    const std::uint32_t want = reference(d.data(), total);
    ASSERT_EQ(combined(d), want) << "trial " << trial;
    std::vector<unsigned char> flipped = d;
    flipped[g() % total] ^= static_cast<unsigned char>(1u << (g() % 8));
    EXPECT_NE(combined(flipped), want) << "trial " << trial;
  }
}
