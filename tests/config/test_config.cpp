// Configuration: INI files, --section.key=value overrides and their precedence, error
// messages for unknown keys/sections and bad values, range validation, --help, the
// effective-config dump (config_to_ini) and the size/list parsers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "core/error.hpp"

using namespace meshtrain;

namespace {

using Args = std::vector<std::string>;

/// A scratch directory for INI files, removed at the end of the test.
class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/meshtrain-config-test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const auto& f : files_) std::remove(f.c_str());
    rmdir(dir_.c_str());
  }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    files_.push_back(path);
    return path;
  }

  std::string dir_;
  std::vector<std::string> files_;
};

/// The UserError message of parse_config (+ validate_config), or a test failure.
std::string error_of(const std::string& command, const Args& args) {
  try {
    const ParsedArgs p = parse_config(command, args);
    validate_config(p.config);
  } catch (const UserError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a UserError (" << typeid(e).name() << "): " << e.what();
    return {};
  }
  ADD_FAILURE() << "accepted";
  return {};
}

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "'" << (part) << "' not in: " << (text)

std::string entry(const Config& c, const std::string& key) {
  for (const auto& [k, v] : config_entries(c))
    if (k == key) return v;
  ADD_FAILURE() << "no key " << key;
  return {};
}

TEST_F(ConfigTest, DefaultsWithoutArguments) {
  const ParsedArgs p = parse_config("train", {});
  EXPECT_FALSE(p.help);
  EXPECT_EQ(config_entries(p.config), config_entries(Config{}));
  EXPECT_NO_THROW(validate_config(p.config));
  EXPECT_TRUE(p.config.source_file.empty());
}

TEST_F(ConfigTest, IniFileSetsKeysOfEverySection) {
  const std::string ini = write("run.ini",
                                "# a comment\n"
                                "[model]\nfamily = llama\nd_model = 256\ntie_embeddings = false\nnorm_eps = 1e-6\n"
                                "[parallel]\ntp = 2\ndp_shard = -1\n"
                                "[train]\nlr = 0.001\nseed = 18446744073709551615\nprecision = bf16\n"
                                "[data]\ndir = data/tiny\n"
                                "[checkpoint]\nevery = 50\n"
                                "[output]\ndir = runs/x\nlog_all_ranks = true\n");
  const ParsedArgs p = parse_config("train", {ini});
  const Config& c = p.config;
  EXPECT_EQ(c.source_file, ini);
  EXPECT_EQ(c.model.family, ModelFamily::Llama);
  EXPECT_EQ(c.model.d_model, 256);
  EXPECT_FALSE(c.model.tie_embeddings);
  EXPECT_DOUBLE_EQ(c.model.norm_eps, 1e-6);
  EXPECT_EQ(c.parallel.tp, 2);
  EXPECT_EQ(c.parallel.dp_shard, -1);
  EXPECT_DOUBLE_EQ(c.train.lr, 0.001);
  EXPECT_EQ(c.train.seed, UINT64_MAX);
  EXPECT_EQ(c.train.precision, Precision::Bf16);
  EXPECT_EQ(c.data.dir, "data/tiny");
  EXPECT_EQ(c.checkpoint.every, 50);
  EXPECT_EQ(c.output.dir, "runs/x");
  EXPECT_TRUE(c.output.log_all_ranks);
  // Keys not in the file keep their defaults.
  EXPECT_EQ(c.model.n_layers, Config{}.model.n_layers);
  EXPECT_NO_THROW(validate_config(c));
}

