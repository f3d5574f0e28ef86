#include <gtest/gtest.h>

#include "meshtrain/core/error.hpp"
#include "meshtrain/data/tokenizer.hpp"

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
