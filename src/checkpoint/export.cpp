// HDF5 checkpoint -> Hugging Face model directory (safetensors + config.json), serial.
// A LoRA checkpoint becomes a PEFT adapter (adapter_model.safetensors + adapter_config.json)
// or, with merge_lora, a full model whose projections hold W + (alpha/r) B A.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "base_ref.hpp"
#include "checksum.hpp"
#include "files.hpp"
#include "format.hpp"
#include "gguf_import.hpp"
#include "h5.hpp"
#include "import.hpp"
#include "build_config.hpp"
#include "checkpoint/checkpoint.hpp"
#include "checkpoint/weights_path.hpp"
#include "formats/gguf_file.hpp"
#include "formats/safetensors.hpp"
#include "checkpoint/export.hpp"
#include "checkpoint/tokenizer_ref.hpp"
#include "config/config.hpp"
#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/file_io.hpp"
#include "formats/json.hpp"
#include "formats/le_bytes.hpp"
#include "model/init.hpp"
#include "parallel/quantized_base.hpp"

namespace meshtrain::checkpoint {
namespace {

namespace fs = std::filesystem;

/// The special-token ids as config.json and generation_config.json write them: a key per id
/// the tokenizer has. Without them transformers falls back to LlamaConfig's bos 1 / eos 2 (or
/// GPT2Config's 50256), and generate() stops on whatever token has that id.
void put_token_ids(formats::Json& j, const HfTokenIds& ids) {
  if (ids.bos >= 0) j["bos_token_id"] = ids.bos;
  if (ids.eos >= 0) j["eos_token_id"] = ids.eos;
  if (ids.pad >= 0) j["pad_token_id"] = ids.pad;
}

/// config.json in the family's Hugging Face format (GPT2Config / LlamaConfig keys).
/// `source_context`: the context length the pretrained source declared (0: none).
std::string hf_config(const model::ModelDims& d, const std::string& torch_dtype, std::int64_t source_context,
                      const std::optional<HfTokenIds>& ids) {
  formats::Json j;
  if (d.family == model::Family::Gpt2) {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["model_type"] = "gpt2";
    j["vocab_size"] = d.valid_vocab;
    j["n_positions"] = d.max_seq_len;
    j["n_ctx"] = d.max_seq_len;
    j["n_embd"] = d.d_model;
    j["n_layer"] = d.n_layers;
    j["n_head"] = d.n_heads;
    j["n_inner"] = d.ffn_dim == 4 * d.d_model ? formats::Json(nullptr) : formats::Json(d.ffn_dim);
    j["activation_function"] = "gelu_new";
    j["layer_norm_epsilon"] = d.norm_eps;
    j["resid_pdrop"] = 0.0;
    j["embd_pdrop"] = 0.0;
    j["attn_pdrop"] = 0.0;
  } else {
    j["architectures"] = {"LlamaForCausalLM"};
    j["model_type"] = "llama";
    j["vocab_size"] = d.valid_vocab;
    j["hidden_size"] = d.d_model;
    j["intermediate_size"] = d.ffn_dim;
    j["num_hidden_layers"] = d.n_layers;
    j["num_attention_heads"] = d.n_heads;
    j["num_key_value_heads"] = d.n_kv_heads;
    j["head_dim"] = d.head_dim;
    // RoPE has no position table: the model runs as far as its source did, however short
    // the windows it was fine-tuned on (GPT-2's n_positions is its wpe table's rows).
    j["max_position_embeddings"] = std::max<std::int64_t>(d.max_seq_len, source_context);
    j["rms_norm_eps"] = d.norm_eps;
    j["rope_theta"] = d.rope_theta;
    j["hidden_act"] = "silu";
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  j["initializer_range"] = d.init_std;
  j["tie_word_embeddings"] = d.tied;
  j["torch_dtype"] = torch_dtype;
  if (ids) put_token_ids(j, *ids);
  return formats::json_text(j) + "\n";
}

/// generation_config.json, as transformers saves beside a model: the ids generate() starts,
/// pads and stops with. A model trained in a chat format whose turns end with their own token
/// (<|im_end|>, <|eot_id|>) stops on it too, as the instruct models' own files say.
std::string hf_generation_config(const HfTokenIds& ids) {
  formats::Json j;
  put_token_ids(j, ids);
  if (ids.end_of_turn >= 0 && ids.end_of_turn != ids.eos)
    j["eos_token_id"] = ids.eos >= 0 ? formats::Json::array({ids.eos, ids.end_of_turn}) : formats::Json(ids.end_of_turn);
  return formats::json_text(j) + "\n";
}

/// Rows [0, rows) of a float32 dataset (all of its columns) as floats. With `checked` (a
/// file with checksums) the whole tensor is read and compared with its checksum first:
/// UserError naming `file_path` and the dataset when they differ.
std::vector<float> read_rows(hid_t file, const std::string& ds_path, const model::ParamSpec& p, std::int64_t rows,
                             const std::string& file_path, bool checked) {
  h5::Handle ds = h5::dataset(H5Dopen2(file, ds_path.c_str(), H5P_DEFAULT));
  MESHTRAIN_REQUIRE(ds.valid(), "cannot open dataset %s", ds_path.c_str());
  h5::Handle fspace = h5::space(H5Dget_space(ds.get()));
  const std::int64_t read = checked ? p.rows() : rows;
  const hsize_t start[2] = {0, 0};
  const hsize_t count[2] = {static_cast<hsize_t>(read), static_cast<hsize_t>(p.cols())};
  H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr);
  std::vector<float> out(static_cast<std::size_t>(read * p.cols()));
  const hsize_t n = out.size();
  h5::Handle mspace = h5::space(H5Screate_simple(1, &n, nullptr));
  MESHTRAIN_REQUIRE(H5Dread(ds.get(), H5T_NATIVE_FLOAT, mspace.get(), fspace.get(), H5P_DEFAULT, out.data()) >= 0,
                    "cannot read dataset %s: the file is damaged", ds_path.c_str());
  if (checked) {
    const std::string where = strprintf("checkpoint %s: dataset %s", file_path.c_str(), ds_path.c_str());
    checksum::require_match(checksum::stored(file, ds_path, where), crc32c::value(out.data(), out.size() * sizeof(float)),
                            where);
    out.resize(static_cast<std::size_t>(rows * p.cols()));  // padding rows were read for the checksum only
  }
  return out;
}

/// The checkpoint.init_from of the run that wrote the checkpoint (from its stored config),
/// or "" when it started from scratch or the file predates the config attribute.
std::string recorded_init_from(hid_t file) {
  const auto ini = h5::read_string_attr(file, "config_ini");
  if (!ini) return "";
  std::istringstream in(*ini);
  std::string line, section;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] == '[') section = line;
    const std::string key = "init_from = ";
    // config_to_ini quotes a path it could not write bare (a '#', ';', newline...).
    if (section == "[checkpoint]" && line.compare(0, key.size(), key) == 0) return unquote_ini_value(line.substr(key.size()));
  }
  return "";
}