TEST_F(ConfigTest, AByteOrderMarkAndCrlfLineEndsAreNotPartOfTheFile) {
  // As an editor on Windows saves it: a UTF-8 BOM first, CRLF line ends. The BOM on a
  // section line, then on a key line.
  const std::string a = write("bom_section.ini", "\xEF\xBB\xBF[train]\r\nlr = 0.002\r\n[model]\r\nd_model = 96\r\n");
  const Config ca = parse_config("train", {a}).config;
  EXPECT_DOUBLE_EQ(ca.train.lr, 0.002);
  EXPECT_EQ(ca.model.d_model, 96);
  const std::string b = write("bom_key.ini", "\xEF\xBB\xBFtrain.seed = 9\n");
  EXPECT_EQ(parse_config("train", {b}).config.train.seed, 9u);
  // Only at the start of the file: elsewhere it is text like any other, and refused.
  const std::string c = write("bom_later.ini", "[train]\n\xEF\xBB\xBFlr = 0.002\n");
  EXPECT_CONTAINS(error_of("train", {c}), "bom_later.ini");
}

TEST_F(ConfigTest, CommandLineOverridesTheFileWhereverItStands) {
  const std::string ini = write("run.ini", "[model]\nd_model = 256\nn_layers = 4\n[train]\nlr = 0.001\n");
  for (const Args& args : {Args{ini, "--model.d_model=512", "--train.steps=7"},
                           Args{"--model.d_model=512", ini, "--train.steps=7"},
                           Args{"--model.d_model", "512", "--train.steps", "7", ini}}) {
    const Config c = parse_config("train", args).config;
    EXPECT_EQ(c.model.d_model, 512);           // command line beats the file
    EXPECT_EQ(c.model.n_layers, 4);            // file beats the default
    EXPECT_DOUBLE_EQ(c.train.lr, 0.001);       // file only
    EXPECT_EQ(c.train.steps, 7);               // command line only
    EXPECT_EQ(c.model.n_heads, Config{}.model.n_heads);  // neither
  }
}

TEST_F(ConfigTest, UnknownKeyOnTheCommandLineNamesItAndTheNearestKey) {
  std::string msg = error_of("train", {"--model.no_such_key=1"});
  EXPECT_CONTAINS(msg, "unknown config key 'model.no_such_key'");
  EXPECT_CONTAINS(msg, "did you mean 'model.");
  EXPECT_CONTAINS(msg, "meshtrain train --help");

  msg = error_of("train", {"--model.d_modle=5"});
  EXPECT_CONTAINS(msg, "'model.d_modle'");
  EXPECT_CONTAINS(msg, "did you mean 'model.d_model'");

  msg = error_of("plan", {"--train.lrr=0.1"});
  EXPECT_CONTAINS(msg, "did you mean 'train.lr'");
  EXPECT_CONTAINS(msg, "meshtrain plan --help");

  msg = error_of("train", {"--model.lr=0.1"});
  EXPECT_CONTAINS(msg, "did you mean 'train.lr'");

  msg = error_of("train", {"--steps=3"});
  EXPECT_CONTAINS(msg, "--section.key=value");
  EXPECT_CONTAINS(msg, "did you mean '--train.steps'");
}

TEST_F(ConfigTest, UnknownKeyInTheFileNamesItTheFileAndTheNearestKey) {
  const std::string ini = write("bad.ini", "[model]\nd_model = 256\nn_layer = 4\n");
  const std::string msg = error_of("train", {ini});
  EXPECT_CONTAINS(msg, "'model.n_layer'");
  EXPECT_CONTAINS(msg, ini);
  EXPECT_CONTAINS(msg, "did you mean 'model.n_layers'");
}

TEST_F(ConfigTest, UnknownSectionIsNamed) {
  std::string msg = error_of("train", {"--modle.d_model=5"});
  EXPECT_CONTAINS(msg, "unknown config section 'modle'");
  EXPECT_CONTAINS(msg, "model, parallel, plan, train, data, checkpoint, gpu, output");
  EXPECT_CONTAINS(msg, "did you mean 'model.d_model'");

  const std::string ini = write("bad.ini", "[trian]\nsteps = 5\n");
  msg = error_of("train", {ini});
  EXPECT_CONTAINS(msg, "unknown config section 'trian'");
  EXPECT_CONTAINS(msg, ini);
  EXPECT_CONTAINS(msg, "did you mean 'train.steps'");
}

