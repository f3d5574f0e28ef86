// The safetensors reader accepts exactly what the reference implementation accepts: one
// test per rule, each a UserError naming the file and the rule; the writer's files read
// back; dtype conversions to fp32.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "formats/safetensors.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "test_support.hpp"

namespace meshtrain::test {
namespace {

namespace fs = std::filesystem;
using formats::SafetensorsFile;

std::string dir() {
  static const std::string d = [] {
    const std::string p = "safetensors_test_rank" + std::to_string(world().rank());
    fs::remove_all(p);
    fs::create_directories(p);
    return p;
  }();
  return d;
}

/// A file of the 8-byte length of `header` (or `declared_len`), the header and `data`.
std::string make_file(const std::string& name, const std::string& header, const std::string& data,
                      long long declared_len = -1) {
  const std::string path = dir() + "/" + name + ".safetensors";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const unsigned long long n = declared_len >= 0 ? static_cast<unsigned long long>(declared_len) : header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xFF));
  out << header << data;
  return path;
}

std::string bytes_of(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

/// Opening `path` fails with a message that names the file and holds `part`.
void expect_rejected(const std::string& path, const std::string& part) {
  try {
    formats::SafetensorsFile f(path);
    ADD_FAILURE() << path << " was accepted (expected: " << part << ")";
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(path), std::string::npos) << "the file is not named: " << m;
    EXPECT_NE(m.find(part), std::string::npos) << "expected '" << part << "' in: " << m;
  }
}

const std::string kTwo =  // two F32 tensors: a (2, 2) at [0, 16), b (3) at [16, 28)
    R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[3],"data_offsets":[16,28]}})";
const std::string kTwoData = bytes_of({1, 2, 3, 4, 5, 6, 7});

TEST(Safetensors, ValidFileReads) {
  const std::string p = make_file("valid", kTwo + "   ", kTwoData);  // trailing header spaces are padding
  formats::SafetensorsFile f(p);
  ASSERT_EQ(f.tensors().size(), 2u);
  const auto* b = f.find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->shape, (std::vector<std::int64_t>{3}));
  std::vector<float> out(2);
  f.read_f32(*b, 1, 2, out.data());
  EXPECT_EQ(out, (std::vector<float>{6, 7}));
}

TEST(Safetensors, MetadataAndEmptyTensorsAreFine) {
  const std::string h =
      R"({"__metadata__":{"format":"pt"},"e":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]},)"
      R"("x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  formats::SafetensorsFile f(make_file("meta", h, bytes_of({9})));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.find("e")->numel(), 0);
}

TEST(Safetensors, RejectsTooSmallForTheLength) {
  const std::string p = dir() + "/tiny.safetensors";
  std::ofstream(p, std::ios::binary) << "abc";
  expect_rejected(p, "too small to hold the 8-byte header length");
}

TEST(Safetensors, RejectsHeaderAboveTheLimit) {
  expect_rejected(make_file("huge", "{}", "", 100000001), "exceeds the limit of 100000000 bytes");
}

TEST(Safetensors, RejectsHeaderPastTheEnd) {
  expect_rejected(make_file("pastend", "{}", "", 4096), "runs past the end of the file");
}

TEST(Safetensors, RejectsInvalidUtf8) { expect_rejected(make_file("utf8", "{\"\xff\":1}", ""), "not valid UTF-8"); }

TEST(Safetensors, RejectsHeaderNotStartingWithBrace) {
  expect_rejected(make_file("brace", " {}", ""), "does not start with '{'");
}

TEST(Safetensors, RejectsInvalidJson) {
  expect_rejected(make_file("json", R"({"a":{"dtype":"F32",)", ""), "not valid JSON");
}

TEST(Safetensors, RejectsBadMetadata) {
  expect_rejected(make_file("badmeta", R"({"__metadata__":{"n":1}})", ""), "__metadata__ value 'n' is not a string");
}

TEST(Safetensors, RejectsDuplicateNames) {
  const std::string h = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                        R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  expect_rejected(make_file("dup", h, bytes_of({1, 2})), "appears twice");
}

TEST(Safetensors, RejectsUnknownDtype) {
  expect_rejected(make_file("dtype", R"({"a":{"dtype":"F31","shape":[1],"data_offsets":[0,4]}})", bytes_of({1})),
                  "unknown dtype 'F31'");
}

