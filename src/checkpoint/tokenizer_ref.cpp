// The tokenizer a checkpoint records, where it comes from (init_from, meta.json), how the
// commands that read a model get it back, and its Hugging Face files for an export.
#include "checkpoint/tokenizer_ref.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "format.hpp"
#include "h5.hpp"
#include "checkpoint/source_model.hpp"
#include "checkpoint/weights_path.hpp"
#include "comm/agree.hpp"
#include "comm/collectives.hpp"
#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "core/file_io.hpp"
#include "data/bpe_tokenizer.hpp"
#include "data/chat_prompt.hpp"
#include "data/chat_template.hpp"
#include "data/sentencepiece_tokenizer.hpp"
#include "data/tokenizer_config.hpp"
#include "formats/gguf_file.hpp"
#include "formats/json.hpp"
#include "tokenizer_attrs.hpp"

namespace meshtrain::checkpoint {
namespace {

namespace fs = std::filesystem;

bool same_identity(const TokenizerRef& a, const TokenizerRef& b) {
  return a.kind == b.kind && a.vocab_size == b.vocab_size && a.hash == b.hash;
}

std::string absolute_text(const std::string& path) {
  std::error_code ec;
  const fs::path abs = fs::absolute(path, ec);
  return ec ? path : abs.lexically_normal().string();
}

/// A HF tokenizer.json for a byte-level BPE read from GGUF metadata (the pipeline
/// bpe_config_from_gguf builds: Split steps, ByteLevel without its regex, ByteLevel decoding).
std::string tokenizer_json_of(const data::BpeConfig& c) {
  using ordered_json = formats::Json;
  ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  ordered_json added = ordered_json::array();
  for (const data::AddedToken& a : c.added)
    added.push_back({{"id", a.id}, {"content", a.content}, {"single_word", false}, {"lstrip", a.lstrip},
                     {"rstrip", a.rstrip}, {"normalized", !a.special}, {"special", a.special}});
  j["added_tokens"] = added;
  MESHTRAIN_REQUIRE(c.normalizer.empty(), "%s: a GGUF tokenizer with a normalizer cannot be exported", c.name.c_str());
  j["normalizer"] = nullptr;
  ordered_json pre = ordered_json::array();
  for (const data::PreTokenizerStep& s : c.pre_tokenizer) {
    if (s.kind == data::PreTokenizerStep::Kind::Split) {
      MESHTRAIN_REQUIRE(s.behavior == data::SplitBehavior::Isolated, "%s: unexpected split behaviour", c.name.c_str());
      pre.push_back({{"type", "Split"},
                     {"pattern", {{s.literal ? "String" : "Regex", s.pattern}}},
                     {"behavior", "Isolated"},
                     {"invert", false}});
    } else if (s.kind == data::PreTokenizerStep::Kind::ByteLevel) {
      pre.push_back({{"type", "ByteLevel"}, {"add_prefix_space", s.add_prefix_space}, {"trim_offsets", true},
                     {"use_regex", s.use_regex}});
    } else {
      throw UserError(strprintf("%s: a GGUF tokenizer with a Metaspace pre-tokenizer cannot be exported",
                                c.name.c_str()));
    }
  }
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", pre}};
  if (c.add_bos && c.bos_id >= 0) {
    // tokenizers adds the BOS through its post-processor (tokenizer_config.json's
    // add_bos_token is read by transformers only).
    const std::string bos = c.vocab[static_cast<std::size_t>(c.bos_id)];
    j["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair",
         {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
          {{"SpecialToken", {{"id", bos}, {"type_id", 1}}}},
          {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
        {"special_tokens", {{bos, {{"id", bos}, {"ids", {c.bos_id}}, {"tokens", {bos}}}}}}};
  } else {
    j["post_processor"] = nullptr;
  }
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  ordered_json vocab = ordered_json::object();
  for (std::size_t i = 0; i < c.vocab.size(); ++i)
    if (!c.vocab[i].empty() && !vocab.contains(c.vocab[i])) vocab[c.vocab[i]] = i;
  ordered_json merges = ordered_json::array();
  for (const auto& [a, b] : c.merges) merges.push_back(ordered_json::array({a, b}));
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", c.unk_token.empty() ? ordered_json(nullptr) : ordered_json(c.unk_token)},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", c.fuse_unk},
                {"byte_fallback", c.byte_fallback},
                {"ignore_merges", c.ignore_merges},
                {"vocab", vocab},
                {"merges", merges}};
  return j.dump(2, ' ', false, ordered_json::error_handler_t::replace) + "\n";  // as before, byte for byte
}

/// tokenizer_config.json for transformers' PreTrainedTokenizerFast: the special tokens, BOS
/// handling and the GGUF's chat template.
std::string tokenizer_config_of(const data::BpeConfig& c, const formats::GgufFile& g) {
  using ordered_json = formats::Json;
  ordered_json j;
  auto token = [&](std::int32_t id) {
    return id >= 0 && id < static_cast<std::int32_t>(c.vocab.size()) ? ordered_json(c.vocab[static_cast<std::size_t>(id)])
                                                                     : ordered_json(nullptr);
  };
  j["tokenizer_class"] = "PreTrainedTokenizerFast";
  j["add_bos_token"] = c.add_bos;
  j["add_eos_token"] = false;
  j["bos_token"] = token(c.bos_id);
  j["eos_token"] = token(c.eos_id);
  j["pad_token"] = token(c.pad_id);
  j["unk_token"] = c.unk_token.empty() ? ordered_json(nullptr) : ordered_json(c.unk_token);
  j["clean_up_tokenization_spaces"] = false;
  const std::string tmpl = g.metadata_string("tokenizer.chat_template", "");
  if (!tmpl.empty()) j["chat_template"] = tmpl;
  return j.dump(2, ' ', false, ordered_json::error_handler_t::replace) + "\n";  // as before, byte for byte
}

/// tokenizer_config.json for transformers' LlamaTokenizer beside a GGUF's SentencePiece
/// tokenizer.model: its special tokens (by piece), BOS handling and chat template.
std::string sentencepiece_config_of(const data::Tokenizer& tok, const formats::GgufFile& g) {
  using nlohmann::ordered_json;
  const std::vector<std::string> pieces = g.metadata_string_array("tokenizer.ggml.tokens");
  auto token = [&](std::int64_t id) {
    return id >= 0 && id < static_cast<std::int64_t>(pieces.size()) ? ordered_json(pieces[static_cast<std::size_t>(id)])
                                                                    : ordered_json(nullptr);
  };
  ordered_json j;
  j["tokenizer_class"] = "LlamaTokenizer";
  j["add_bos_token"] = tok.add_bos();
  j["add_eos_token"] = false;
  j["bos_token"] = token(tok.bos_id());
  j["eos_token"] = token(tok.eos_id());
  j["pad_token"] = token(tok.pad_id());
  j["unk_token"] = token(g.has_metadata("tokenizer.ggml.unknown_token_id")
                             ? g.metadata_int("tokenizer.ggml.unknown_token_id")
                             : 0);
  // SentencePiece's own behaviour (a dummy prefix space, no normalisation): what the GGUF
  // tokenizer runs, not transformers' newer non-legacy handling of text after specials.
  j["legacy"] = true;
  j["clean_up_tokenization_spaces"] = false;
  const std::string tmpl = g.metadata_string("tokenizer.chat_template", "");
  if (!tmpl.empty()) j["chat_template"] = tmpl;
  return j.dump(2, ' ', false, ordered_json::error_handler_t::replace) + "\n";
}

/// The tokenizer_config.json entry of `files` (added, empty, when there is none), parsed.
/// `spec` names the tokenizer in messages.
std::pair<std::string, std::string>& config_entry(std::vector<std::pair<std::string, std::string>>& files,
                                                  formats::Json& cfg, const std::string& spec) {
  cfg = formats::Json::object();
  auto it = files.begin();
  while (it != files.end() && it->first != "tokenizer_config.json") ++it;
  if (it == files.end()) return files.emplace_back("tokenizer_config.json", "");
  try {
    cfg = formats::parse_json(it->second);
  } catch (const std::runtime_error& e) {
    throw UserError(strprintf("%s: tokenizer_config.json is not valid JSON: %s", spec.c_str(), e.what()));
  }
  MESHTRAIN_REQUIRE(cfg.is_object(), "%s: tokenizer_config.json is not a JSON object", spec.c_str());
  return *it;
}

/// A Hugging Face directory's chat_template.jinja (transformers 4.47+, which reads it before
/// the config's "chat_template") goes into the exported tokenizer_config.json's
/// "chat_template": the export has one template, the one the tokenizer's own directory
/// renders with, and every transformers version reads it (older ones ignore the file).
void inline_chat_template_file(std::vector<std::pair<std::string, std::string>>& files, const fs::path& dir,
                               const std::string& spec) {
  std::error_code ec;
  const fs::path file = dir / data::kChatTemplateFile;
  if (!fs::exists(file, ec) && !fs::is_symlink(file, ec)) return;
  formats::Json cfg;
  auto& entry = config_entry(files, cfg, spec);
  cfg["chat_template"] = file_io::read_text_file(file.string(), "");
  entry.second = cfg.dump(2, ' ', false, formats::Json::error_handler_t::replace) + "\n";
}

/// Makes tokenizer_config.json's chat_template (in `files`) the one of `trained`, the format
/// the model was trained in, with `system` (the data's recorded system message, when known) as
/// the system message of conversations that have none, unless the tokenizer's own template
/// already is that format with that default: Hugging Face's apply_chat_template (and vLLM,
/// TGI) must prompt the model as it learnt.
void set_chat_template(std::vector<std::pair<std::string, std::string>>& files, data::ChatTemplateKind trained,
                       const std::optional<std::string>& system, const std::string& spec, std::string* note) {
  const std::string own_text = data::chat_template_text(spec);
  std::string own;  // the format of the tokenizer's template; "" when none or one meshtrain does not render
  std::string own_system;  // the system message the tokenizer's template writes when there is none
  try {
    const data::ChatFormat recognised = data::recognise_chat_template(own_text, spec);
    own = data::chat_template_name(recognised.kind);
    own_system = recognised.default_system;
  } catch (const UserError&) {
  }
  const std::string name = data::chat_template_name(trained);
  // Without a record (an older checkpoint) the tokenizer's template of the same format is
  // kept, its default system message included, as before.
  const bool other_system = system && *system != own_system;
  std::string say;
  if (own != name || other_system) {
    formats::Json cfg;
    auto& entry = config_entry(files, cfg, spec);
    cfg["chat_template"] = data::chat_template_jinja(trained, system.value_or(""));
    entry.second = cfg.dump(2, ' ', false, formats::Json::error_handler_t::replace) + "\n";
    const std::string replaced = own.empty() ? (own_text.empty() ? "none" : "a template meshtrain does not render")
                                 : own == name ? own + " with another default system message"
                                               : own;
    say = strprintf("tokenizer_config.json's chat_template is the %s format the model was trained in, not the "
                    "tokenizer's own (%s)",
                    name.c_str(), replaced.c_str());
  }
  // Which system message a conversation without one gets: the one the training data was
  // rendered with.
  if (system)
    say += std::string(say.empty() ? "" : "; ") +
           (system->empty() ? std::string("conversations without a system message get none, as in training")
                            : "conversations without a system message get the one the data was prepared with, " +
                                  formats::json_text(formats::Json(*system)));
  if (trained == data::ChatTemplateKind::Alpaca)
    say += std::string(say.empty() ? "" : "; ") +
           "the alpaca chat_template renders Stanford's prompt as `prepare` and `generate --chat` do; records of "
           "`prepare --format alpaca` with an \"input\" were trained with Stanford's input preamble and an "
           "'### Input:' block, which a conversation has no field for: prompt a model trained on those in that form "
           "yourself";
  if (note) *note = say;
}

}  // namespace

std::string TokenizerRef::str() const {
  if (!known()) return "no known tokenizer";
  if (kind == "byte") return "the byte tokenizer";
  return strprintf("the %s tokenizer %s (%lld ids, hash %s)", kind.c_str(), spec.c_str(),
                   static_cast<long long>(vocab_size), hash.empty() ? "none" : hash.c_str());
}

void write_tokenizer_attrs(hid_t group, const TokenizerRef& ref) {
  h5::write_attr(group, "tokenizer", ref.spec);
  h5::write_attr(group, "tokenizer_kind", ref.kind);
  h5::write_attr(group, "tokenizer_vocab_size", static_cast<std::int64_t>(ref.vocab_size));
  h5::write_attr(group, "tokenizer_hash", ref.hash);
  // Only when known: a checkpoint without them reads as before (text-trained, no source).
  if (!ref.chat_format.empty()) h5::write_attr(group, "chat_format", ref.chat_format);
  // Written even when "" (trained without a system turn): absent means not recorded.
  if (!ref.chat_format.empty() && ref.chat_system) h5::write_attr(group, "chat_system", *ref.chat_system);
  if (ref.source_context > 0) h5::write_attr(group, "source_context_length", ref.source_context);
}

TokenizerRef read_tokenizer_attrs(hid_t file) {
  h5::QuietErrors quiet;
  TokenizerRef out;
  h5::Handle g = h5::group(H5Gopen2(file, format::kModelGroup, H5P_DEFAULT));
  if (!g.valid()) return out;
  out.chat_format = h5::read_string_attr(g.get(), "chat_format").value_or("");
  out.chat_system = h5::read_string_attr(g.get(), "chat_system");
  out.source_context = h5::read_int_attr(g.get(), "source_context_length").value_or(0);
  const auto spec = h5::read_string_attr(g.get(), "tokenizer");
  if (!spec) return out;  // written before tokenizers were recorded
  out.recorded = true;
  out.spec = *spec;
  out.kind = h5::read_string_attr(g.get(), "tokenizer_kind").value_or("");
  out.vocab_size = h5::read_int_attr(g.get(), "tokenizer_vocab_size").value_or(0);
  out.hash = h5::read_string_attr(g.get(), "tokenizer_hash").value_or("");
  return out;
}

TokenizerRef tokenizer_ref_of(const data::Tokenizer& tok) {
  TokenizerRef r;
  r.recorded = true;
  r.spec = tok.name() == "byte" ? "byte" : absolute_text(tok.name());
  r.kind = tok.kind();
  r.vocab_size = tok.vocab_size();
  r.hash = tok.hash();
  return r;
}

TokenizerRef tokenizer_ref_of(const data::DatasetMeta& meta) {
  TokenizerRef r;
  if (meta.tokenizer.empty() || meta.tokenizer == "random" || meta.tokenizer_kind.empty()) return r;
  r.recorded = true;
  r.spec = meta.tokenizer;
  r.kind = meta.tokenizer_kind;
  r.vocab_size = meta.vocab_size;
  r.hash = meta.tokenizer_hash;
  r.chat_format = meta.chat_template;  // "" for a text dataset
  r.chat_system = meta.chat_system;    // nullopt for a text dataset and one prepared before the record
  return r;
}

TokenizerRef stored_tokenizer(const std::string& path) {
  h5::QuietErrors quiet;
  h5::Handle f = format::open_checked(path);
  return read_tokenizer_attrs(f.get());
}

namespace {

TokenizerRef source_tokenizer_only(const std::string& path) {
  std::error_code ec;
  if (path.empty()) return {};
  const fs::path src(path);
  const auto has_tokenizer_files = [&](const fs::path& dir) {
    return fs::exists(dir / "tokenizer.json", ec) || fs::exists(dir / "tokenizer.model", ec);
  };
  // A Hugging Face model directory, or a .safetensors file inside one: its tokenizer files.
  if (fs::is_directory(src, ec) && has_tokenizer_files(src)) return tokenizer_ref_of(*data::make_tokenizer(path));
  if (!fs::exists(src, ec)) return {};
  // Otherwise what the weights loader reads (a checkpoint directory: its newest checkpoint).
  const WeightsPath w = classify_weights_path(path, "checkpoint.init_from=" + path);
  switch (w.kind) {
    case WeightsKind::Hdf5:
      return fs::is_regular_file(w.path, ec) && H5Fis_hdf5(w.path.c_str()) > 0 ? stored_tokenizer(w.path)
                                                                                : TokenizerRef{};
    case WeightsKind::Gguf: {
      const formats::GgufFile g(w.path);
      if (!g.has_metadata("tokenizer.ggml.model")) return {};
      return tokenizer_ref_of(*data::make_tokenizer(w.path));
    }
    case WeightsKind::Safetensors: {
      const fs::path dir = fs::is_directory(src, ec) ? src : src.parent_path();
      if (!dir.empty() && has_tokenizer_files(dir)) return tokenizer_ref_of(*data::make_tokenizer(dir.string()));
      return {};
    }
  }
  return {};
}

}  // namespace

TokenizerRef source_tokenizer(const std::string& path) {
  TokenizerRef r = source_tokenizer_only(path);
  // A checkpoint carries its source's (read with its tokenizer record); a Hugging Face
  // directory or GGUF says its own.
  if (r.source_context == 0) r.source_context = source_context_length(path);
  return r;
}

TokenizerRef source_tokenizer(const MpiComm& world, const std::string& path) {
  TokenizerRef r;
  agree_on_errors(world, [&] {
    if (world.rank() == 0) r = source_tokenizer(path);
  });
  r.recorded = broadcast_value(world, r.recorded);
  r.spec = broadcast_string(world, r.spec);
  r.kind = broadcast_string(world, r.kind);
  r.vocab_size = broadcast_value(world, r.vocab_size);
  r.hash = broadcast_string(world, r.hash);
  r.chat_format = broadcast_string(world, r.chat_format);
  const bool has_chat_system = broadcast_value(world, r.chat_system.has_value());
  const std::string chat_system = broadcast_string(world, r.chat_system.value_or(""));
  r.chat_system = has_chat_system ? std::optional<std::string>(chat_system) : std::nullopt;
  r.source_context = broadcast_value(world, r.source_context);
  return r;
}

TokenizerRef run_tokenizer(const data::DatasetMeta& meta, const std::string& dataset_name, const TokenizerRef& init_from,
                           const std::string& init_from_name) {
  const TokenizerRef data = tokenizer_ref_of(meta);
  if (init_from.known() && data.known())
    data::check_tokenizer_match({data.kind, data.vocab_size, data.hash},
                                {init_from.kind, init_from.vocab_size, init_from.hash}, dataset_name, init_from_name);
  TokenizerRef out = init_from.known() ? init_from : data;
  // The data's chat format is what this run teaches; text data keeps the one the weights
  // were tuned in (a chat model further trained on text still answers in its format). The
  // system message goes with the format it was rendered in (chat data that does not record
  // one leaves it unknown, not the weights' earlier one).
  const TokenizerRef& chat = !data.chat_format.empty() ? data : init_from;
  out.chat_format = chat.chat_format;
  out.chat_system = chat.chat_system;
  out.source_context = init_from.source_context;
  return out;
}

void require_same_tokenizer(const TokenizerRef& given, const std::string& given_name, const TokenizerRef& model,
                            const std::string& model_name) {
  if (!model.known() || same_identity(given, model)) return;
  throw UserError(strprintf("%s is %s, but %s was trained with %s: a model reads only its own tokenizer's ids; drop "
                            "the tokenizer option (the model's is used) or give the same tokenizer",
                            given_name.c_str(), given.str().c_str(), model_name.c_str(), model.str().c_str()));
}

std::unique_ptr<data::Tokenizer> open_recorded_tokenizer(const TokenizerRef& model, const std::string& model_name) {
  std::unique_ptr<data::Tokenizer> tok;
  try {
    tok = open_tokenizer(model.spec);
  } catch (const UserError& e) {
    throw UserError(strprintf("%s records %s, which cannot be read now (%s); give the same tokenizer with "
                              "--tokenizer SPEC",
                              model_name.c_str(), model.str().c_str(), e.what()));
  }
  const TokenizerRef now = tokenizer_ref_of(*tok);
  MESHTRAIN_REQUIRE(same_identity(now, model),
                    "%s records %s, but %s now holds %s (the file changed); give the model's tokenizer with "
                    "--tokenizer SPEC",
                    model_name.c_str(), model.str().c_str(), model.spec.c_str(), now.str().c_str());
  return tok;
}

std::unique_ptr<data::Tokenizer> tokenizer_of_checkpoint(const std::string& spec) {
  std::error_code ec;
  std::string file;
  if (fs::is_directory(spec, ec)) {
    const bool has_checkpoints = !list_checkpoints(spec).empty() || fs::exists(fs::path(spec) / "latest", ec);
    const std::string dir = has_checkpoints ? spec : (fs::path(spec) / "checkpoints").string();
    if (!fs::is_directory(dir, ec)) return nullptr;
    file = newest_checkpoint(dir);
    if (file.empty()) return nullptr;
  } else if (fs::is_regular_file(spec, ec) && H5Fis_hdf5(spec.c_str()) > 0) {
    file = spec;
  } else {
    return nullptr;
  }
  const std::string name = "checkpoint " + file;
  const TokenizerRef ref = stored_tokenizer(file);
  MESHTRAIN_REQUIRE(ref.known(),
                    "%s records no tokenizer (%s); give the tokenizer itself (byte, a tokenizer.json, a Hugging Face "
                    "directory, a *.model or a .gguf)",
                    name.c_str(),
                    ref.recorded ? "its run was trained on random tokens"
                                 : "it was written before checkpoints recorded their tokenizer");
  return open_recorded_tokenizer(ref, name);
}

std::vector<std::pair<std::string, std::string>> hf_tokenizer_files(const TokenizerRef& ref, const std::string& model_name,
                                                                    std::string* note, HfTokenIds* ids,
                                                                    std::string* chat_note) {
  std::vector<std::pair<std::string, std::string>> out;
  auto say = [&](const std::string& s) {
    if (note) *note = s;
  };
  if (!ref.known()) {
    say(model_name + " records no tokenizer: the export has no tokenizer files");
    return out;
  }
  if (ref.kind == "byte") {
    say("the byte tokenizer has no Hugging Face form: the export has no tokenizer files");
    // Its ids still go into config.json: without them LlamaConfig's eos 2 is byte 0x02.
    const std::unique_ptr<data::Tokenizer> bytes = data::make_tokenizer("byte");
    if (ids) *ids = HfTokenIds{bytes->bos_id(), bytes->eos_id(), bytes->pad_id(), -1};
    return out;
  }
  // Still the tokenizer the model was trained with (same vocabulary and hash), or an error.
  const std::unique_ptr<data::Tokenizer> tok = open_recorded_tokenizer(ref, model_name);
  std::error_code ec;
  const fs::path spec(ref.spec);
  auto copy = [&](const fs::path& from, const std::string& as) {
    if (fs::is_regular_file(from, ec)) out.emplace_back(as, file_io::read_text_file(from.string(), ""));
  };
  if (fs::is_directory(spec, ec)) {
    for (const char* n : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model"})
      copy(spec / n, n);
    inline_chat_template_file(out, spec, ref.spec);
  } else if (formats::looks_like_gguf(ref.spec)) {
    const formats::GgufFile g(ref.spec);
    if (g.metadata_string("tokenizer.ggml.model", "") == "llama") {
      // SentencePiece: the model as its own library writes it, and LlamaTokenizer's config.
      out.emplace_back("tokenizer.model", data::sentencepiece_model_proto_from_gguf(g));
      out.emplace_back("tokenizer_config.json", sentencepiece_config_of(*tok, g));
    } else {
      const data::BpeConfig c = data::bpe_config_from_gguf(g);
      out.emplace_back("tokenizer.json", tokenizer_json_of(c));
      out.emplace_back("tokenizer_config.json", tokenizer_config_of(c, g));
    }
  } else {
    // A tokenizer.json or tokenizer.model file, with the tokenizer_config.json beside it.
    copy(spec, spec.extension() == ".model" ? "tokenizer.model" : "tokenizer.json");
    copy(spec.parent_path() / "tokenizer_config.json", "tokenizer_config.json");
    inline_chat_template_file(out, spec.parent_path(), ref.spec);
  }
  HfTokenIds hf;
  hf.bos = tok->bos_id();
  hf.eos = tok->eos_id();
  hf.pad = tok->pad_id();
  if (!ref.chat_format.empty()) {
    const data::ChatFormat trained = data::chat_format_by_name(ref.chat_format);
    // Alpaca has no marker: prepare ends each response with the end-of-text id, trained on.
    const std::vector<std::int32_t> end = trained.kind == data::ChatTemplateKind::Alpaca
                                              ? std::vector<std::int32_t>{tok->eot_id()}
                                              : tok->encode(data::chat_generation_prompt(trained, "x").end_of_turn);
    if (end.size() == 1 && end[0] >= 0) hf.end_of_turn = end[0];
    set_chat_template(out, trained.kind, ref.chat_system, ref.spec, chat_note);
  }
  if (ids) *ids = hf;
  return out;
}

std::unique_ptr<data::Tokenizer> open_tokenizer(const std::string& spec) {
  std::error_code ec;
  const bool tokenizer_dir = fs::is_directory(spec, ec) && (fs::exists(fs::path(spec) / "tokenizer.json", ec) ||
                                                            fs::exists(fs::path(spec) / "tokenizer.model", ec));
  if (spec != "byte" && !tokenizer_dir)
    if (std::unique_ptr<data::Tokenizer> t = tokenizer_of_checkpoint(spec)) return t;
  return data::make_tokenizer(spec);
}

void check_dataset_tokenizer(const data::DatasetMeta& meta, const std::string& dataset_dir,
                             const std::string& model_source) {
  if (meta.tokenizer == "random" || meta.tokenizer_kind.empty() || model_source.empty()) return;
  // A GGUF's or Hugging Face directory's tokenizer, or the one a meshtrain checkpoint records.
  const TokenizerRef model = source_tokenizer(model_source);
  if (!model.known()) return;
  const data::TokenizerIdentity data{meta.tokenizer_kind, meta.vocab_size, meta.tokenizer_hash};
  data::check_tokenizer_match(data, {model.kind, model.vocab_size, model.hash}, "dataset " + dataset_dir,
                              "model " + model_source);
}

}  // namespace meshtrain::checkpoint