TEST_F(ConfigTest, BadValueNamesTheKeyAndTheExpectedType) {
  struct Case {
    const char* arg;
    const char* key;
    const char* type;
  };
  for (const Case& c : {Case{"--model.d_model=abc", "model.d_model", "an integer"},
                        Case{"--model.d_model=1.5", "model.d_model", "an integer"},
                        Case{"--model.vocab_size=lots", "model.vocab_size", "an integer"},
                        Case{"--train.lr=fast", "train.lr", "a number"},
                        Case{"--model.tie_embeddings=maybe", "model.tie_embeddings", "true or false"},
                        Case{"--train.seed=x1", "train.seed", "a non-negative integer"}}) {
    SCOPED_TRACE(c.arg);
    const std::string msg = error_of("train", {c.arg});
    EXPECT_CONTAINS(msg, std::string("'") + c.key + "'");
    EXPECT_CONTAINS(msg, c.type);
  }
  const std::string ini = write("bad.ini", "[train]\nsteps = ten\n");
  const std::string msg = error_of("train", {ini});
  EXPECT_CONTAINS(msg, "'train.steps'");
  EXPECT_CONTAINS(msg, "an integer");
  EXPECT_CONTAINS(msg, ini);
}

TEST_F(ConfigTest, RangeAndChoiceValidationNamesTheKey) {
  struct Case {
    const char* arg;
    std::vector<const char*> parts;
  };
  for (const Case& c : {Case{"--model.family=bert", {"model.family", "'bert'", "gpt2, llama"}},
                        Case{"--model.d_model=0", {"model.d_model", "positive"}},
                        Case{"--model.n_kv_heads=0", {"model.n_kv_heads"}},
                        Case{"--parallel.strategy=zero3", {"parallel.strategy", "full_shard"}},
                        Case{"--parallel.memory_headroom=1.5", {"parallel.memory_headroom", "[0, 1)"}},
                        Case{"--parallel.memory_limit=8XB", {"parallel.memory_limit", "unit"}},
                        Case{"--parallel.collective_timeout=-1", {"parallel.collective_timeout", ">= 0"}},
                        Case{"--train.beta1=1.5", {"train.beta1", "[0, 1)"}},
                        Case{"--train.micro_batch=-1", {"train.micro_batch", ">= 0"}},  // 0 = auto (planner)
                        Case{"--train.precision=fp16", {"train.precision", "fp32, bf16"}},
                        Case{"--train.inject_nan_steps=1,x", {"train.inject_nan_steps", "integers"}},
                        Case{"--checkpoint.keep=0", {"checkpoint.keep"}},
                        Case{"--output.dir=", {"output.dir must not be empty"}},
                        Case{"--output.log_level=loud", {"output.log_level", "debug, info, warn"}}}) {
    SCOPED_TRACE(c.arg);
    const std::string msg = error_of("train", {c.arg});
    for (const char* part : c.parts) EXPECT_CONTAINS(msg, part);
  }
}

TEST_F(ConfigTest, OtherCommandLineMistakes) {
  EXPECT_CONTAINS(error_of("train", {"/no/such/dir/run.ini"}), "cannot open config file '/no/such/dir/run.ini'");
  const std::string a = write("a.ini", "[train]\nsteps = 1\n");
  const std::string b = write("b.ini", "[train]\nsteps = 2\n");
  EXPECT_CONTAINS(error_of("train", {a, b}), "at most one config file");
  EXPECT_CONTAINS(error_of("train", {"--train.steps=1", "--train.steps=2"}), "'train.steps' is given twice");
}

TEST_F(ConfigTest, HelpListsEveryKeyWithItsDefault) {
  const ParsedArgs p = parse_config("train", {"--help"});
  ASSERT_TRUE(p.help);
  EXPECT_CONTAINS(p.help_text, "usage: meshtrain train");
  // Boost prints "--key arg (=default)" for each option; every key of the config is there.
  std::size_t keys = 0;
  for (const auto& [key, value] : config_entries(Config{})) {
    EXPECT_CONTAINS(p.help_text, "--" + key + " arg (=" + (value.empty() ? "\"\"" : value) + ")");
    ++keys;
  }
  EXPECT_GT(keys, 60u);
  // ... with its meaning.
  EXPECT_CONTAINS(p.help_text, "tensor-parallel degree");
  EXPECT_TRUE(parse_config("plan", {"-h"}).help);
}