/// PEFT's target_modules for meshtrain's lora_targets: module-name suffixes.
std::vector<std::string> peft_target_modules(const model::ModelDims& d) {
  std::vector<std::string> out;
  for (const std::string& t : d.lora_targets) out.push_back(d.family == model::Family::Llama ? t + "_proj" : t);
  return out;
}

/// adapter_config.json as PEFT writes it for a LoRA adapter of a causal LM.
std::string peft_config(const model::ModelDims& d, const std::string& base_model) {
  formats::Json j;
  j["peft_type"] = "LORA";
  j["task_type"] = "CAUSAL_LM";
  j["r"] = d.lora_rank;
  j["lora_alpha"] = d.lora_alpha;
  j["lora_dropout"] = 0.0;
  j["target_modules"] = peft_target_modules(d);
  j["bias"] = "none";
  // GPT-2's Conv1D stores (in, out): PEFT transposes B A for it (fan_in_fan_out).
  j["fan_in_fan_out"] = d.family == model::Family::Gpt2;
  j["inference_mode"] = true;
  j["base_model_name_or_path"] = base_model.empty() ? formats::Json(nullptr) : formats::Json(base_model);
  return formats::json_text(j) + "\n";
}

/// The README of a QLoRA adapter: PEFT's adapter_config.json has no field for the base's
/// quantization, so the card says which one the adapters were trained against.
std::string qlora_readme(const model::ModelDims& d, const std::string& base_model) {
  struct Words {
    const char *format, *held, *load;
  };
  const Words w =
      d.base_quant == BaseQuant::Nf4
          ? Words{"NF4, 64-weight blocks, 8-bit block scales with a float32 maximum per 256 blocks",
                  "quantized to 4-bit NormalFloat and dequantized",
                  "in NF4 (bitsandbytes' bnb_4bit_quant_type=\"nf4\", blocksize 64, double quantization: meshtrain's "
                  "scales are linear 8-bit, not bitsandbytes' FP8, so the values differ slightly)"}
      : d.base_quant == BaseQuant::Int8
          ? Words{"int8, absmax per 64 weights with a float32 scale", "quantized to int8 and dequantized",
                  "in the same int8 block format"}
          : Words{"the GGUF file's own block types (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K), kept as the file stores them",
                  "as the GGUF file's blocks dequantize (exactly as llama.cpp and the gguf package do)",
                  "from the same GGUF file (or its dequantization, as `meshtrain convert` of it writes)"};
  return strprintf(
      "# LoRA adapter trained on a quantized base (QLoRA)\n\n"
      "- base model: %s\n- base quantization: %s (model.base_quant=%s)\n\n"
      "The adapters were trained against the base's matrices %s; norm weights and biases%s were kept unquantized. "
      "Load the base %s before applying the adapter to reproduce the trained model exactly; "
      "`meshtrain convert --merge_lora` writes the adapters merged into the dequantized base.\n",
      base_model.empty() ? "(not recorded)" : base_model.c_str(), w.format, choice_name(d.base_quant), w.held,
      d.base_quant_embeddings ? "" : ", and the token embeddings and LM head (model.base_quant_embeddings=false),",
      w.load);
}

