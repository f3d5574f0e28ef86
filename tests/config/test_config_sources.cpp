// Where configuration values come from and what the parser tells a newcomer (issue 16):
// whole-line ';' and '#' comments in any column, which keys the user set (command line /
// file) as opposed to defaults, the lora_targets default, a subcommand's own options in
// the unknown-option message, and the warnings for settings that do less than they say.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "app/run_spec_resolve.hpp"
#include "config/config.hpp"
#include "core/error.hpp"
#include "model/model_dims.hpp"
#include "train/setting_warnings.hpp"

using namespace meshtrain;

namespace {

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "'" << (part) << "' not in: " << (text)

/// An INI file in /tmp, removed by the destructor.
struct TempIni {
  std::string path;
  explicit TempIni(const std::string& text) {
    char tmpl[] = "/tmp/meshtrain-config-sources.XXXXXX";
    const int fd = mkstemp(tmpl);
    EXPECT_GE(fd, 0);
    close(fd);
    path = tmpl;
    std::ofstream(path) << text;
  }
  ~TempIni() { std::remove(path.c_str()); }
};

std::string error_of(const std::string& command, const std::vector<std::string>& args,
                     const std::vector<std::string>& own = {}) {
  try {
    parse_config(command, args, own);
  } catch (const UserError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return {};
}

TEST(ConfigSources, SemicolonAndHashCommentsInAnyColumn) {
  const TempIni ini("; a note in column 0\n# another\n[train]\n;steps = 99\n  ; indented\nsteps = 7 ; inline\n"
                    "\t# tab-indented\nlr = 0.5  # inline hash\n");
  const ParsedArgs p = parse_config("train", {ini.path});
  EXPECT_EQ(p.config.train.steps, 7);
  EXPECT_EQ(p.config.train.lr, 0.5);
}

TEST(ConfigSources, RecordsWhichKeysTheUserSet) {
  const TempIni ini("[train]\nsteps = 7\nlr = 0.5\n");
  const ParsedArgs p = parse_config("train", {ini.path, "--train.lr=0.25", "--model.d_model=64"});
  EXPECT_EQ(p.config.train.lr, 0.25);  // the command line wins
  EXPECT_TRUE(p.config.command_line_keys.count("train.lr"));
  EXPECT_TRUE(p.config.command_line_keys.count("model.d_model"));
  EXPECT_FALSE(p.config.command_line_keys.count("train.steps"));
  EXPECT_TRUE(p.config.file_keys.count("train.steps"));
  EXPECT_TRUE(p.config.is_set("train.steps"));
  EXPECT_FALSE(p.config.is_set("train.grad_accum"));
}

TEST(ConfigSources, LoraTargetsDefaultToPeftsAttentionProjections) {
  const Config c;
  EXPECT_EQ(c.model.lora_targets, "auto");
  ModelConfig m;
  m.lora_rank = 4;
  m.family = ModelFamily::Gpt2;
  m.d_model = 64;
  m.n_heads = 4;
  EXPECT_EQ(app::resolve_model(m).lora_targets, (std::vector<std::string>{"c_attn"}));
  m.family = ModelFamily::Llama;
  EXPECT_EQ(app::resolve_model(m).lora_targets, (std::vector<std::string>{"q", "v"}));
}

TEST(ConfigSources, UnknownOptionOfACommandListsItsOwnOptions) {
  const std::vector<std::string> own = {"checkpoint", "batches", "split", "json"};
  const std::string bogus = error_of("eval", {"--bogus", "1"}, own);
  EXPECT_CONTAINS(bogus, "unknown option '--bogus'");
  EXPECT_CONTAINS(bogus, "--checkpoint, --batches, --split, --json");
  EXPECT_EQ(bogus.find("train.lr"), std::string::npos) << bogus;
  EXPECT_EQ(bogus.find("did you mean"), std::string::npos) << bogus;  // nothing is close to "bogus"
  EXPECT_CONTAINS(error_of("eval", {"--batchs=1"}, own), "did you mean '--batches'?");
  // train has no options of its own: the nearest configuration key is suggested as before.
  EXPECT_CONTAINS(error_of("train", {"--steps=1"}), "did you mean '--train.steps'?");
}

plan::RunSetup setup_of(const std::vector<std::string>& args, int grad_accum, int dp) {
  plan::RunSetup s;
  s.spec = app::resolve_spec(parse_config("train", args).config);
  s.batch = s.spec.batch;
  s.batch.grad_accum = grad_accum;
  s.mesh_shape = MeshShape{1, dp, 1};
  return s;
}

TEST(ConfigSources, GpuKernelPathKeysReachTheModelsKernelPaths) {
  const model::KernelPaths d = setup_of({}, 1, 1).spec.kernel_paths;
  EXPECT_TRUE(d.fused_loss && d.fused_norms && d.epilogues && d.row_packs);
  EXPECT_EQ(d.norm_form, kernels::default_norm_form());
  const model::KernelPaths p = setup_of({"--gpu.fused_loss=false", "--gpu.fused_norms=false", "--gpu.epilogues=false",
                                         "--gpu.norm_form=warps", "--gpu.row_packs=false"},
                                        1, 1)
                                   .spec.kernel_paths;
  EXPECT_FALSE(p.fused_loss || p.fused_norms || p.epilogues || p.row_packs);
  EXPECT_EQ(p.norm_form, kernels::NormForm::Warps);
  EXPECT_EQ(setup_of({"--gpu.norm_form=rows"}, 1, 1).spec.kernel_paths.norm_form, kernels::NormForm::Rows);
}

TEST(SettingWarnings, EachSettingThatDoesLessThanItSays) {
  EXPECT_TRUE(train::setting_warnings(setup_of({}, 1, 1)).empty());
  // global_batch and grad_accum together: the global batch wins, named with both values.
  auto w = train::setting_warnings(setup_of({"--train.global_batch=16", "--train.grad_accum=3", "--train.micro_batch=4"}, 2, 2));
  ASSERT_EQ(w.size(), 1u);
  EXPECT_CONTAINS(w[0], "train.global_batch=16 wins over train.grad_accum=3");
  EXPECT_CONTAINS(w[0], "grad_accum 2");
  // Consistent values are not a conflict.
  EXPECT_TRUE(train::setting_warnings(setup_of({"--train.global_batch=16", "--train.grad_accum=2", "--train.micro_batch=4"}, 2, 2)).empty());
  w = train::setting_warnings(setup_of({"--train.time_limit=5"}, 1, 1));
  ASSERT_EQ(w.size(), 1u);
  EXPECT_CONTAINS(w[0], "train.time_limit=5 s is not longer than train.time_limit_margin=60 s");
  EXPECT_TRUE(train::setting_warnings(setup_of({"--train.time_limit=5", "--train.time_limit_margin=1"}, 1, 1)).empty());
  w = train::setting_warnings(setup_of({"--train.eval_every=5", "--train.log_every=4"}, 1, 1));
  ASSERT_EQ(w.size(), 1u);
  EXPECT_CONTAINS(w[0], "train.eval_every=5 is not a multiple of train.log_every=4");
  w = train::setting_warnings(setup_of({"--train.sample_prompt=Q:"}, 1, 1));
  ASSERT_EQ(w.size(), 1u);
  EXPECT_CONTAINS(w[0], "train.sample_tokens=0");
  w = train::setting_warnings(setup_of({"--model.lora_targets=q"}, 1, 1));
  ASSERT_EQ(w.size(), 1u);
  EXPECT_CONTAINS(w[0], "model.lora_rank=0");
  // checkpoint.overwrite: whether it acts depends on the directories (test_earlier_run).
  EXPECT_TRUE(train::setting_warnings(setup_of({"--checkpoint.overwrite=true"}, 1, 1)).empty());
}

TEST(SettingWarnings, LoraSummaryCountsTrainableParameters) {
  ModelConfig m;
  m.d_model = 64;
  m.n_heads = 4;
  m.n_layers = 2;
  m.vocab_size = 264;
  m.max_seq_len = 64;
  EXPECT_EQ(train::lora_summary(app::resolve_model(m)), "");
  m.lora_rank = 4;
  // c_attn: A (4, 64) + B (192, 4) per block, 2 blocks = 2 x (256 + 768) = 2048.
  const std::string s = train::lora_summary(app::resolve_model(m));
  EXPECT_CONTAINS(s, "rank 4, alpha 16 (scale 4) on c_attn: 2048 trainable parameters");
}

}  // namespace