TEST_F(ConfigTest, MovedPlanKeysStillWorkUnderTheirOldNamesWithANote) {
  // The [plan] keys were parallel.* keys: the old name sets the new key (typed), marks it as
  // given, and leaves one note naming every new name; --help lists only the new names.
  const ParsedArgs p = parse_config("plan", {"--parallel.world_size=64", "--parallel.target_gemm_tflops=700",
                                             "--parallel.target_bus_gbps=150,25", "--parallel.device_memory=80GiB"});
  EXPECT_EQ(p.config.plan.world_size, 64);
  EXPECT_EQ(p.config.plan.gemm_tflops, 700.0);
  EXPECT_EQ(p.config.plan.bus_gbps, "150,25");
  EXPECT_EQ(p.config.plan.device_memory, "80GiB");
  EXPECT_TRUE(p.config.is_set("plan.world_size"));
  EXPECT_TRUE(p.config.command_line_keys.count("plan.gemm_tflops"));
  EXPECT_CONTAINS(p.config.deprecation_note, "parallel.world_size is now plan.world_size");
  EXPECT_CONTAINS(p.config.deprecation_note, "parallel.target_gemm_tflops is now plan.gemm_tflops");
  EXPECT_CONTAINS(p.config.deprecation_note, "parallel.target_bus_gbps is now plan.bus_gbps");
  EXPECT_CONTAINS(p.config.deprecation_note, "parallel.device_memory is now plan.device_memory");
  EXPECT_EQ(p.config.deprecation_note.find('\n'), std::string::npos) << "one line";
  // In a file too (a config.ini of an older run), where an empty ceiling meant "measured".
  const std::string ini = write("old.ini", "[parallel]\ngpus_per_node = 8\ntarget_mem_gbps =\ntp = 2\n");
  const ParsedArgs f = parse_config("plan", {ini});
  EXPECT_EQ(f.config.plan.gpus_per_node, 8);
  EXPECT_EQ(f.config.plan.mem_gbps, 0.0);
  EXPECT_EQ(f.config.parallel.tp, 2);
  EXPECT_TRUE(f.config.file_keys.count("plan.gpus_per_node"));
  EXPECT_CONTAINS(f.config.deprecation_note, "parallel.gpus_per_node is now plan.gpus_per_node");
  // The new names give no note, and the effective config writes only them, under [plan].
  const ParsedArgs n = parse_config("plan", {"--plan.world_size=64", "--plan.bus_gbps=150"});
  EXPECT_TRUE(n.config.deprecation_note.empty());
  EXPECT_EQ(parse_bus_gbps("plan.bus_gbps", n.config.plan.bus_gbps), std::make_pair(150.0, 150.0));
  const std::string text = config_to_ini(n.config);
  EXPECT_CONTAINS(text, "[plan]\nworld_size = 64\n");
  EXPECT_EQ(text.find("target_"), std::string::npos) << text;
  EXPECT_EQ(parse_config("train", {"--help"}).help_text.find("parallel.world_size"), std::string::npos);
  EXPECT_TRUE(parse_config("train", {}).config.deprecation_note.empty());
}

