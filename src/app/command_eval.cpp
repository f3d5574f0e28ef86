// `meshtrain eval`: validation loss and perplexity of a checkpoint on a dataset, on any
// mesh. The windows are those of the trainer's evaluation (train.eval_batches global
// batches of the validation split, split over the data-parallel ranks), so a checkpoint
// evaluated with its run's config reproduces the val_loss the run logged; --batches 0
// evaluates every non-overlapping window of the split once.
#include <cmath>
#include <cstdio>

#include "checkpoint_session.hpp"
#include "meshtrain/checkpoint/source_model.hpp"
#include "meshtrain/comm/agree.hpp"
#include "meshtrain/core/error.hpp"
#include "meshtrain/core/json.hpp"
#include "meshtrain/core/log.hpp"
#include "meshtrain/core/timer.hpp"
#include "meshtrain/data/dataset.hpp"
#include "meshtrain/data/sampler.hpp"
#include "meshtrain/parallel/micro_step.hpp"

namespace meshtrain::app {
namespace {

namespace po = boost::program_options;

struct EvalOptions {
  std::string checkpoint;
  std::string split = "val";
  int batches = -1;
  bool json = false;
};

template <class T>
int run_eval(const Runtime& rt, const train::RunSetup& setup, const EvalOptions& o) {
  const Config& cfg = setup.config;
  const TrainConfig& tc = cfg.train;
  const bool root = rt.topology().world_rank == 0;
  train::Session<T> session(rt, setup);
  const MpiComm& world = session.mesh().world();
  const LoadedWeights weights = load_checkpoint_weights(session, setup, o.checkpoint);

  const int dp = session.mesh().shape().dp();
  const int per_micro = tc.micro_batch * dp;  // windows per micro-batch over all dp ranks
  std::unique_ptr<data::EvalSampler> sampler;
  std::string source;
  long long micro_batches = 0;
  agree_on_errors(world, [&] {
    const data::Dataset ds = data::Dataset::load(cfg.data.dir, setup.dims.valid_vocab, tc.seed);
    const auto& src = o.split == "val" ? ds.val : ds.train;
    MESHTRAIN_REQUIRE(src && data::has_window(*src, tc.seq_len),
                      "data.dir=%s: the %s split holds %llu tokens, fewer than one window of train.seq_len + 1 = %d "
                      "(prepare the dataset with a validation fraction, or use --split train)",
                      cfg.data.dir.c_str(), o.split.c_str(), static_cast<unsigned long long>(src ? src->size() : 0),
                      tc.seq_len + 1);
    sampler = std::make_unique<data::EvalSampler>(src, tc.seq_len);
    source = src->description();
    if (o.batches > 0) {
      micro_batches = static_cast<long long>(o.batches) * setup.grad_accum;
    } else if (o.batches < 0) {
      micro_batches = static_cast<long long>(tc.eval_batches) * setup.grad_accum;
    } else {
      MESHTRAIN_REQUIRE(cfg.data.dir != "random", "--batches 0 (the whole split) needs a prepared dataset; "
                        "data.dir=random never ends: give --batches N");
      micro_batches = static_cast<long long>(sampler->windows_per_pass() / static_cast<std::uint64_t>(per_micro));
      MESHTRAIN_REQUIRE(micro_batches > 0,
                        "the %s split has %llu windows of %d tokens, fewer than one micro-batch of %d windows "
                        "(train.micro_batch x %d data-parallel ranks): lower train.micro_batch or train.seq_len",
                        o.split.c_str(), static_cast<unsigned long long>(sampler->windows_per_pass()), tc.seq_len,
                        per_micro, dp);
    }
  });

  const model::BatchShape shape{tc.micro_batch, tc.seq_len};
  const std::size_t n = static_cast<std::size_t>(tc.micro_batch) * tc.seq_len;
  std::vector<std::int32_t> host_in(n), host_tgt(n);
  Buffer<std::int32_t> in(n, MemCategory::Workspace), tgt(n, MemCategory::Workspace);
  const double t0 = now_seconds();
  double local = 0;
  for (long long b = 0; b < micro_batches; ++b) {
    // The trainer's evaluate(): micro-batch b of rank d starts at window b*micro*dp + d*micro.
    const std::uint64_t w0 = data::rank_first_window(0, static_cast<int>(b), tc.micro_batch, dp, session.mesh().dp_rank());
    sampler->fill(w0, tc.micro_batch, host_in.data(), host_tgt.data());
    Kokkos::deep_copy(in.view(), UView<std::int32_t, HostMem>(host_in.data(), n));
    Kokkos::deep_copy(tgt.view(), UView<std::int32_t, HostMem>(host_tgt.data(), n));
    local += parallel::forward_loss(session.engine(), session.model(), session.context(), in.data(), tgt.data(), shape);
  }
  const double tokens = static_cast<double>(micro_batches) * per_micro * tc.seq_len;
  const double loss = session.global_sum(local) / tokens;
  const double seconds = now_seconds() - t0;
  if (root) {
    std::printf("eval: %s%s on the %s split (%s): %.0f tokens in %lld windows of %d | loss %.6f | perplexity %.4f "
                "| load %.2f s, eval %.2f s, mesh %s\n",
                weights.path.c_str(), weights.step >= 0 ? strprintf(" (step %d)", weights.step).c_str() : "",
                o.split.c_str(), source.c_str(), tokens, micro_batches * per_micro, tc.seq_len, loss, std::exp(loss),
                weights.load_seconds, seconds, setup.mesh.str().c_str());
    if (o.json) {
      JsonObject j;
      j.add("checkpoint", weights.path).add("step", weights.step).add("split", o.split).add("tokens", tokens)
          .add("windows", static_cast<double>(micro_batches * per_micro)).add("loss", loss)
          .add("perplexity", std::exp(loss)).add("world_size", rt.topology().world_size);
      std::printf("%s\n", j.str().c_str());
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int command_eval(Runtime& rt, const Args& args) {
  EvalOptions o;
  po::options_description own("Options of eval");
  own.add_options()
      ("checkpoint", po::value<std::string>(&o.checkpoint), kCheckpointOptionHelp)
      ("batches", po::value<int>(&o.batches)->default_value(o.batches),
       "global batches (train.global_batch windows each) to evaluate; -1 = train.eval_batches (the windows "
       "training reports as val_loss), 0 = every non-overlapping window of the split once")
      ("split", po::value<std::string>(&o.split)->default_value(o.split), "val | train")
      ("json", po::bool_switch(&o.json), "also print the result as one JSON line");
  const std::string usage =
      "usage: meshtrain eval [CONFIG.ini] [--checkpoint PATH] [--batches N] [--split val|train] [--json] "
      "[--section.key=value ...]\n\n"
      "Validation loss (mean cross-entropy per token, nats) and perplexity of a checkpoint on data.dir, on this\n"
      "job's mesh (any mesh loads any checkpoint). The model keys must describe the checkpoint's model: pass the\n"
      "training run's config (its <output.dir>/config.ini holds every key).\n";
  CommandArgs ca = parse_command_args("eval", usage, own, args);
  if (ca.config.help) {
    if (rt.topology().world_rank == 0) std::fputs(ca.config.help_text.c_str(), stdout);
    return 0;
  }
  MESHTRAIN_REQUIRE(o.split == "val" || o.split == "train", "--split must be val or train, not '%s'", o.split.c_str());
  MESHTRAIN_REQUIRE(o.batches >= -1, "--batches must be -1, 0 or positive, not %d", o.batches);
  Config& cfg = ca.config.config;
  // A Hugging Face directory or GGUF file brings its model's shape (keys the user gave must agree).
  if (!o.checkpoint.empty()) checkpoint::adopt_source_model(cfg, o.checkpoint, "--checkpoint");
  configure_run_logging(rt, cfg);
  const train::RunSetup setup = train::resolve_run(cfg, rt.topology());
  return setup.bf16 ? run_eval<bf16>(rt, setup, o) : run_eval<float>(rt, setup, o);
}

}  // namespace meshtrain::app