/// w (the base projection, HF layout) += (alpha/r) B A, accumulated in double and rounded
/// once. A: (r, in), B: (out, r); Linear stores w as (out, in), GPT-2's Conv1D as (in, out).
void merge_adapter(const model::ModelDims& d, const model::ParamSpec& base, const std::vector<float>& A,
                   const std::vector<float>& B, std::vector<float>& w) {
  const std::int64_t r = d.lora_rank;
  const bool conv1d = d.family == model::Family::Gpt2;
  const std::int64_t in = conv1d ? base.rows() : base.cols(), out = conv1d ? base.cols() : base.rows();
  const double scale = d.lora_scale();
  for (std::int64_t o = 0; o < out; ++o)
    for (std::int64_t i = 0; i < in; ++i) {
      double delta = 0;
      for (std::int64_t k = 0; k < r; ++k) delta += static_cast<double>(B[o * r + k]) * A[k * in + i];
      float& x = conv1d ? w[i * out + o] : w[o * in + i];
      x = static_cast<float>(static_cast<double>(x) + scale * delta);
    }
}

/// Removes the temporaries it was given unless released (a failed export leaves nothing).
struct TempFiles {
  std::vector<std::string> paths;
  bool keep = false;
  ~TempFiles() {
    if (keep) return;
    for (const std::string& p : paths) std::remove(p.c_str());
  }
};

}  // namespace

