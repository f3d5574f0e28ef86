// Model keys from a Hugging Face config.json (source_model.cpp): LlamaConfig and GPT2Config
// fields and defaults, keys the user gave (agreeing, disagreeing, -1 = default rule), and the
// models meshtrain refuses with a reason.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "app/source_model_config.hpp"
#include "checkpoint/source_model.hpp"
#include "config/config.hpp"
#include "core/error.hpp"
#include "test_support.hpp"

namespace meshtrain::test {
namespace {

namespace fs = std::filesystem;

std::string hf_dir(const std::string& name, const std::string& json) {
  const std::string d = "source_model_rank" + std::to_string(world().rank()) + "/" + name;
  fs::create_directories(d);
  std::ofstream(d + "/config.json") << json;
  return d;
}

const char* kSmolLM2 =
    R"({"model_type": "llama", "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536,
        "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "rms_norm_eps": 1e-05,
        "rope_theta": 100000, "tie_word_embeddings": true, "hidden_act": "silu", "rope_scaling": null})";

TEST(SourceModel, LlamaConfigSetsTheModelKeys) {
  Config c;
  app::adopt_source_model(c, hf_dir("smol", kSmolLM2), "checkpoint.init_from");
  EXPECT_EQ(c.model.family, ModelFamily::Llama);
  EXPECT_EQ(c.model.vocab_size, 49152);
  EXPECT_EQ(c.model.d_model, 576);
  EXPECT_EQ(c.model.n_layers, 30);
  EXPECT_EQ(c.model.n_heads, 9);
  EXPECT_EQ(c.model.n_kv_heads, 3);
  EXPECT_EQ(c.model.ffn_dim, 1536);
  EXPECT_TRUE(c.model.tie_embeddings);
  EXPECT_EQ(c.model.norm_eps, 1e-5);
  EXPECT_EQ(c.model.rope_theta, 100000.0);
}

TEST(SourceModel, Gpt2DefaultsAreGpt2Configs) {
  Config c;
  app::adopt_source_model(c, hf_dir("gpt2", R"({"model_type": "gpt2", "n_inner": null})"), "x");
  EXPECT_EQ(c.model.family, ModelFamily::Gpt2);
  EXPECT_EQ(c.model.d_model, 768);
  EXPECT_EQ(c.model.ffn_dim, 3072);
  EXPECT_EQ(c.model.max_seq_len, 1024);
  EXPECT_EQ(c.model.vocab_size, 50257);
  EXPECT_TRUE(c.model.tie_embeddings);
}

TEST(SourceModel, GivenKeysMustAgree) {
  const std::string d = hf_dir("smol_given", kSmolLM2);
  Config ok;
  ok.model.norm_eps = 0.00001;  // the same number written differently
  ok.model.ffn_dim = -1;        // the default rule asks for nothing
  ok.file_keys = {"model.norm_eps", "model.ffn_dim"};
  app::adopt_source_model(ok, d, "--checkpoint");
  EXPECT_EQ(ok.model.ffn_dim, 1536);
  Config bad;
  bad.model.n_layers = 12;
  bad.command_line_keys = {"model.n_layers"};
  try {
    app::adopt_source_model(bad, d, "--checkpoint");
    FAIL() << "a disagreeing model.n_layers was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("model.n_layers = 12 is given, but --checkpoint=" + d +
                                         " describes a model with model.n_layers = 30"),
              std::string::npos)
        << e.what();
  }
}

TEST(SourceModel, RefusesModelsItCannotRun) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"model_type": "qwen2"})", "model_type 'qwen2'"},
      {R"({"model_type": "llama", "vocab_size": 8, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,
           "num_attention_heads": 2, "rope_scaling": {"type": "linear", "factor": 2}})", "rope_scaling"},
      {R"({"model_type": "llama", "vocab_size": 8, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,
           "num_attention_heads": 2, "attention_bias": true})", "biases"},
      {R"({"model_type": "llama", "vocab_size": 8, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,
           "num_attention_heads": 2, "head_dim": 8})", "head_dim"},
      {R"({"model_type": "llama", "hidden_size": 8})", "\"num_attention_heads\" is missing"},
      {R"({"model_type": )", "not valid JSON"},
  };
  int i = 0;
  for (const auto& [json, words] : cases) {
    Config c;
    try {
      app::adopt_source_model(c, hf_dir("bad" + std::to_string(i++), json), "x");
      ADD_FAILURE() << "accepted: " << json;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  }
}

TEST(SourceModel, DirectoriesWithoutConfigDescribeNothing) {
  const std::string d = "source_model_rank" + std::to_string(world().rank()) + "/empty";
  fs::create_directories(d);
  EXPECT_TRUE(checkpoint::source_model_keys(d).empty());
  EXPECT_TRUE(checkpoint::source_model_keys(d + "/weights.safetensors").empty());
}

}  // namespace
}  // namespace meshtrain::test