TEST_F(ConfigTest, AMovedKeyGivenUnderBothNamesIsAnError) {
  std::string msg = error_of("plan", {"--parallel.world_size=64", "--plan.world_size=64"});
  EXPECT_CONTAINS(msg, "parallel.world_size and plan.world_size are both set");
  EXPECT_CONTAINS(msg, "keep only plan.world_size");
  const std::string ini = write("both.ini", "[plan]\ngemm_tflops = 700\n");
  msg = error_of("plan", {ini, "--parallel.target_gemm_tflops=500"});
  EXPECT_CONTAINS(msg, "parallel.target_gemm_tflops and plan.gemm_tflops are both set");
  // A bad value names the key as it was written.
  EXPECT_CONTAINS(error_of("plan", {"--parallel.world_size=lots"}), "'parallel.world_size'");
  EXPECT_CONTAINS(error_of("plan", {"--parallel.target_mem_gbps=fast"}), "'parallel.target_mem_gbps'");
  EXPECT_CONTAINS(error_of("plan", {"--plan.bus_gbps=150,x"}), "plan.bus_gbps must be 'intra,inter'");
  EXPECT_CONTAINS(error_of("plan", {"--plan.device_memory=80 apples"}), "plan.device_memory");
}

TEST_F(ConfigTest, EffectiveConfigRoundTripsThroughIni) {
  // Non-default values of every type, including ones that are easy to mangle: doubles
  // that need 17 digits, strings with spaces, empty strings, the largest uint64.
  const Args overrides = {"--model.family=llama",
                          "--model.d_model=320",
                          "--model.norm_eps=1e-06",
                          "--model.init_std=0.1234567890123456789",
                          "--model.tie_embeddings=false",
                          "--model.lora_targets=q,k,v,o",
                          "--parallel.tp=2",
                          "--parallel.memory_limit=8GiB",
                          "--train.lr=0.0003",
                          "--train.beta2=0.999",
                          "--train.seed=18446744073709551615",
                          "--train.sample_prompt=Once upon a time",
                          "--data.dir=data/tiny shakespeare",
                          "--checkpoint.resume=none",
                          "--checkpoint.init_from=",
                          "--output.dir=runs/round trip",
                          "--output.log_all_ranks=true"};
  const Config original = parse_config("train", overrides).config;
  EXPECT_EQ(original.train.sample_prompt, "Once upon a time");
  EXPECT_DOUBLE_EQ(original.model.init_std, 0.1234567890123456789);

  const std::string ini_text = config_to_ini(original);
  for (const char* section : {"[model]", "[parallel]", "[train]", "[data]", "[checkpoint]", "[output]"})
    EXPECT_CONTAINS(ini_text, section);
  const std::string path = write("effective.ini", ini_text);
  const Config reparsed = parse_config("train", {path}).config;
  EXPECT_EQ(config_entries(reparsed), config_entries(original)) << ini_text;
  // Bit-exact doubles, not just equal text.
  EXPECT_EQ(reparsed.model.init_std, original.model.init_std);
  EXPECT_EQ(reparsed.train.lr, original.train.lr);
  // And the dump of the default config parses back to the defaults.
  const std::string defaults = write("defaults.ini", config_to_ini(Config{}));
  EXPECT_EQ(config_entries(parse_config("train", {defaults}).config), config_entries(Config{}));
}

TEST_F(ConfigTest, DoublesPrintShortWhenThatIsExact) {
  Config c;
  c.train.lr = 3e-4;
  c.train.beta2 = 0.95;
  EXPECT_EQ(entry(c, "train.lr"), "0.0003");
  EXPECT_EQ(entry(c, "train.beta2"), "0.95");
}

