// tokenizer_config.json read in one place (data/tokenizer_config): the shapes transformers
// writes are taken, every other shape of a key meshtrain uses is refused by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "data/tokenizer_config.hpp"

using namespace meshtrain;
using namespace meshtrain::data;
namespace fs = std::filesystem;

namespace {

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "'" << (part) << "' not in: " << (text)

/// A directory with a tokenizer_config.json of the given text; removed by the destructor.
struct ConfigDir {
  fs::path dir = fs::temp_directory_path() / ("tokenizer_config_" + std::to_string(::getpid()));
  ConfigDir() { fs::create_directories(dir); }
  ~ConfigDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  fs::path with(const std::string& text) const {
    std::ofstream(dir / "tokenizer_config.json") << text;
    return dir / "tokenizer_config.json";
  }
};

std::string error_of(const fs::path& file) {
  try {
    read_tokenizer_config(file);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(TokenizerConfig, TheShapesTransformersWrites) {
  ConfigDir d;
  // Strings, an AddedToken object, null, and the add_bos_token of a Llama tokenizer.
  TokenizerConfig c = read_tokenizer_config(d.with(R"({"bos_token": "<s>", "eos_token": {"content": "</s>",
      "lstrip": false, "__type": "AddedToken"}, "pad_token": null, "add_bos_token": true, "unk_token": 7,
      "chat_template": "{{ bos_token }}"})"));
  EXPECT_EQ(c.bos_token, "<s>");
  EXPECT_EQ(c.eos_token, "</s>");
  EXPECT_EQ(c.pad_token, "");
  ASSERT_TRUE(c.add_bos_token.has_value());
  EXPECT_TRUE(*c.add_bos_token);
  EXPECT_EQ(c.chat_template, "{{ bos_token }}");
  // Named templates: the default one; without a default, none.
  c = read_tokenizer_config(d.with(R"({"chat_template": [{"name": "tool_use", "template": "a"},
      {"name": "default", "template": "b"}], "add_bos_token": null})"));
  EXPECT_EQ(c.chat_template, "b");
  EXPECT_FALSE(c.add_bos_token.has_value());
  EXPECT_EQ(read_tokenizer_config(d.with(R"({"chat_template": [{"name": "rag", "template": "a"}]})")).chat_template, "");
  // No file: an empty config.
  c = read_tokenizer_config(d.dir / "absent.json");
  EXPECT_EQ(c.bos_token + c.eos_token + c.pad_token + c.chat_template, "");
  EXPECT_FALSE(c.add_bos_token.has_value());
}

TEST(TokenizerConfig, OtherShapesAreRefusedByName) {
  ConfigDir d;
  const std::string f = (d.dir / "tokenizer_config.json").string();
  EXPECT_CONTAINS(error_of(d.with("{\"bos_token\": ")), f + " is not valid JSON");
  EXPECT_CONTAINS(error_of(d.with("[1, 2]")), f + " must hold a JSON object, not array");
  EXPECT_CONTAINS(error_of(d.with(R"({"eos_token": 2})")),
                  f + ": \"eos_token\" must be a token's text or {\"content\": text}, got 2");
  EXPECT_CONTAINS(error_of(d.with(R"({"pad_token": {"text": "<pad>"}})")), "\"pad_token\" must be a token's text");
  EXPECT_CONTAINS(error_of(d.with(R"({"bos_token": {"content": 1}})")), "\"bos_token\" must be a token's text");
  EXPECT_CONTAINS(error_of(d.with(R"({"add_bos_token": "yes"})")),
                  f + ": \"add_bos_token\" must be true or false, got \"yes\"");
  EXPECT_CONTAINS(error_of(d.with(R"({"chat_template": 3})")),
                  f + ": \"chat_template\" must be a template's text or a list of {\"name\": text, \"template\": text}, "
                      "got 3");
  EXPECT_CONTAINS(error_of(d.with(R"({"chat_template": [{"name": "default"}]})")), "\"chat_template\" must be");
  EXPECT_CONTAINS(error_of(d.with(R"({"chat_template": ["a"]})")), "\"chat_template\" must be");
  // A long value is cut in the message.
  const std::string msg = error_of(d.with(R"({"eos_token": [")" + std::string(200, 'x') + R"("]})"));
  EXPECT_CONTAINS(msg, "...");
  EXPECT_LT(msg.size(), f.size() + 160);
}

TEST(TokenizerConfig, ChatTemplateJinjaBesideTheConfigWins) {
  // transformers 4.47 and later: chat_template.jinja is read before the config's "chat_template".
  ConfigDir d;
  const fs::path f = d.with(R"({"eos_token": "</s>", "chat_template": "inline"})");
  EXPECT_EQ(read_tokenizer_config(f).chat_template, "inline");
  std::ofstream(d.dir / "chat_template.jinja") << "{% for m in messages %}{{ m.content }}{% endfor %}\n";
  TokenizerConfig c = read_tokenizer_config(f);
  EXPECT_EQ(c.chat_template, "{% for m in messages %}{{ m.content }}{% endfor %}\n");
  EXPECT_EQ(c.eos_token, "</s>");  // the config's other keys still count
  fs::remove(f);                   // the template file without a config
  EXPECT_EQ(read_tokenizer_config(f).chat_template, "{% for m in messages %}{{ m.content }}{% endfor %}\n");
  // One that cannot be read is refused by name, not passed over for the config's.
  fs::remove(d.dir / "chat_template.jinja");
  fs::create_directory(d.dir / "chat_template.jinja");
  EXPECT_CONTAINS(error_of(d.with(R"({"chat_template": "inline"})")), (d.dir / "chat_template.jinja").string());
}

TEST(TokenizerConfig, TheFileOfATokenizerSpec) {
  ConfigDir d;
  EXPECT_EQ(tokenizer_config_of(d.dir.string()), d.dir / "tokenizer_config.json");
  EXPECT_EQ(tokenizer_config_of((d.dir / "tokenizer.json").string()), d.dir / "tokenizer_config.json");
  EXPECT_EQ(tokenizer_config_of("tokenizer.model"), fs::path("tokenizer_config.json"));
}

}  // namespace