/// The frozen base weights of an adapters-only LoRA checkpoint, read through its reference
/// (doc/checkpoints.md): an HDF5 checkpoint's /model, a safetensors file/directory, a GGUF
/// file, or the initialisation from the recorded seed. Whole tensors, serially (convert is
/// one process). Constructing it checks that the base is still the one the checkpoint
/// was trained on (UserError naming the path otherwise).
class BaseWeights {
 public:
  BaseWeights(const BaseRef& ref, const std::string& checkpoint, const std::vector<model::ParamSpec>& specs,
              const model::ModelDims& dims)
      : ref_(ref), specs_(specs) {
    if (ref.path.empty()) return;  // a random base: recomputed from its seed
    check_base(ref, checkpoint);
    const WeightsPath base = classify_weights_path(ref.path, "the base weights " + ref.path);
    if (base.kind == WeightsKind::Hdf5) {
      std::vector<model::ParamSpec> frozen;
      for (const model::ParamSpec& p : specs)
        if (p.frozen) frozen.push_back(p);
      format::validate(base.path, frozen, {false, nullptr, false});
      h5_ = h5::file(H5Fopen(base.path.c_str(), H5F_ACC_RDONLY, h5::serial_fapl().get()));
      MESHTRAIN_REQUIRE(h5_.valid(), "cannot open the base weights %s", ref.path.c_str());
      h5_path_ = base.path;
      h5_checked_ = checksum::present(h5_.get(), h5_path_);
    } else if (base.kind == WeightsKind::Gguf) {
      imported_ = std::make_unique<GgufWeights>(ref.path, specs, dims);
    } else {
      imported_ = std::make_unique<SafetensorsWeights>(ref.path, specs, dims);
    }
    if (imported_) imported_->check_once();
  }

  /// The first `rows` rows of base parameter `spec` (row-major).
  std::vector<float> read(std::size_t spec, std::int64_t rows) const {
    const model::ParamSpec& p = specs_[spec];
    const std::int64_t cols = p.cols();
    std::vector<float> out(static_cast<std::size_t>(rows * cols));
    if (h5_.valid())
      return read_rows(h5_.get(), format::dataset_path(format::kModelGroup, p.name), p, rows, h5_path_, h5_checked_);
    if (!imported_) {
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c)
          out[static_cast<std::size_t>(r * cols + c)] = model::initial_value(p, r, c, ref_.seed);
      return out;
    }
    // The whole tensor as one piece (no tensor parallelism): rows past the source's are 0.
    Piece piece;
    piece.spec = static_cast<int>(spec);
    piece.count = rows * cols;
    piece.local_cols = cols;
    const model::Box box{0, 0, rows, cols};
    piece.boxes.push_back(model::BoxPair{box, box});
    imported_->read(piece, out.data());
    return out;
  }

 private:
  BaseRef ref_;
  const std::vector<model::ParamSpec>& specs_;
  h5::Handle h5_;
  std::string h5_path_;
  bool h5_checked_ = false;  ///< the HDF5 base has checksums
  std::unique_ptr<ImportedWeights> imported_;
};