TEST(Safetensors, RejectsBadShape) {
  expect_rejected(make_file("shape", R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", bytes_of({1})),
                  "shape holds something other than non-negative integers");
  expect_rejected(make_file("shape2", R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", bytes_of({1})),
                  "shape holds something other than non-negative integers");
}

TEST(Safetensors, RejectsBadOffsets) {
  expect_rejected(make_file("offs", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", bytes_of({1})),
                  "data_offsets is not two non-negative integers");
  expect_rejected(make_file("offs2", R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", bytes_of({1})),
                  "end before they begin");
}

TEST(Safetensors, RejectsMissingAndUnknownFields) {
  expect_rejected(make_file("nofield", R"({"a":{"dtype":"F32","shape":[1]}})", bytes_of({1})), "lacks data_offsets");
  expect_rejected(
      make_file("extra", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", bytes_of({1})),
      "unknown field 'x'");
  expect_rejected(make_file("notobj", R"({"a":[1,2]})", ""), "entry of tensor 'a' is not an object");
}

TEST(Safetensors, RejectsSizeNotMatchingDtypeTimesShape) {
  expect_rejected(make_file("size", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", bytes_of({1})),
                  "needs 8 bytes but data_offsets [0, 4] hold 4");
  expect_rejected(make_file("size16", R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,8]}})", bytes_of({1, 2})),
                  "needs 4 bytes");
}

TEST(Safetensors, RejectsGapsAndOverlaps) {
  const std::string gap = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  expect_rejected(make_file("gap", gap, bytes_of({1, 2, 3})), "must be contiguous and must not overlap");
  const std::string overlap = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  expect_rejected(make_file("overlap", overlap, bytes_of({1, 2, 3})), "must be contiguous and must not overlap");
  const std::string late = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  expect_rejected(make_file("late", late, bytes_of({1, 2})), "starts at byte 4 of the data buffer where 0 was expected");
}

TEST(Safetensors, RejectsTrailingBytesAndTruncation) {
  expect_rejected(make_file("trailing", kTwo, kTwoData + "xx"), "trailing bytes");
  expect_rejected(make_file("truncated", kTwo, kTwoData.substr(0, 20)), "the file is truncated");
}

TEST(Safetensors, ConvertsHalfBrainAndDoubleToFloat) {
  // F16: 1.0 = 0x3C00, -2.5 = 0xC100, 2^-24 (smallest subnormal) = 0x0001, inf = 0x7C00.
  // BF16: 1.0 = 0x3F80, -0.5 = 0xBF00.
  const std::uint16_t f16[4] = {0x3C00, 0xC100, 0x0001, 0x7C00};
  const std::uint16_t b16[2] = {0x3F80, 0xBF00};
  const double f64[2] = {0.25, -3.0};
  std::string data(reinterpret_cast<const char*>(f16), 8);
  data += std::string(reinterpret_cast<const char*>(b16), 4);
  data += std::string(reinterpret_cast<const char*>(f64), 16);
  const std::string h = R"({"h":{"dtype":"F16","shape":[4],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]},)"
                        R"("d":{"dtype":"F64","shape":[2],"data_offsets":[12,28]},)"
                        R"("i":{"dtype":"I32","shape":[0],"data_offsets":[28,28]}})";
  formats::SafetensorsFile f(make_file("convert", h, data));
  std::vector<float> out(4);
  f.read_f32(*f.find("h"), 0, 4, out.data());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.5f);
  EXPECT_EQ(out[2], std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(out[3]));
  f.read_f32(*f.find("b"), 0, 2, out.data());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -0.5f);
  f.read_f32(*f.find("d"), 0, 2, out.data());
  EXPECT_EQ(out[0], 0.25f);
  EXPECT_EQ(out[1], -3.0f);
  EXPECT_THROW(f.read_f32(*f.find("i"), 0, 0, out.data()), UserError) << "an integer tensor is not a parameter";
}

TEST(Safetensors, WriterOutputReadsBack) {
  const std::string p = dir() + "/written.safetensors";
  const std::vector<formats::SafetensorsEntry> entries = {{"w", "F32", {2, 3}}, {"v", "BF16", {3}}};
  formats::write_safetensors(p, entries, {{"format", "pt"}}, [](std::size_t i, std::vector<unsigned char>& out) {
    if (i == 0) {
      const std::vector<float> w = {1, 2, 3, 4, 5, 6};
      const auto* b = reinterpret_cast<const unsigned char*>(w.data());
      out.assign(b, b + 24);
    } else {
      out = {0x80, 0x3F, 0x00, 0x40, 0x40, 0x40};  // bf16 1, 2, 3
    }
  });
  formats::SafetensorsFile f(p);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  std::vector<float> w(6), v(3);
  f.read_f32(*f.find("w"), 0, 6, w.data());
  f.read_f32(*f.find("v"), 0, 3, v.data());
  EXPECT_EQ(w, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(v, (std::vector<float>{1, 2, 3}));
  // The header is padded to a multiple of 8 bytes, as the reference writer does.
  std::ifstream in(p, std::ios::binary);
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  EXPECT_EQ(len[0] % 8, 0);
}

}  // namespace
}  // namespace meshtrain::test