TEST(ParseBytes, UnitsAndErrors) {
  EXPECT_EQ(parse_bytes("k", "0"), 0u);
  EXPECT_EQ(parse_bytes("k", "512"), 512u);
  EXPECT_EQ(parse_bytes("k", "512B"), 512u);
  EXPECT_EQ(parse_bytes("k", "8GiB"), 8ull << 30);
  EXPECT_EQ(parse_bytes("k", "8 GiB"), 8ull << 30);
  EXPECT_EQ(parse_bytes("k", "8G"), 8ull << 30);
  EXPECT_EQ(parse_bytes("k", "1.5KiB"), 1536u);
  EXPECT_EQ(parse_bytes("k", "512MiB"), 512ull << 20);
  EXPECT_EQ(parse_bytes("k", "2TiB"), 2ull << 40);
  EXPECT_EQ(parse_bytes("k", "80GB"), 80000000000ull);
  EXPECT_EQ(parse_bytes("k", "512MB"), 512000000ull);
  EXPECT_EQ(parse_bytes("k", "1.5e9"), 1500000000ull);
  // refused(KEY, TEXT, PART): parse_bytes refuses TEXT with a message holding PART.
  const auto refused = [](const char* key, const char* text, const char* part) {
    SCOPED_TRACE(text);
    try {
      parse_bytes(key, text);
      ADD_FAILURE() << "accepted";
    } catch (const UserError& e) {
      EXPECT_CONTAINS(e.what(), part);
    }
  };
  for (const char* bad : {"", "lots", "8XB", "-1GiB", "inf", "8 GiB extra"})
    refused("parallel.memory_limit", bad, "parallel.memory_limit");
  // Past 2^64 bytes there is no value (the conversion gave 0, read as "no size").
  EXPECT_EQ(parse_bytes("k", "15TiB"), 15ull << 40);
  EXPECT_EQ(parse_bytes("k", "18446744073709549568"), 18446744073709549568ull);  // the largest double below 2^64
  for (const char* huge : {"16777216TiB", "1e30GiB", "18446744073709551616", "99999999999999999999999GiB"})
    refused("--max_shard_size", huge, "is larger than the largest size (16 EiB)");
}

TEST(ParseIntList, ListsAndErrors) {
  EXPECT_EQ(parse_int_list("k", "1,5,7"), (std::vector<long>{1, 5, 7}));
  EXPECT_EQ(parse_int_list("k", "-3"), (std::vector<long>{-3}));
  EXPECT_TRUE(parse_int_list("k", "").empty());
  for (const char* bad : {"1,,2", "a", "1.5", "3x"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(parse_int_list("train.inject_nan_steps", bad), UserError);
  }
}

// Every float key, found by behaviour so that a key added later is covered too: it takes
// 0.5 and refuses text (a string key takes both, an integer key refuses 0.5).
std::vector<std::string> float_keys() {
  std::vector<std::string> out;
  for (const auto& [key, value] : config_entries(Config{})) {
    bool takes_half = true, takes_text = true;
    try {
      parse_config("train", {"--" + key + "=0.5"});
    } catch (const UserError&) {
      takes_half = false;
    }
    try {
      parse_config("train", {"--" + key + "=abc"});
    } catch (const UserError&) {
      takes_text = false;
    }
    if (takes_half && !takes_text) out.push_back(key);
  }
  return out;
}

TEST(ConfigNumbers, EveryFloatKeyRefusesNanAndInfinity) {
  const std::vector<std::string> keys = float_keys();
  // The float keys of today (the list grows with new keys; it must not shrink to nothing).
  for (const char* k : {"train.lr", "train.weight_decay", "train.beta1", "model.norm_eps", "parallel.memory_headroom"})
    EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k << " was not detected as a float key";
  for (const std::string& key : keys) {
    for (const char* bad : {"nan", "inf", "-inf", "NaN", "1e400"}) {
      SCOPED_TRACE(key + "=" + bad);
      std::string message;
      try {
        const ParsedArgs p = parse_config("train", {"--" + key + "=" + bad});
        validate_config(p.config);
        ADD_FAILURE() << "accepted";
      } catch (const UserError& e) {
        message = e.what();
      }
      EXPECT_CONTAINS(message, key);
    }
  }
}

TEST(ConfigNumbers, PhysicalRangesAndAbsurdSizes) {
  const std::vector<std::pair<Args, std::string>> cases = {
      {{"--train.lr=-1e-3"}, "train.lr must be >= 0"},
      {{"--train.min_lr=1"}, "train.min_lr = 1 is above train.lr = 0.0003"},
      {{"--train.weight_decay=-0.1"}, "train.weight_decay must be >= 0"},
      {{"--train.beta2=1"}, "train.beta2 must be in [0, 1)"},
      {{"--train.adam_eps=0"}, "train.adam_eps must be positive"},
      {{"--train.grad_clip=-2"}, "train.grad_clip must be >= 0"},
      {{"--train.warmup_steps=-1"}, "train.warmup_steps must be >= 0"},
      {{"--train.time_limit_margin=-1"}, "train.time_limit_margin must be >= 0"},
      {{"--model.norm_eps=2"}, "model.norm_eps must be below 1"},
      {{"--model.lora_alpha=0"}, "model.lora_alpha must be positive"},
      {{"--model.vocab_size=4294967296"}, "model.vocab_size = 4294967296 is larger than the largest supported value"},
      {{"--model.d_model=1000000000"}, "model.d_model = 1000000000 is larger"},
      {{"--model.n_heads=1000"}, "model.n_heads = 1000 is larger"},
      {{"--train.micro_batch=65536", "--train.seq_len=65536"}, "train.micro_batch x train.seq_len"},
      {{"--parallel.tp=0"}, "parallel.tp must be -1 (infer) or positive"},
      {{"--train.inject_nan_rank=-2"}, "train.inject_nan_rank must be -1"},
      {{"--train.seed=-1"}, "config key 'train.seed' (on the command line) expects a non-negative integer, got '-1'"},
  };
  for (const auto& [args, expect] : cases) {
    SCOPED_TRACE(args[0]);
    EXPECT_CONTAINS(error_of("train", args), expect);
  }
  // The boundaries themselves are fine.
  const ParsedArgs ok = parse_config("train", {"--train.lr=0", "--train.min_lr=0", "--train.beta1=0",
                                               "--model.vocab_size=2147483647", "--train.grad_clip=0"});
  EXPECT_NO_THROW(validate_config(ok.config));
  // min_lr above lr only matters for the cosine decay.
  const ParsedArgs constant = parse_config("train", {"--train.lr=1e-5", "--train.lr_schedule=constant"});
  EXPECT_NO_THROW(validate_config(constant.config));
}

TEST_F(ConfigTest, ADirectoryIsNotAConfigFile) {
  EXPECT_CONTAINS(error_of("train", {dir_}), "is a directory; give the path of an INI file");
}

TEST_F(ConfigTest, ANegativeSeedInAFileIsRefused) {
  const std::string ini = write("seed.ini", "[train]\nseed = -3\n");
  EXPECT_CONTAINS(error_of("train", {ini}), "config key 'train.seed' (in " + ini + ") expects a non-negative integer");
}

}  // namespace

