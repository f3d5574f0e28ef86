// `meshtrain generate`: text sampled from a checkpoint on any mesh. Every rank runs the
// same forward; the token is drawn from identical logits with an identically seeded
// generator (train/generate.hpp), so the text depends on the weights and the options, not
// on the ranks. The trainer's end-of-run sample (train.sample_tokens) is the same call with
// train.sample_temperature, sample_top_k, sample_top_p, sample_min_p and seed train.seed.
#include <cmath>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model_weights.hpp"
#include "app/run_spec_resolve.hpp"
#include "app/source_model_config.hpp"
#include "comm/agree.hpp"
#include "core/error.hpp"
#include "core/file_io.hpp"
#include "core/log.hpp"
#include "core/memory.hpp"
#include "core/timer.hpp"
#include "data/chat_examples.hpp"
#include "data/chat_prompt.hpp"
#include "data/dataset.hpp"
#include "data/tokenizer.hpp"
#include "formats/json.hpp"
#include "train/generate.hpp"
#include "train/memory_ways_out.hpp"

namespace meshtrain::app {
namespace {

namespace po = boost::program_options;

struct GenerateOptions {
  std::string checkpoint;
  std::string prompt;
  int tokens = 100;
  train::SamplingSettings sampling;  // --temperature, --top_k, --top_p, --min_p
  std::uint64_t seed = 1;
  std::string tokenizer = "auto";
  bool no_kv_cache = false;
  bool chat = false;
  std::string chat_template = "auto";
  std::string system;
  bool system_given = false;  // --system on the command line, "" included (no system message)
  std::string prompt_file;
};

/// One prompt of --prompt_file: its text and, for a JSON line, the whole object (whose other
/// keys are copied to the result).
struct FilePrompt {
  std::string text;
  nlohmann::ordered_json record;  // null for a plain-text line (ordered: results keep the line's key order)
};

/// --prompt_file: one prompt per line, plain text or a JSON object with a "prompt" string;
/// blank lines are skipped. Read and checked before any weights are loaded.
std::vector<FilePrompt> read_prompt_file(const std::string& path) {
  std::istringstream in(file_io::read_text_file(path, "--prompt_file"));
  std::vector<FilePrompt> prompts;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    FilePrompt p;
    if (line[first] != '{') {
      p.text = line;
    } else {
      p.record = nlohmann::ordered_json::parse(line, nullptr, false);
      MESHTRAIN_REQUIRE(!p.record.is_discarded() && p.record.is_object() && p.record.contains("prompt") &&
                            p.record["prompt"].is_string(),
                        "--prompt_file %s line %d starts with '{' but is not a JSON object with a \"prompt\" string: "
                        "write {\"prompt\": \"...\"} or a plain-text line not starting with '{'",
                        path.c_str(), n);
      p.text = p.record["prompt"].get<std::string>();
    }
    prompts.push_back(std::move(p));
  }
  MESHTRAIN_REQUIRE(in.eof(), "error reading --prompt_file %s", path.c_str());
  MESHTRAIN_REQUIRE(!prompts.empty(), "--prompt_file %s has no prompt: write one per line", path.c_str());
  return prompts;
}

/// --chat's format: a name given, else (auto) the format the model was trained in when its
/// checkpoint records one (the tokenizer's own template may be another: a GGUF's ChatML for a
/// model tuned on Alpaca data), else the tokenizer's template, recognised.
data::ChatFormat chat_format_of(const std::string& option, const checkpoint::TokenizerRef& model_tok,
                                const std::string& tokenizer) {
  if (option != "auto") return data::chat_format_by_name(option);
  const std::string source = "the " + tokenizer + " tokenizer";
  if (model_tok.chat_format.empty()) return data::recognise_chat_template(data::chat_template_text(tokenizer), source);
  const data::ChatFormat trained = data::chat_format_by_name(model_tok.chat_format);
  // The same format as the tokenizer's: its template's default system message comes along,
  // as `prepare --chat_template auto` rendered it.
  try {
    const data::ChatFormat own = data::recognise_chat_template(data::chat_template_text(tokenizer), source);
    if (own.kind == trained.kind) return own;
  } catch (const UserError&) {
  }
  return trained;
}

/// The system message --chat prompts with and, for the log, where it comes from.
struct ChatSystem {
  std::string text;  // "" for none
  std::string origin;
};

/// --system when given (even ""); else the one the checkpoint's data was prepared with (the
/// model learnt to answer after it: its template's default was replaced by it, or was it);
/// else the default system turn of the tokenizer's template in `format`, if any. `format`'s
/// default is cleared: the message is given to the prompt explicitly, which renders alike.
ChatSystem chat_system_of(const GenerateOptions& o, const checkpoint::TokenizerRef& model_tok, data::ChatFormat& format,
                          const std::string& tokenizer) {
  ChatSystem s;
  if (o.system_given) {
    s = {o.system, "--system"};
  } else if (model_tok.chat_system) {
    s = {*model_tok.chat_system, model_tok.chat_system->empty()
                                     ? "recorded in the checkpoint: its data was prepared without one"
                                     : "recorded in the checkpoint: the one its data was prepared with"};
  } else if (!format.default_system.empty()) {
    s = {format.default_system, "the default of the " + tokenizer + " tokenizer's chat template"};
  } else {
    s = {"", model_tok.chat_format.empty()
                 ? "the chat template has no default"
                 : "not recorded: the checkpoint was written before meshtrain recorded its data's system "
                   "message; give --system if the data had one"};
  }
  format.default_system.clear();
  return s;
}

/// Tokens a --chat prompt can add around the user's message: the template's markers and a
/// default system message (SmolLM2's is 14 tokens, Llama 3's markup under 30).
constexpr int kChatMarkupTokens = 256;

/// The most positions one prompt's generation can hold, for the memory plan, before any
/// tokenizer is loaded: every tokenizer here (bytes, byte-level BPE, SentencePiece with
/// byte fallback) makes at most one token of a byte, plus a BOS and SentencePiece's
/// leading space; --chat adds its markup and --system. Then --tokens, within the model's
/// window. A --prompt_file that cannot be read counts as empty: its reading reports that --
/// and one that is not a regular file is not opened here (a named pipe would block until a
/// writer comes; read_prompt_file refuses it by name).
int planned_positions(const GenerateOptions& o, int max_seq_len) {
  std::size_t prompt_bytes = o.prompt.size();
  std::error_code ec;
  if (!o.prompt_file.empty() && std::filesystem::is_regular_file(o.prompt_file, ec)) {
    std::ifstream in(o.prompt_file, std::ios::binary);
    for (std::string line; std::getline(in, line);) prompt_bytes = std::max(prompt_bytes, line.size());
  }
  double tokens = static_cast<double>(prompt_bytes) + 2 + static_cast<double>(o.tokens);
  if (o.chat) tokens += kChatMarkupTokens + static_cast<double>(o.system.size());
  return static_cast<int>(std::min<double>(tokens, max_seq_len));
}

template <class T>
int run_generate(const Runtime& rt, const plan::RunSetup& setup, const GenerateOptions& o,
                 const WeightsSource& source) {
  const data::DataSource& data_source = setup.spec.data;
  train::Session<T> session(rt, setup, train::SessionUse::Inference);
  const MpiComm& world = session.mesh().world().mpi();
  const bool root = rt.topology().world_rank == 0;
  std::unique_ptr<data::Tokenizer> tok;
  data::ChatFormat format;  // --chat: the template prompts are rendered with
  ChatSystem system;        // --chat: the system message before every prompt
  std::vector<FilePrompt> prompts;
  std::string model_name, tok_error;
  const checkpoint::TokenizerRef model_tok = model_tokenizer_ref(world, source, &model_name, &tok_error);
  agree_on_errors(world, [&] {
    // The model's tokenizer (recorded in the checkpoint, a GGUF's, a Hugging Face
    // directory's); for a model that records none, the tokenizer of data.dir's dataset, else
    // bytes. A --tokenizer must be the model's.
    std::string fallback = "byte";
    if (!model_tok.known() && o.tokenizer == "auto" && !data_source.is_random() && !data_source.dir.empty()) {
      const std::string meta = data::Dataset::open(data_source.dir).meta.tokenizer;
      if (meta != "random") fallback = meta;
    }
    tok = open_model_tokenizer(model_tok, model_name, o.tokenizer == "auto" ? "" : o.tokenizer, fallback, tok_error);
    const std::string name = tok->name();
    if (o.chat) {
      format = chat_format_of(o.chat_template, model_tok, name);
      system = chat_system_of(o, model_tok, format, name);
    }
    // The prompt is encoded as prepare encodes training data (the template's markers as
    // their special ids); a reply could not end at a marker the vocabulary lacks.
    if (o.chat) data::require_end_of_turn_token(*tok, format, data::chat_template_name(format.kind));
    MESHTRAIN_REQUIRE(tok->vocab_size() <= setup.spec.dims.valid_vocab,
                      "the %s tokenizer has %lld ids, more than model.vocab_size=%lld", name.c_str(),
                      static_cast<long long>(tok->vocab_size()), static_cast<long long>(setup.spec.dims.valid_vocab));
    if (!o.prompt_file.empty()) prompts = read_prompt_file(o.prompt_file);
  });
  const LoadedWeights weights = load_checkpoint_weights(session, setup, source);
  // A reply depends on the system message as much as on the prompt: say which one, and why.
  if (o.chat && root)
    std::fprintf(stderr, "generate: chat format %s, system message %s (%s)\n",
                 data::chat_template_name(format.kind).c_str(),
                 system.text.empty() ? "none" : formats::json_text(formats::Json(system.text)).c_str(),
                 system.origin.c_str());
  // The load's staging left in the pool's cache is returned (as the trainer does before its
  // first step): the memory generation holds, and its peak, are its own.
  MemoryPool::instance().trim();
  MemoryPool::instance().reset_peaks();

  // One prompt's reply (--chat) or continuation; every prompt starts from the same seed, so
  // a prompt's result does not depend on the prompts before it in --prompt_file.
  auto generate_one = [&](const std::string& prompt, train::GenerateStats* stats) {
    if (!o.chat)
      return train::sample_text(session, *tok, prompt, o.tokens, o.sampling, o.seed, !o.no_kv_cache, stats);
    // The rendered conversation (with BOS when the model expects one); the reply ends at
    // the template's end-of-turn marker or the tokenizer's end of text.
    const data::ChatPrompt chat = data::chat_generation_prompt(format, prompt, system.text);
    std::vector<std::int32_t> ids = tok->encode(chat.text);
    if (tok->add_bos() && tok->bos_id() >= 0 && (ids.empty() || ids[0] != tok->bos_id()))
      ids.insert(ids.begin(), tok->bos_id());
    train::SamplingOptions so;
    so.max_new_tokens = o.tokens;
    so.sampling = o.sampling;
    so.seed = o.seed;
    so.stop_token = tok->eot_id() < setup.spec.dims.valid_vocab ? tok->eot_id() : -1;
    so.kv_cache = !o.no_kv_cache;
    if (!chat.end_of_turn.empty()) so.stop_sequence = tok->encode(chat.end_of_turn);
    std::string reply = tok->decode(train::generate_ids(session, std::move(ids), so, stats));
    // Llama 2's space before the reply is the model's to generate, not the reply's text.
    if (!chat.reply_lead.empty() && reply.compare(0, chat.reply_lead.size(), chat.reply_lead) == 0)
      reply.erase(0, chat.reply_lead.size());
    return reply;
  };

  if (!o.prompt_file.empty()) {
    // Batch mode: the model is loaded once; one JSON line per prompt on stdout, written as
    // soon as it is done (a long file shows progress).
    const double t0 = now_seconds();
    long long total_tokens = 0;
    for (const FilePrompt& p : prompts) {
      train::GenerateStats stats;
      const std::string text = generate_one(p.text, &stats);
      total_tokens += stats.new_tokens;
      if (!root) continue;
      nlohmann::ordered_json result =
          p.record.is_object() ? p.record : nlohmann::ordered_json::object({{"prompt", p.text}});
      // Invalid UTF-8 (a token sequence cut inside a character) is replaced, not an error.
      result["output"] = text;
      result["tokens"] = stats.new_tokens;
      // "stop": ended by the model (end of turn / end of text); "length": cut at --tokens.
      result["finish"] = stats.new_tokens < o.tokens ? "stop" : "length";
      std::printf("%s\n", result.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
      std::fflush(stdout);
    }
    const double seconds = now_seconds() - t0;
    log_forward_plan("generate", setup);
    if (root)
      std::fprintf(stderr, "generate: %s%s (loaded in %.2f s): %zu prompts from %s, %lld tokens at %s, seed %llu "
                   "(%.2f s, %.2f s/prompt)\n",
                   weights.path.c_str(), weights.step >= 0 ? strprintf(" (step %d)", weights.step).c_str() : "",
                   weights.load_seconds, prompts.size(), o.prompt_file.c_str(), total_tokens,
                   train::sampling_settings_text(o.sampling).c_str(), static_cast<unsigned long long>(o.seed), seconds,
                   seconds / prompts.size());
    return 0;
  }

  const double t0 = now_seconds();
  train::GenerateStats stats;
  const std::string text = generate_one(o.prompt, &stats);
  const double seconds = now_seconds() - t0;
  log_forward_plan("generate", setup);
  if (root) {
    // The text alone goes to stdout (pipe-friendly); what produced it goes to stderr.
    // The real count: sampling stops early when the model emits end-of-text.
    const int generated = stats.new_tokens;
    std::string count = strprintf("%d token%s", generated, generated == 1 ? "" : "s");
    if (generated < o.tokens)
      count += strprintf(" (of --tokens %d: stopped at %s)", o.tokens, o.chat ? "the end of the turn" : "end-of-text");
    std::fprintf(stderr, "generate: %s%s (loaded in %.2f s), %s at %s, seed %llu (%.2f s)\n",
                 weights.path.c_str(), weights.step >= 0 ? strprintf(" (step %d)", weights.step).c_str() : "",
                 weights.load_seconds, count.c_str(), train::sampling_settings_text(o.sampling).c_str(),
                 static_cast<unsigned long long>(o.seed), seconds);
    // Per-token cost after the first (which includes the prompt's forward): what the KV
    // cache changes; perf/bench_generate.sh compares it with and without.
    std::fprintf(stderr, "generate: %d-token context, first token %.3f s, then %.2f ms/token over %d tokens (%s)\n",
                 stats.prompt_tokens, stats.first_seconds,
                 stats.steps > 1 ? 1e3 * stats.rest_seconds / (stats.steps - 1) : 0.0, std::max(0, stats.steps - 1),
                 o.no_kv_cache ? "no KV cache" : "KV cache");
    // --chat prints the reply alone (the prompt is the user's message, not text to continue).
    if (o.chat) std::printf("%s\n", text.c_str());
    else std::printf("%s%s\n", o.prompt.c_str(), text.c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int command_generate(Runtime& rt, const Args& args) {
  // stdout is the text (or --prompt_file's JSON lines) alone: the notes of the load (an
  // unknown tokenizer, a mesh that does not fit) go to stderr with the rest of the report.
  log::send_info_to_stderr();
  GenerateOptions o;
  po::options_description own("Options of generate");
  own.add_options()
      ("checkpoint", po::value<std::string>(&o.checkpoint), kCheckpointOptionHelp)
      ("prompt", po::value<std::string>(&o.prompt)->default_value(o.prompt), "text to continue (may be empty)")
      ("tokens", po::value<int>(&o.tokens)->default_value(o.tokens), "tokens to generate (fewer if end-of-text)")
      ("temperature", po::value<double>(&o.sampling.temperature)->default_value(o.sampling.temperature, "0.8"),
       "softmax temperature; 0 = greedy (always the most likely token; --top_k, --top_p, --min_p then do nothing)")
      ("top_k", po::value<int>(&o.sampling.top_k)->default_value(o.sampling.top_k),
       "sample among the k most likely tokens; 0 = all")
      ("top_p", po::value<double>(&o.sampling.top_p)->default_value(o.sampling.top_p, "1"),
       "nucleus sampling, after --top_k: among the most likely tokens that hold at least this probability "
       "(Hugging Face's top_p); in (0, 1], 1 = off")
      ("min_p", po::value<double>(&o.sampling.min_p)->default_value(o.sampling.min_p, "0"),
       "after --top_p: drop the tokens less likely than min_p times the most likely one (Hugging Face's min_p); "
       "in [0, 1], 0 = off")
      ("seed", po::value<std::uint64_t>(&o.seed)->default_value(o.seed), "random seed of the sampler")
      ("tokenizer", po::value<std::string>(&o.tokenizer)->default_value(o.tokenizer),
       ("auto (the model's: recorded in the checkpoint, or a GGUF / Hugging Face --checkpoint's; for a checkpoint "
        "that records none, data.dir's dataset's, else byte) or " + data::tokenizer_spec_help() +
        " (must be the model's)").c_str())
      ("chat", po::bool_switch(&o.chat),
       "--prompt is a user message: render it with the model's chat template, print the reply up to the "
       "end-of-turn marker")
      ("chat_template", po::value<std::string>(&o.chat_template)->default_value(o.chat_template),
       "with --chat: auto (the format the checkpoint was trained in when it records one, else the template that "
       "comes with --tokenizer: a GGUF's tokenizer.chat_template, a chat_template.jinja or tokenizer_config.json's chat_template) or one of "
       "alpaca, chatml, llama2, llama3")
      ("system", po::value<std::string>(&o.system)->default_value(o.system),
       "with --chat: a system message before the user's (\"\" for none); default: the one the checkpoint's data "
       "was prepared with (prepare --system, or its template's default) when it records one, else the default of "
       "the chat template, if any")
      ("prompt_file", po::value<std::string>(&o.prompt_file),
       "batch mode: one prompt per line (plain text, or a JSON object with a \"prompt\" string whose other keys are "
       "copied to the result; blank lines skipped); prints one JSON line per prompt, {\"prompt\", ..., \"output\", "
       "\"tokens\", \"finish\": \"stop\"|\"length\"}, loading the model once")
      ("no_kv_cache", po::bool_switch(&o.no_kv_cache),
       "recompute the whole context for every token instead of caching keys and values (slower; for comparison)");
  const std::string usage =
      "usage: meshtrain generate [CONFIG.ini] [--checkpoint PATH] [--prompt TEXT] [--tokens N] [--temperature T] "
      "[--top_k K] [--top_p P] [--min_p P] [--seed S] [--prompt_file FILE] [--chat [--chat_template NAME] [--system TEXT]] [--no_kv_cache] [--section.key=value ...]\n\n"
      "Continues --prompt with text sampled from a checkpoint, on this job's mesh. Prints the prompt and the\n"
      "continuation on stdout, alone (notes and timings go to stderr). The model (shape, LoRA settings,\n"
      "tokenizer) comes from the checkpoint.\n"
      "--prompt_file FILE generates for every line of FILE\n"
      "and prints one JSON line per prompt instead (the continuation or --chat reply in \"output\").\n";
  CommandArgs ca = parse_command_args("generate", usage, own, args);
  if (answer_help(rt, ca.config)) return 0;
  MESHTRAIN_REQUIRE(o.tokens >= 0, "--tokens must be >= 0, not %d", o.tokens);
  const train::SamplingSettings& sampling = o.sampling;
  MESHTRAIN_REQUIRE(std::isfinite(sampling.temperature) && sampling.temperature >= 0,
                    "--temperature must be >= 0 and finite (0 = greedy), not %g", sampling.temperature);
  MESHTRAIN_REQUIRE(sampling.top_k >= 0, "--top_k must be >= 0 (0 = the whole vocabulary), not %d", sampling.top_k);
  // Written so that NaN fails too.
  MESHTRAIN_REQUIRE(sampling.top_p > 0 && sampling.top_p <= 1, "--top_p must be in (0, 1] (1 = off), not %g",
                    sampling.top_p);
  MESHTRAIN_REQUIRE(sampling.min_p >= 0 && sampling.min_p <= 1, "--min_p must be in [0, 1] (0 = off), not %g",
                    sampling.min_p);
  o.system_given = ca.own.count("system") > 0 && !ca.own["system"].defaulted();
  MESHTRAIN_REQUIRE(o.chat || (o.chat_template == "auto" && !o.system_given),
                    "--chat_template and --system only apply to chat: add --chat");
  MESHTRAIN_REQUIRE(o.prompt_file.empty() || o.prompt.empty(),
                    "--prompt and --prompt_file are two sources of prompts: give one (put the prompt in the file)");
  Config& cfg = ca.config.config;
  // A Hugging Face directory or GGUF file brings its model's shape (keys the user gave must agree).
  if (!o.checkpoint.empty()) adopt_source_model(cfg, o.checkpoint, "--checkpoint");
  configure_run_logging(rt, cfg);
  fit_mesh_to_job(cfg, rt.topology().world_size);
  const WeightsSource source = resolve_weights(rt.world(), cfg, o.checkpoint);
  cfg.loaded_weights = source.path;  // where model.base_quant=gguf finds its base
  adopt_checkpoint_model_on_all(rt.world(), cfg, source, o.checkpoint);
  take_lora_from_checkpoint(rt.world(), cfg, source);
  // Planned for what generation allocates: one sequence's forward and its KV cache, no
  // training state, whatever train.micro_batch and train.seq_len say.
  const plan::RunSetup setup =
      resolve_generate_run(cfg, rt, planned_positions(o, cfg.model.max_seq_len), !o.no_kv_cache && o.tokens > 0);
  try {
    return setup.spec.train.bf16() ? run_generate<bf16>(rt, setup, o, source)
                                   : run_generate<float>(rt, setup, o, source);
  } catch (const OutOfDeviceMemory& e) {
    // The pool named the training settings; generation holds one sequence and its KV cache.
    throw OutOfDeviceMemory(e.facts(), train::generate_memory_ways_out(setup, o.tokens));
  }
}

}  // namespace meshtrain::app
