// formats/json: the strict reader of meta.json, safetensors headers and config files, and
// the writer of records. Expected values are written out by hand (UTF-8 bytes of the
// escaped code points, the text of each record), not produced by the code under test.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "core/utf8.hpp"
#include "formats/json.hpp"

using namespace meshtrain;
using formats::Json;

namespace {

/// The message parse_json throws for `text` ("" when it parses).
std::string error_of(const std::string& text) {
  try {
    formats::parse_json(text);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Json, MembersInDocumentOrder) {
  const Json v = formats::parse_json(R"({"b": 1.50, "a": [true, null, "x"], "c": -0})");
  ASSERT_TRUE(v.is_object());
  ASSERT_EQ(v.size(), 3u);
  std::string keys;
  for (const auto& [k, x] : v.items()) keys += k;
  EXPECT_EQ(keys, "bac");
  EXPECT_EQ(v["b"].get<double>(), 1.5);
  const Json& a = v["a"];
  ASSERT_EQ(a.size(), 3u);
  EXPECT_TRUE(a[0].get<bool>());
  EXPECT_TRUE(a[1].is_null());
  EXPECT_EQ(a[2].get<std::string>(), "x");
}

TEST(Json, DuplicateKeysAreRejected) {
  EXPECT_NE(error_of(R"({"w": 1, "w": 2})").find("key 'w' appears twice"), std::string::npos);
  // The same key in two objects is no duplicate.
  EXPECT_EQ(error_of(R"({"a": {"w": 1}, "b": {"w": 2}})"), "");
  EXPECT_NE(error_of(R"({"a": {"w": 1, "x": {}, "w": 3}})").find("key 'w' appears twice"), std::string::npos);
}

TEST(Json, EscapesDecodeToUtf8) {
  // U+00E9 (2 bytes), U+20AC (3 bytes), U+1F600 as a surrogate pair (4 bytes).
  const Json v = formats::parse_json(R"(["\u00e9\u20ac\ud83d\ude00\n\"\\"])");
  ASSERT_EQ(v.size(), 1u);
  const std::string s = v[0].get<std::string>();
  EXPECT_EQ(s, std::string("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\n\"\\"));
  EXPECT_EQ(utf8::first_invalid(s), std::string::npos);
}

TEST(Json, UnsignedIntegersOnly) {
  const Json v = formats::parse_json("[0, 18446744073709551615, -1, 1.0, 12e3, 18446744073709551616]");
  std::uint64_t x = 7;
  EXPECT_TRUE(formats::json_uint(v[0], x));
  EXPECT_EQ(x, 0u);
  EXPECT_TRUE(formats::json_uint(v[1], x));
  EXPECT_EQ(x, 18446744073709551615ull);
  for (int i = 2; i < 6; ++i) EXPECT_FALSE(formats::json_uint(v[i], x)) << v[i].dump();
}

TEST(Json, MalformedInputIsRejected) {
  for (const char* bad : {"{", R"({"a" 1})", R"(["\ud83d"])", R"(["\ude00"])", "[1,]", "\"raw\ncontrol\"", "01", "[1-2]",
                          "[1.]", "[.5]", "[1e]", "[--1]", "[+1]", "{} x", ""}) {
    const std::string e = error_of(bad);
    EXPECT_NE(e, "") << bad;
    EXPECT_EQ(e.find("[json.exception"), std::string::npos) << e;  // the library's tag is dropped
  }
}

TEST(Json, NestingIsBounded) {
  const int n = formats::kMaxJsonDepth;
  EXPECT_EQ(error_of(std::string(n, '[') + std::string(n, ']')), "");
  EXPECT_NE(error_of(std::string(n + 1, '[') + std::string(n + 1, ']')).find("nesting deeper than 128 levels"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(n + 1, '[') + "1").find("nesting deeper"), std::string::npos);
}

TEST(Json, RecordsAreCompactAndRoundTrip) {
  // Keys in the order they were added; doubles as the shortest text that reads back the same;
  // JSON has no NaN or infinity: null.
  Json j;
  j["step"] = 3;
  j["loss"] = 0.1;
  j["tokens"] = 4096.0;
  j["val_loss"] = NAN;
  j["grad_norm"] = INFINITY;
  j["host"] = "n\"1\"";
  j["ok"] = true;
  EXPECT_EQ(formats::json_text(j),
            R"({"step":3,"loss":0.1,"tokens":4096,"val_loss":null,"grad_norm":null,"host":"n\"1\"","ok":true})");
  EXPECT_EQ(formats::json_text(Json{{"x", 1e300}, {"y", -2.5}, {"z", {0.5, 3.0}}}), R"({"x":1e+300,"y":-2.5,"z":[0.5,3]})");
  const double tricky = 0.30000000000000004;
  EXPECT_EQ(formats::parse_json(formats::json_text(Json{{"x", tricky}}))["x"].get<double>(), tricky);
  EXPECT_EQ(formats::json_pretty(Json{{"a", {1, 2}}, {"b", Json::array()}}), "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": []\n}");
}