namespace {

/// Values the INI form mangles when written bare (issue 28): newlines, comment characters
/// (" ; " and " # " start a comment, Boost cuts at any '#'), '=' and '[', blanks at either
/// end, quotes, backslashes and escapes-lookalikes, control bytes, non-ASCII text.
const std::vector<std::string>& hostile_values() {
  static const std::vector<std::string> v = {
      "line one\nline two", "a ; b", "a;b", ";leading", "# not a comment", "x # y", "x#y", "k = v", "=", "[model]",
      "  leading and trailing  ", "\ttab\t", " ", "\"quoted\"", "\"", "say \"hi\"", "back\\slash\\", "\\n not a newline",
      "\\x41", "trailing\\", "caf\xc3\xa9 \xe2\x80\x94 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82", "cr\r\nlf", "\x01\x1f\x7f",
      "\"a\" ; \"b\"", "", "a\x01" "0\x01"};
  return v;
}

}  // namespace

TEST_F(ConfigTest, EveryStringKeyRoundTripsHostileValuesThroughTheWrittenIni) {
  // Every key: a value that is not the key's type is refused on the command line already;
  // every key that takes free text must read back from config_to_ini exactly as given.
  int string_keys = 0;
  for (const auto& [key, default_text] : config_entries(Config{})) {
    bool is_text = false;  // some hostile value was kept as given: the key takes free text
    for (const std::string& value : hostile_values()) {
      Config c;
      try {
        c = parse_config("train", {"--" + key + "=" + value}).config;
      } catch (const UserError&) {
        continue;  // refused on the command line (a number, bool or choice; a checked value)
      }
      std::string got_before;
      for (const auto& [k, v] : config_entries(c))
        if (k == key) got_before = v;
      if (got_before != value) continue;  // parsed into another type (the value's text is not kept)
      is_text = true;
      const std::string ini = config_to_ini(c);
      const std::string path = write("hostile.ini", ini);
      Config back;
      try {
        back = parse_config("train", {path}).config;
      } catch (const UserError& e) {
        ADD_FAILURE() << key << " = [" << value << "]: the written config.ini does not parse: " << e.what() << "\n" << ini;
        continue;
      }
      EXPECT_EQ(config_entries(back), config_entries(c)) << key << " = [" << value << "]\n" << ini;
    }
    string_keys += is_text;
  }
  // model.family etc. are choices; the paths, prompts, lists and sizes are text.
  EXPECT_GE(string_keys, 10) << "fewer free-text keys than expected: the probe is broken";
}

