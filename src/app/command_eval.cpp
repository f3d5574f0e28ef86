// `meshtrain eval`: validation loss and perplexity of a checkpoint on a dataset, on any
// mesh. The windows are those of the trainer's evaluation (train.eval_batches global
// batches of the validation split, split over the data-parallel ranks), so a checkpoint
// evaluated with its run's config reproduces the val_loss the run logged; --batches 0
// evaluates every non-overlapping window of the split exactly once on any mesh: the last
// micro-batch is padded with windows whose targets are masked (-1), so the window count
// and the mean do not depend on the number of ranks. --text FILE evaluates a text file
// instead, tokenised on the fly with the model's tokenizer (every non-overlapping window
// once, like --batches 0).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "model_weights.hpp"
#include "app/run_spec_resolve.hpp"
#include "app/source_model_config.hpp"
#include "comm/agree.hpp"
#include "core/error.hpp"
#include "core/file_io.hpp"
#include "core/memory.hpp"
#include "formats/json.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "formats/gguf_file.hpp"
#include "data/dataset.hpp"
#include "data/memory_tokens.hpp"
#include "data/tokenizer.hpp"
#include "data/sampler.hpp"
#include "train/dpo.hpp"
#include "train/evaluate.hpp"
#include "train/memory_ways_out.hpp"
#include "train/resume_settings.hpp"

