// core/json_parse: the JSON reader of meta.json and safetensors headers. Expected values
// are written out by hand (UTF-8 bytes of the escaped code points), not produced by the
// code under test.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "meshtrain/core/json_parse.hpp"
#include "meshtrain/core/utf8.hpp"

using namespace meshtrain;

TEST(JsonParse, MembersInDocumentOrderNumbersAsWritten) {
  const json::Value v = json::parse(R"({"b": 1.50, "a": [true, null, "x"], "b": -0})");
  ASSERT_EQ(v.kind, json::Value::Kind::Object);
  ASSERT_EQ(v.members.size(), 3u);  // the duplicate is kept for the caller to reject
  EXPECT_EQ(v.members[0].first, "b");
  EXPECT_EQ(v.members[0].second.text, "1.50");
  EXPECT_EQ(v.members[2].second.text, "-0");
  const json::Value* a = v.find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->items.size(), 3u);
  EXPECT_TRUE(a->items[0].boolean);
  EXPECT_EQ(a->items[1].kind, json::Value::Kind::Null);
  EXPECT_EQ(a->items[2].text, "x");
}

TEST(JsonParse, EscapesDecodeToUtf8) {
  // U+00E9 (2 bytes), U+20AC (3 bytes), U+1F600 as a surrogate pair (4 bytes).
  const json::Value v = json::parse(R"(["\u00e9\u20ac\ud83d\ude00\n\"\\"])");
  ASSERT_EQ(v.items.size(), 1u);
  EXPECT_EQ(v.items[0].text, std::string("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\n\"\\"));
  EXPECT_EQ(utf8::first_invalid(v.items[0].text), std::string::npos);
}

TEST(JsonParse, NumbersOfTheGrammar) {
  const json::Value v = json::parse("[0, -0.5, 12e3, 1E-2, 7.25e+1]");
  ASSERT_EQ(v.items.size(), 5u);
  EXPECT_EQ(v.items[2].text, "12e3");
  EXPECT_EQ(v.items[4].text, "7.25e+1");
}

TEST(JsonParse, MalformedInputIsRejected) {
  for (const char* bad : {"{", R"({"a" 1})", R"(["\ud83d"])", R"(["\ude00"])", "[1,]", "\"raw\ncontrol\"", "01", "[1-2]", "[1.]",
                          "[.5]", "[1e]", "[--1]", "[+1]", "{} x"}) {
    EXPECT_THROW(json::parse(bad), std::runtime_error) << bad;
  }
  EXPECT_THROW(json::parse(std::string(json::kMaxJsonDepth + 1, '[') + std::string(json::kMaxJsonDepth + 1, ']')),
               std::runtime_error);
}