TEST_F(ConfigTest, QuotedValuesInAHandWrittenIni) {
  const std::string path = write("quoted.ini",
                                 "[train]\n"
                                 "sample_prompt = \"Hello # world ; \\\"friend\\\"\\n\" ; a comment\n"
                                 "[data]\n"
                                 "dir = \"  spaced  \"   # another\n"
                                 "[output]\n"
                                 "dir = plain # bare values keep their comments\n"
                                 "[checkpoint]\n"
                                 "dir = run#2/ck#pts ; a '#' without a blank before it is part of the value\n"
                                 "init_from = a#b\n");
  const Config c = parse_config("train", {path}).config;
  EXPECT_EQ(c.train.sample_prompt, "Hello # world ; \"friend\"\n");
  EXPECT_EQ(c.data.dir, "  spaced  ");
  EXPECT_EQ(c.output.dir, "plain");
  EXPECT_EQ(c.checkpoint.dir, "run#2/ck#pts");
  EXPECT_EQ(c.checkpoint.init_from, "a#b");
  // ... in a number too: the whole value is checked, not a prefix of it.
  const std::string hash_number = write("hash_number.ini", "[train]\nsteps = 3#c\n");
  EXPECT_CONTAINS(error_of("train", {hash_number}), "config key 'train.steps' (in " + hash_number + ") expects an integer");
  // Broken quoting is an error naming the key, the file and the line.
  const std::string open_quote = write("open.ini", "[train]\nsteps = 3\nsample_prompt = \"no end\n");
  const std::string e1 = error_of("train", {open_quote});
  EXPECT_CONTAINS(e1, "config key 'sample_prompt' (in " + open_quote + "), line 3: the quoted value has no closing quote");
  const std::string e2 = error_of("train", {write("escape.ini", "[data]\ndir = \"a\\qb\"\n")});
  EXPECT_CONTAINS(e2, "line 2: unknown escape '\\q' in a quoted value");
  const std::string e3 = error_of("train", {write("after.ini", "[data]\ndir = \"a\" b\n")});
  EXPECT_CONTAINS(e3, "line 2: text after the closing quote of its value ('b')");
  const std::string e4 = error_of("train", {write("hex.ini", "[data]\ndir = \"\\x4\"\n")});
  EXPECT_CONTAINS(e4, "\\x in a quoted value needs two hex digits");
}

TEST(ConfigQuoting, QuoteAndUnquoteAreInverse) {
  for (const std::string& v : hostile_values()) EXPECT_EQ(unquote_ini_value(quote_ini_value(v)), v) << "[" << v << "]";
  EXPECT_EQ(quote_ini_value("runs/plain path"), "runs/plain path") << "ordinary values stay bare";
  EXPECT_EQ(quote_ini_value("a ; b"), "\"a ; b\"");
  EXPECT_EQ(quote_ini_value("two\nlines"), "\"two\\nlines\"");
}