namespace meshtrain::app {
namespace {

namespace po = boost::program_options;

struct EvalOptions {
  std::string checkpoint;
  std::string text;       ///< a text file to evaluate instead of data.dir
  std::string tokenizer;  ///< for --text: a tokenizer spec; "" = the checkpoint's (GGUF / HF dir) or byte
  std::string split = "val";
  int batches = -1;
  bool json = false;
};

/// The tokens of --text: the file through the model's tokenizer (a BOS first when the
/// tokenizer's model expects one). Every rank tokenises (same bytes, same ids).
std::shared_ptr<const data::TokenSource> text_tokens(const EvalOptions& o, std::int64_t vocab,
                                                     const checkpoint::TokenizerRef& model, const std::string& model_name,
                                                     const std::string& tok_error) {
  // The model's tokenizer (recorded in the checkpoint, a GGUF's, a Hugging Face directory's);
  // a --tokenizer must be the same one.
  const std::unique_ptr<data::Tokenizer> tok = open_model_tokenizer(model, model_name, o.tokenizer, "byte", tok_error);
  MESHTRAIN_REQUIRE(tok->vocab_size() <= vocab,
                    "--text: the tokenizer %s has %lld ids, more than the model's vocabulary of %lld; give the "
                    "model's tokenizer with --tokenizer SPEC",
                    tok->name().c_str(), static_cast<long long>(tok->vocab_size()), static_cast<long long>(vocab));
  // A regular file of at most file_io::kMaxTextFileBytes (/dev/zero is refused, not read
  // until memory runs out); its ids take 4 bytes each, at most one per byte.
  const std::string text = file_io::read_text_file(o.text, "--text");
  require_host_memory(5.0 * static_cast<double>(text.size()), "--text " + o.text + " (its bytes and token ids)");
  std::vector<std::int32_t> ids = tok->encode_sequence(text);
  return std::make_shared<data::MemoryTokens>(std::move(ids), vocab,
                                              o.text + " (" + tok->kind() + " tokenizer " + tok->name() + ")");
}

/// eval --train.objective=dpo has one reference it can compute, the base with the adapters
/// off. `stored` is what checkpoint `path` records of its run (train::kDpoReferenceSetting):
/// a DPO run that measured against its initial policy's stored log-probabilities (it
/// continued the LoRA adapters of its checkpoint.init_from) is refused, since the base
/// without adapters is not its reference; the adapters of a run that was not DPO are
/// evaluated against the base with a warning saying so, since a DPO run continuing them
/// would measure against them instead. UserError on every rank alike.
void check_dpo_eval_reference(const checkpoint::StoredRunSettings& stored, const std::string& path, bool root) {
  const train::RunSettings run = train::parse_settings_record(stored.text);
  const auto recorded = [&](const std::string& key) {
    const auto it = std::find_if(run.begin(), run.end(), [&](const auto& kv) { return kv.first == key; });
    return it == run.end() ? std::string() : it->second;
  };
  MESHTRAIN_REQUIRE(recorded(train::kDpoReferenceSetting) != train::kDpoReferenceStored,
                    "eval: checkpoint %s comes from a DPO run that continued the LoRA adapters of its "
                    "checkpoint.init_from, so its reference is its initial adapters' log-probabilities, stored in "
                    "that run's output.dir (reference_logps.json), which eval does not read; the base without "
                    "adapters that eval computes is not that reference. The run's own validation (train.eval_every "
                    "with a validation split) reports against the stored reference; train.objective=simpo evaluates "
                    "without a reference",
                    path.c_str());
  const std::string objective = recorded("train.objective");
  if (root && !objective.empty() && objective != "dpo")
    log::warn("eval: the DPO reference is the base with the adapters off, so the rewards measure what the adapters "
              "of %s (a train.objective=%s run) changed from the base; a DPO run that continues these adapters "
              "(checkpoint.init_from) measures against them instead, and starts at loss log 2 with rewards 0",
              path.c_str(), objective.c_str());
}

template <class T>
int run_eval(const Runtime& rt, const plan::RunSetup& setup, const EvalOptions& o, const WeightsSource& weights_source) {
  const plan::TrainSpec& tc = setup.spec.train;
  const data::DataSource& data_source = setup.spec.data;
  const std::string data_dir = data_source.text();
  const bool root = rt.topology().world_rank == 0;
  train::Session<T> session(rt, setup, train::SessionUse::Inference);
  const MpiComm& world = session.mesh().world().mpi();
  std::string model_name, tok_error;
  const checkpoint::TokenizerRef model_tok = model_tokenizer_ref(world, weights_source, &model_name, &tok_error);

  const int dp = session.mesh().shape().dp();
  const int per_micro = setup.batch.micro_batch * dp;  // windows per micro-batch over all dp ranks
  std::unique_ptr<data::EvalSampler> sampler;
  bool masked = false;  // instruction/chat data: the mean is over the unmasked targets
  std::string source;
  long long micro_batches = 0;
  std::uint64_t windows = 0;  // windows evaluated over all ranks (padding excluded)
  // What a meshtrain checkpoint records of its run: whose reference a DPO evaluation matches.
  const checkpoint::StoredRunSettings stored = tc.dpo() && !weights_source.pretrained
                                                   ? checkpoint::stored_run_settings(world, weights_source.path)
                                                   : checkpoint::StoredRunSettings{};
  agree_on_errors(world, [&] {
    MESHTRAIN_REQUIRE(!tc.preference() || o.text.empty(),
                      "eval: train.objective=%s evaluates preference pairs of data.dir, not --text; give "
                      "train.objective=sft to evaluate a text file",
                      choice_name(tc.objective));
    std::shared_ptr<const data::TokenSource> src;
    std::shared_ptr<const data::MaskFile> mask;
    data::DocumentMask docs;  // packed rows, data.document_mask: per-document attention and loss
    if (!o.text.empty()) {
      src = text_tokens(o, setup.spec.dims.valid_vocab, model_tok, model_name, tok_error);
    } else {
      const data::Dataset ds = data::Dataset::load(data_source, setup.spec.dims.valid_vocab, tc.seed);
      if (model_tok.known())
        data::check_tokenizer_match({ds.meta.tokenizer_kind, ds.meta.vocab_size, ds.meta.tokenizer_hash},
                                    {model_tok.kind, model_tok.vocab_size, model_tok.hash}, "dataset " + data_dir,
                                    model_name);
      src = o.split == "val" ? ds.val : ds.train;
      mask = o.split == "val" ? ds.val_mask : ds.train_mask;
      data::check_dataset_rows(ds, setup.batch.seq_len, "eval", tc.objective);
      train::check_dpo_setup(setup, "eval");
      if (tc.dpo()) check_dpo_eval_reference(stored, weights_source.path, root);
      docs = data::document_mask_for(ds, o.split == "val", data_source.document_mask);
    }
    MESHTRAIN_REQUIRE(o.text.empty() || data::has_window(*src, setup.batch.seq_len),
                      "--text %s holds %llu tokens, fewer than one window of train.seq_len + 1 = %d: lower "
                      "train.seq_len or give more text",
                      o.text.c_str(), static_cast<unsigned long long>(src->size()), setup.batch.seq_len + 1);
    MESHTRAIN_REQUIRE(src && data::has_window(*src, setup.batch.seq_len),
                      "data.dir=%s: the %s split holds %llu tokens, fewer than one window of train.seq_len + 1 = %d "
                      "(prepare the dataset with a validation fraction, or use --split train)",
                      data_dir.c_str(), o.split.c_str(), static_cast<unsigned long long>(src ? src->size() : 0),
                      setup.batch.seq_len + 1);
    sampler = std::make_unique<data::EvalSampler>(src, setup.batch.seq_len, mask);
    sampler->set_document_mask(std::move(docs));
    masked = mask != nullptr;
    source = src->description();
    // --batches N beyond the split's windows would only wrap around and evaluate the same
    // windows again (2^31 batches: hours): it is clamped to the whole split once, as
    // --batches 0, with a warning (doc/batch.md). Random data has no end to clamp to.
    const bool past_split = o.batches > 0 && o.text.empty() && !data_source.is_random() &&
                            static_cast<double>(o.batches) * setup.batch.grad_accum * per_micro >
                                static_cast<double>(sampler->windows_per_pass());
    if (past_split && root)
      log::warn("eval: --batches %d is %.0f windows, more than the %llu the %s split holds; evaluating every window "
                "of the split once (as --batches 0)",
                o.batches, static_cast<double>(o.batches) * setup.batch.grad_accum * per_micro,
                static_cast<unsigned long long>(sampler->windows_per_pass()), o.split.c_str());
    if (o.batches > 0 && o.text.empty() && !past_split) {
      micro_batches = static_cast<long long>(o.batches) * setup.batch.grad_accum;
      windows = static_cast<std::uint64_t>(micro_batches) * per_micro;
    } else if (o.batches < 0 && o.text.empty()) {
      // The trainer's val_loss windows: train.eval_batches global batches, at most the split
      // once (train::eval_batches_windows), with the warning the run logged.
      bool clamped = false;
      const train::EvalWindows w =
          train::eval_batches_windows(tc.eval_batches, setup.batch.grad_accum, static_cast<std::uint64_t>(per_micro),
                                      data_source.is_random() ? 0 : sampler->windows_per_pass(), &clamped);
      if (clamped && root)
        log::warn("eval: train.eval_batches=%d is %.0f windows, more than the %llu the %s split holds; evaluating every "
                  "window of the split once",
                  tc.eval_batches, static_cast<double>(tc.eval_batches) * setup.batch.grad_accum * per_micro,
                  static_cast<unsigned long long>(w.windows), o.split.c_str());
      micro_batches = w.micro_batches;
      windows = w.windows;
    } else {
      MESHTRAIN_REQUIRE(!o.text.empty() || !data_source.is_random(), "--batches 0 (the whole split) needs a prepared dataset; "
                        "data.dir=random never ends: give --batches N");
      windows = sampler->windows_per_pass();
      micro_batches = static_cast<long long>((windows + per_micro - 1) / static_cast<std::uint64_t>(per_micro));
    }
  });

  // After the data: a bad --text or data.dir (and its vocabulary against model.vocab_size)
  // fails before the weights are read.
  const LoadedWeights weights = load_checkpoint_weights(session, setup, weights_source);

  train::TokenBatch token_batch(setup.batch.micro_batch, setup.batch.seq_len, sampler->document_masked());
  // The load's staging left in the pool's cache is returned (as the trainer does before its
  // first step): the memory the evaluation holds, and its peak, are its own.
  MemoryPool::instance().trim();
  MemoryPool::instance().reset_peaks();
  const double t0 = now_seconds();
  const train::EvalResult r = train::evaluate(
      session, *sampler, train::EvalWindows{micro_batches, windows, masked, tc.preference(), train::preference_loss(tc)}, token_batch);
  const double tokens = r.tokens, loss = r.loss;
  const double seconds = now_seconds() - t0;
  log_forward_plan("eval", setup);
  // A loss mask that is 0 on every window read (every target a prompt's or padding) leaves no
  // token to average: 0 / 0 would be printed as the loss. r.tokens is a global sum, so every
  // rank refuses alike.
  MESHTRAIN_REQUIRE(tc.preference() || tokens > 0,
                    "no target of the %lld window(s) read is trained on (the loss mask is 0 on all of them): there "
                    "is no loss to report; check the dataset's mask (re-run `meshtrain prepare`)%s",
                    static_cast<long long>(windows), o.batches > 0 ? ", or read more of it (--batches 0: the whole split)" : "");
  if (root) {
    const std::string where = o.text.empty() ? "the " + o.split + " split (" + source + ")" : source;
    if (tc.preference()) {
      const train::DpoMetrics& m = r.dpo;
      const std::string settings = tc.simpo() ? strprintf("simpo, beta %g, gamma %g", tc.simpo_beta, tc.simpo_gamma)
                                              : strprintf("dpo, beta %g", tc.dpo_beta);
      std::printf("eval: %s%s on %s: %.0f pairs (%s) | loss %.6f | rewards chosen %.6f rejected %.6f margin %.6f "
                  "| accuracy %.4f | logps chosen %.4f rejected %.4f | load %.2f s, eval %.2f s, mesh %s\n",
                  weights.path.c_str(), weights.step >= 0 ? strprintf(" (step %d)", weights.step).c_str() : "",
                  where.c_str(), static_cast<double>(windows / 2), settings.c_str(), loss, m.rewards_chosen,
                  m.rewards_rejected, m.margins, m.accuracy, m.logps_chosen, m.logps_rejected, weights.load_seconds,
                  seconds, setup.mesh_shape.str().c_str());
    } else {
      std::printf("eval: %s%s on %s: %.0f tokens in %lld windows of %d | loss %.6f | perplexity %.4f "
                  "| load %.2f s, eval %.2f s, mesh %s\n",
                  weights.path.c_str(), weights.step >= 0 ? strprintf(" (step %d)", weights.step).c_str() : "",
                  where.c_str(), tokens, static_cast<long long>(windows), setup.batch.seq_len, loss, std::exp(loss),
                  weights.load_seconds, seconds, setup.mesh_shape.str().c_str());
    }
    if (o.json) {
      formats::Json j;
      j["checkpoint"] = weights.path;
      j["step"] = weights.step;
      j["split"] = o.text.empty() ? o.split : "text";
      j["tokens"] = tokens;
      j["windows"] = static_cast<double>(windows);
      j["loss"] = loss;
      if (tc.preference()) {
        // TRL's names (doc/finetuning.md, "DPO"); the loss is the objective's, per pair.
        j["objective"] = choice_name(tc.objective);
        j["pairs"] = static_cast<double>(windows / 2);
        j["rewards/chosen"] = r.dpo.rewards_chosen;
        j["rewards/rejected"] = r.dpo.rewards_rejected;
        j["rewards/margins"] = r.dpo.margins;
        j["rewards/accuracies"] = r.dpo.accuracy;
        j["logps/chosen"] = r.dpo.logps_chosen;
        j["logps/rejected"] = r.dpo.logps_rejected;
      } else {
        j["perplexity"] = std::exp(loss);
      }
      j["world_size"] = rt.topology().world_size;
      std::printf("%s\n", formats::json_text(j).c_str());
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
      ("text", po::value<std::string>(&o.text),
       "evaluate this text file instead of data.dir: tokenised on the fly, every non-overlapping window of "
       "train.seq_len tokens once (whole micro-batches)")
      ("tokenizer", po::value<std::string>(&o.tokenizer),
       "for --text: byte, a tokenizer.json, a Hugging Face directory, a tokenizer.model or a .gguf; must be the "
       "model's tokenizer; default: the model's (recorded in the checkpoint, or a GGUF / Hugging Face --checkpoint's), "
       "else byte")
      ("json", po::bool_switch(&o.json), "also print the result as one JSON line");
  const std::string usage =
      "usage: meshtrain eval [CONFIG.ini] [--checkpoint PATH] [--batches N] [--split val|train] [--text FILE "
      "[--tokenizer SPEC]] [--json] [--section.key=value ...]\n\n"
      "Validation loss (mean cross-entropy per token, nats) and perplexity of a checkpoint on data.dir, on this\n"
      "job's mesh (any mesh loads any checkpoint). The model (shape, LoRA settings, tokenizer) comes from the\n"
      "checkpoint; the training run's config (its <output.dir>/config.ini) gives data.dir and the batch settings.\n";
  CommandArgs ca = parse_command_args("eval", usage, own, args);
  if (answer_help(rt, ca.config)) return 0;
  MESHTRAIN_REQUIRE(o.split == "val" || o.split == "train", "--split must be val or train, not '%s'", o.split.c_str());
  MESHTRAIN_REQUIRE(o.batches >= -1, "--batches must be -1, 0 or positive, not %d", o.batches);
  Config& cfg = ca.config.config;
  // A Hugging Face directory or GGUF file brings its model's shape (keys the user gave must agree).
  if (!o.checkpoint.empty()) adopt_source_model(cfg, o.checkpoint, "--checkpoint");
  configure_run_logging(rt, cfg);
  fit_mesh_to_job(cfg, rt.topology().world_size);
  if (o.batches == 0 || !o.text.empty()) {
    // The whole split (or text) does not come in global batches: a training global batch
    // that the job's ranks do not divide must not stop it.
    cfg.train.global_batch = 0;
    cfg.train.grad_accum = 1;
  }
  const WeightsSource source = resolve_weights(rt.world(), cfg, o.checkpoint);
  cfg.loaded_weights = source.path;  // where model.base_quant=gguf finds its base
  adopt_checkpoint_model_on_all(rt.world(), cfg, source, o.checkpoint);
  take_lora_from_checkpoint(rt.world(), cfg, source);
  take_seq_len_from_checkpoint(rt.world(), cfg, source);
  // Planned for what an evaluation allocates: forward passes, no training state.
  const plan::RunSetup setup = resolve_eval_run(cfg, rt);
  try {
    return setup.spec.train.bf16() ? run_eval<bf16>(rt, setup, o, source) : run_eval<float>(rt, setup, o, source);
  } catch (const OutOfDeviceMemory& e) {
    // The pool named the training settings; an evaluation has no backward to checkpoint.
    throw OutOfDeviceMemory(e.facts(), train::eval_memory_ways_out(setup));
  }
}

}  // namespace meshtrain::app