namespace {

/// What a checkpoint brings to an export, read and checked before anything is written.
struct ExportSource {
  model::ModelDims dims;
  std::vector<model::ParamSpec> specs;  ///< every parameter of the model (tp = 1)
  std::optional<BaseRef> base_ref;      ///< a LoRA checkpoint's frozen base (adapters-only files)
  std::string base_model;               ///< PEFT's base_model_name_or_path
  int step = 0;
  bool peft = false;                    ///< adapters only, as a PEFT adapter
  std::string kind;                     ///< model | peft_adapter | merged_lora
  std::vector<std::pair<std::string, std::string>> tokenizer_files;  ///< name, text
  std::string tokenizer_note, chat_note;
  std::optional<HfTokenIds> token_ids;  ///< when the checkpoint records a tokenizer with HF files
  std::int64_t source_context = 0;      ///< the pretrained source's context length (0: unknown)
};

ExportSource read_export_source(const std::string& h5_path, const ExportOptions& opt) {
  format::validate(h5_path, {}, {false, nullptr});
  ExportSource src;
  src.base_model = opt.base_model;
  {
    h5::QuietErrors quiet;
    h5::Handle f = h5::file(H5Fopen(h5_path.c_str(), H5F_ACC_RDONLY, h5::serial_fapl().get()));
    src.dims = format::read_model_dims(f.get(), h5_path);
    // A LoRA checkpoint holds its adapters only; the base is a reference (doc/checkpoints.md).
    src.base_ref = read_base_ref(f.get());
    src.step = static_cast<int>(h5::read_int_attr(f.get(), "step").value_or(0));
    // PEFT's base model: the weights the adapters were trained on.
    if (src.base_model.empty())
      src.base_model = src.base_ref && !src.base_ref->path.empty() ? src.base_ref->path : recorded_init_from(f.get());
  }
  const bool lora = src.dims.lora_rank > 0;
  MESHTRAIN_REQUIRE(lora || !opt.merge_lora,
                    "--merge_lora: checkpoint %s has no LoRA adapters (its run had model.lora_rank=0); drop "
                    "--merge_lora",
                    h5_path.c_str());
  src.peft = lora && !opt.merge_lora;
  src.kind = !lora ? "model" : src.peft ? "peft_adapter" : "merged_lora";
  // A random base is rebuilt from its seed with the init_std it was drawn with (/model does
  // not record init_std; the reference does since it was added).
  if (src.base_ref && src.base_ref->path.empty() && src.base_ref->init_std > 0)
    src.dims.init_std = src.base_ref->init_std;
  src.specs = model::build_param_specs(src.dims, 1);
  // An adapters-only checkpoint holds the trainable parameters; the rest is its base.
  std::vector<model::ParamSpec> stored;
  for (const model::ParamSpec& p : src.specs)
    if (!src.base_ref || !p.frozen) stored.push_back(p);
  format::validate(h5_path, stored, {false, nullptr});
  // The model's tokenizer goes with it (HF readers load it from the same directory); read
  // before anything is written, so a tokenizer that moved fails fast.
  const TokenizerRef tok = stored_tokenizer(h5_path);
  HfTokenIds ids;
  src.tokenizer_files = hf_tokenizer_files(tok, "checkpoint " + h5_path, &src.tokenizer_note, &ids, &src.chat_note);
  if (tok.known()) src.token_ids = ids;
  src.source_context = tok.source_context;
  return src;
}

/// The tensors an export writes, in parameter order: the base weights (merged with their
/// adapters) or, for a PEFT adapter, the adapters only.
struct ExportTensors {
  std::vector<formats::SafetensorsEntry> entries;
  std::vector<std::size_t> spec_of;  ///< entries[i] holds specs[spec_of[i]]
  std::uint64_t bytes = 0;
};

ExportTensors export_tensors(const ExportSource& src, bool bf) {
  ExportTensors t;
  for (std::size_t i = 0; i < src.specs.size(); ++i) {
    const model::ParamSpec& p = src.specs[i];
    if (p.is_lora != src.peft) continue;
    // PEFT names adapters by their path in PeftModel: base_model.model.<the model's name>.
    formats::SafetensorsEntry e{src.peft ? "base_model.model." + p.name : p.name, bf ? "BF16" : "F32", p.shape};
    if (format::has_vocab_rows(p, src.dims)) e.shape[0] = src.dims.valid_vocab;  // padding rows are not exported
    t.entries.push_back(e);
    t.spec_of.push_back(i);
    t.bytes += e.bytes();
  }
  return t;
}

/// Which entries go to which file: greedy in parameter order, a new shard when the next
/// tensor would overflow `max_bytes`. A PEFT adapter is always one file (PEFT reads no index).
struct Shards {
  std::vector<std::vector<std::size_t>> entries;  ///< per file, indices into ExportTensors::entries
  std::vector<std::string> names;
};

Shards shard_tensors(const std::vector<formats::SafetensorsEntry>& entries, std::uint64_t max_bytes, bool peft) {
  Shards s;
  s.entries.emplace_back();
  std::uint64_t in_shard = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (!peft && !s.entries.back().empty() && in_shard + entries[i].bytes() > max_bytes) {
      s.entries.emplace_back();
      in_shard = 0;
    }
    s.entries.back().push_back(i);
    in_shard += entries[i].bytes();
  }
  const std::size_t n = s.entries.size();
  for (std::size_t k = 0; k < n; ++k)
    s.names.push_back(peft     ? "adapter_model.safetensors"
                      : n == 1 ? "model.safetensors"
                               : strprintf("model-%05zu-of-%05zu.safetensors", k + 1, n));
  return s;
}

