// `meshtrain generate`: text sampled from a checkpoint on any mesh. Every rank runs the
// same forward; the token is drawn from identical logits with an identically seeded
// generator (train/generate.hpp), so the text depends on the weights and the options, not
// on the ranks. The trainer's end-of-run sample (train.sample_tokens) is the same call with
// temperature 0.8, top-k 40 and seed train.seed.
#include <cmath>
#include <cstdio>

#include "checkpoint_session.hpp"
#include "meshtrain/checkpoint/source_model.hpp"
#include "meshtrain/comm/agree.hpp"
#include "meshtrain/core/error.hpp"
#include "meshtrain/core/log.hpp"
#include "meshtrain/core/timer.hpp"
#include "meshtrain/data/dataset.hpp"
#include "meshtrain/data/tokenizer.hpp"
#include "meshtrain/train/generate.hpp"

namespace meshtrain::app {
namespace {

namespace po = boost::program_options;

struct GenerateOptions {
  std::string checkpoint;
  std::string prompt;
  int tokens = 100;
  double temperature = 0.8;
  int top_k = 40;
  std::uint64_t seed = 1;
  std::string tokenizer = "auto";
};

template <class T>
int run_generate(const Runtime& rt, const train::RunSetup& setup, const GenerateOptions& o,
                 const WeightsSource& source) {
  const Config& cfg = setup.config;
  train::Session<T> session(rt, setup);
  const MpiComm& world = session.mesh().world();
  std::unique_ptr<data::Tokenizer> tok;
  agree_on_errors(world, [&] {
    std::string name = o.tokenizer;
    if (name == "auto") {
      // The dataset the model was trained on names its tokenizer; random tokens have none.
      name = "byte";
      if (!cfg.data.dir.empty() && cfg.data.dir != "random") {
        const std::string meta = data::Dataset::open(cfg.data.dir).meta.tokenizer;
        if (meta != "random") name = meta;
      }
    }
    tok = data::make_tokenizer(name);
    MESHTRAIN_REQUIRE(tok->vocab_size() <= setup.dims.valid_vocab,
                      "the %s tokenizer has %lld ids, more than model.vocab_size=%lld", name.c_str(),
                      static_cast<long long>(tok->vocab_size()), static_cast<long long>(setup.dims.valid_vocab));
  });
  const LoadedWeights weights = load_checkpoint_weights(session, setup, source);
  const double t0 = now_seconds();
  int generated = 0;
  const std::string text =
      train::sample_text(session, *tok, o.prompt, o.tokens, o.temperature, o.top_k, o.seed, &generated);
  const double seconds = now_seconds() - t0;
  if (rt.topology().world_rank == 0) {
    // The text alone goes to stdout (pipe-friendly); what produced it goes to stderr.
    // The real count: sampling stops early when the model emits end-of-text.
    std::string count = strprintf("%d token%s", generated, generated == 1 ? "" : "s");
    if (generated < o.tokens) count += strprintf(" (of --tokens %d: stopped at end-of-text)", o.tokens);
    std::fprintf(stderr, "generate: %s%s (loaded in %.2f s), %s at temperature %g, top-k %d, seed %llu "
                 "(%.2f s)\n",
                 weights.path.c_str(), weights.step >= 0 ? strprintf(" (step %d)", weights.step).c_str() : "",
                 weights.load_seconds, count.c_str(), o.temperature, o.top_k, static_cast<unsigned long long>(o.seed),
                 seconds);
    std::printf("%s%s\n", o.prompt.c_str(), text.c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int command_generate(Runtime& rt, const Args& args) {
  GenerateOptions o;
  po::options_description own("Options of generate");
  own.add_options()
      ("checkpoint", po::value<std::string>(&o.checkpoint), kCheckpointOptionHelp)
      ("prompt", po::value<std::string>(&o.prompt)->default_value(o.prompt), "text to continue (may be empty)")
      ("tokens", po::value<int>(&o.tokens)->default_value(o.tokens), "tokens to generate (fewer if end-of-text)")
      ("temperature", po::value<double>(&o.temperature)->default_value(o.temperature, "0.8"),
       "softmax temperature; 0 = greedy (always the most likely token)")
      ("top_k", po::value<int>(&o.top_k)->default_value(o.top_k), "sample among the k most likely tokens; 0 = all")
      ("seed", po::value<std::uint64_t>(&o.seed)->default_value(o.seed), "random seed of the sampler")
      ("tokenizer", po::value<std::string>(&o.tokenizer)->default_value(o.tokenizer),
       ("auto (the tokenizer of data.dir's dataset, byte for random data) or " + data::tokenizer_spec_help()).c_str());
  const std::string usage =
      "usage: meshtrain generate [CONFIG.ini] [--checkpoint PATH] [--prompt TEXT] [--tokens N] [--temperature T] "
      "[--top_k K] [--seed S] [--section.key=value ...]\n\n"
      "Continues --prompt with text sampled from a checkpoint, on this job's mesh. Prints the prompt and the\n"
      "continuation on stdout. The model keys must describe the checkpoint's model: pass the training run's\n"
      "config (its <output.dir>/config.ini holds every key).\n";
  CommandArgs ca = parse_command_args("generate", usage, own, args);
  if (ca.config.help) {
    if (rt.topology().world_rank == 0) std::fputs(ca.config.help_text.c_str(), stdout);
    return 0;
  }
  MESHTRAIN_REQUIRE(o.tokens >= 0, "--tokens must be >= 0, not %d", o.tokens);
  MESHTRAIN_REQUIRE(std::isfinite(o.temperature) && o.temperature >= 0,
                    "--temperature must be >= 0 and finite (0 = greedy), not %g", o.temperature);
  MESHTRAIN_REQUIRE(o.top_k >= 0, "--top_k must be >= 0 (0 = the whole vocabulary), not %d", o.top_k);
  Config& cfg = ca.config.config;
  // A Hugging Face directory or GGUF file brings its model's shape (keys the user gave must agree).
  if (!o.checkpoint.empty()) checkpoint::adopt_source_model(cfg, o.checkpoint, "--checkpoint");
  configure_run_logging(rt, cfg);
  fit_mesh_to_job(cfg, rt.topology().world_size);
  const WeightsSource source = resolve_weights(rt.world(), cfg, o.checkpoint);
  take_lora_from_checkpoint(rt.world(), cfg, source);
  const train::RunSetup setup = train::resolve_run(cfg, rt);
  return setup.bf16 ? run_generate<bf16>(rt, setup, o, source) : run_generate<float>(rt, setup, o, source);
}

}  // namespace meshtrain::app