/// fp32 values as the little-endian bytes of a safetensors F32 or BF16 tensor.
void encode_tensor(const std::vector<float>& v, bool bf, std::vector<unsigned char>& out) {
  if (bf) {
    out.resize(v.size() * 2);
    for (std::size_t i = 0; i < v.size(); ++i) formats::store_le16(out.data() + 2 * i, bf16::from_float(v[i]));
  } else {
    out.resize(v.size() * 4);
    for (std::size_t i = 0; i < v.size(); ++i) {
      std::uint32_t bits;
      std::memcpy(&bits, &v[i], 4);
      formats::store_le32(out.data() + 4 * i, bits);
    }
  }
}

}  // namespace

ExportSummary export_safetensors(const std::string& h5_path, const std::string& out_dir, const ExportOptions& opt) {
  MESHTRAIN_REQUIRE(opt.dtype == "fp32" || opt.dtype == "bf16", "--dtype must be fp32 or bf16, not '%s'",
                    opt.dtype.c_str());
  MESHTRAIN_REQUIRE(opt.max_shard_bytes > 0, "--max_shard_size must be positive");
  const bool bf = opt.dtype == "bf16";

  // 1. What the checkpoint holds, what is written and into which files.
  const ExportSource src = read_export_source(h5_path, opt);
  const std::vector<model::ParamSpec>& specs = src.specs;
  // Merging needs the base; a PEFT adapter only names it.
  std::unique_ptr<BaseWeights> base;
  if (src.base_ref && !src.peft) base = std::make_unique<BaseWeights>(*src.base_ref, h5_path, specs, src.dims);
  std::map<std::string, std::size_t> spec_index;
  for (std::size_t i = 0; i < specs.size(); ++i) spec_index[specs[i].name] = i;
  const ExportTensors tensors = export_tensors(src, bf);
  const Shards shards = shard_tensors(tensors.entries, opt.max_shard_bytes, src.peft);

  // 2. The safetensors files, under temporary names.
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  MESHTRAIN_REQUIRE(fs::is_directory(out_dir, ec), "cannot create the output directory %s: %s", out_dir.c_str(),
                    ec ? ec.message().c_str() : "a file of that name exists");
  TempFiles temps;
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"meshtrain_step", std::to_string(src.step)},
      {"meshtrain_version", MESHTRAIN_VERSION}, {"source", fs::path(h5_path).filename().string()}};
  h5::QuietErrors quiet;
  h5::Handle f = h5::file(H5Fopen(h5_path.c_str(), H5F_ACC_RDONLY, h5::serial_fapl().get()));
  MESHTRAIN_REQUIRE(f.valid(), "cannot open %s", h5_path.c_str());
  // Every tensor read is checked against its checksum before anything is written from it.
  const bool checked = checksum::present(f.get(), h5_path);
  auto read_param = [&](std::size_t spec, std::int64_t rows) {
    if (base && specs[spec].frozen) return base->read(spec, rows);
    return read_rows(f.get(), format::dataset_path(format::kModelGroup, specs[spec].name), specs[spec], rows, h5_path,
                     checked);
  };
  // The base weight of `spec` with its adapters merged in when it has them and they are merged.
  auto merged = [&](std::size_t spec, std::int64_t rows) {
    std::vector<float> v = read_param(spec, rows);
    const model::ParamSpec& p = specs[spec];
    // QLoRA: the model that trained had the base's matrices dequantized (as PEFT's merge
    // into a bitsandbytes 4-bit layer dequantizes it first); the merge goes into those.
    if (base && p.frozen) parallel::dequantized_tensor(src.dims.base_quant, src.dims.base_quant_embeddings, p, v);
    const std::string module = p.name.substr(0, p.name.size() - 7);  // without ".weight"
    const auto a = spec_index.find(module + ".lora_A.weight");
    if (!src.peft && a != spec_index.end()) {
      const std::size_t b = spec_index.at(module + ".lora_B.weight");
      merge_adapter(src.dims, p, read_param(a->second, src.dims.lora_rank), read_param(b, specs[b].rows()), v);
    }
    return v;
  };
  formats::Json weight_map = formats::Json::object();
  std::vector<std::string> names = shards.names;
  for (std::size_t s = 0; s < shards.entries.size(); ++s) {
    std::vector<formats::SafetensorsEntry> shard_entries;
    for (std::size_t i : shards.entries[s]) {
      shard_entries.push_back(tensors.entries[i]);
      weight_map[tensors.entries[i].name] = names[s];
    }
    const std::string tmp = out_dir + "/" + names[s] + ".tmp";
    temps.paths.push_back(tmp);
    formats::write_safetensors(tmp, shard_entries, metadata, [&](std::size_t k, std::vector<unsigned char>& out) {
      encode_tensor(merged(tensors.spec_of[shards.entries[s][k]], shard_entries[k].shape[0]), bf, out);
    });
  }
  f.reset();

  // 3. The JSON and tokenizer files beside them.
  auto write_text = [&](const std::string& name, const std::string& text) {
    const std::string tmp = out_dir + "/" + name + ".tmp";
    temps.paths.push_back(tmp);
    // A full disk (ENOSPC, EDQUOT, EIO) is an IoError (exit 74), as in `train`.
    file_io::write_file(tmp, text);
    names.push_back(name);
  };
  if (src.peft) write_text("adapter_config.json", peft_config(src.dims, src.base_model));
  else write_text("config.json", hf_config(src.dims, bf ? "bfloat16" : "float32", src.source_context, src.token_ids));
  if (!src.peft && src.token_ids) write_text("generation_config.json", hf_generation_config(*src.token_ids));
  if (src.peft && src.dims.base_quant != BaseQuant::None) write_text("README.md", qlora_readme(src.dims, src.base_model));
  if (shards.entries.size() > 1)
    write_text("model.safetensors.index.json",
               formats::json_pretty({{"metadata", {{"total_size", tensors.bytes}}}, {"weight_map", weight_map}}) +
                   "\n");
  for (const auto& [name, text] : src.tokenizer_files) write_text(name, text);

  // 4. Everything is written: move the files into place.
  ExportSummary summary;
  for (std::size_t i = 0; i < names.size(); ++i) {
    file_io::rename_durably(temps.paths[i], out_dir + "/" + names[i]);
    summary.files.push_back(names[i]);
  }
  temps.keep = true;
  summary.tensor_bytes = tensors.bytes;
  summary.tensors = static_cast<int>(tensors.entries.size());
  summary.step = src.step;
  summary.kind = src.kind;
  summary.base_model = src.base_model;
  summary.tokenizer_note = src.tokenizer_note;
  summary.chat_note = src.chat_note;
  return summary;
}

}  // namespace meshtrain::checkpoint
