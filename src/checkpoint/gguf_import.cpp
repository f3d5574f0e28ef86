#include "gguf_import.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>

#include "format.hpp"
#include "formats/gguf_dequant.hpp"
#include "core/checked_int.hpp"
#include "core/error.hpp"
#include "core/format.hpp"

namespace meshtrain::checkpoint {
namespace {

/// The shortest decimal that reads back as the same float32: GGUF stores rms_norm_eps and
/// rope_theta as float32, so 1e-5 comes back as 9.99999975e-06; "1e-05" is what was meant.
std::string float32_text(double v) {
  for (int digits = 1; digits <= 9; ++digits) {
    const std::string t = strprintf("%.*g", digits, v);
    if (static_cast<float>(std::strtod(t.c_str(), nullptr)) == static_cast<float>(v)) return t;
  }
  return strprintf("%.9g", v);
}

/// Hugging Face Llama module names -> llama.cpp's.
const std::map<std::string, std::string>& block_names() {
  static const std::map<std::string, std::string> m = {
      {"input_layernorm.weight", "attn_norm.weight"},     {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},       {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},  {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},        {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"}};
  return m;
}

}  // namespace

std::string gguf_tensor_name(const std::string& hf) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  const std::string prefix = "model.layers.";
  if (hf.compare(0, prefix.size(), prefix) != 0) return "";
  const std::size_t dot = hf.find('.', prefix.size());
  if (dot == std::string::npos) return "";
  const auto it = block_names().find(hf.substr(dot + 1));
  return it == block_names().end() ? "" : "blk." + hf.substr(prefix.size(), dot - prefix.size()) + "." + it->second;
}

std::int64_t gguf_qk_row(std::int64_t hf_row, int head_dim) {
  const std::int64_t half = head_dim / 2, within = hf_row % head_dim;
  return hf_row - within + 2 * (within % half) + within / half;
}

std::vector<std::pair<std::string, std::string>> gguf_model_keys(const std::string& path) {
  const formats::GgufFile f(path);
  const std::string arch = f.metadata_string("general.architecture");
  MESHTRAIN_REQUIRE(arch == "llama",
                    "%s holds a '%s' model (general.architecture); meshtrain imports llama-architecture GGUF files",
                    path.c_str(), arch.c_str());
  // Every shape integer is range-checked here, where the GGUF key is known: the model's
  // dimensions are ints, and a block_count of 2^32 + 2 must not become 2 layers.
  const auto dim = [&](const char* key, std::int64_t fallback = -1) {
    const std::int64_t v = fallback >= 0 ? f.metadata_int(key, fallback) : f.metadata_int(key);
    return checked_int<int>(v, path, key, 1, std::numeric_limits<int>::max());
  };
  const std::int64_t d = dim("llama.embedding_length"), heads = dim("llama.attention.head_count");
  MESHTRAIN_REQUIRE(heads > 0 && d % heads == 0, "%s: llama.embedding_length %lld is not a multiple of "
                    "llama.attention.head_count %lld", path.c_str(), static_cast<long long>(d),
                    static_cast<long long>(heads));
  const std::int64_t head_dim = d / heads;
  for (const char* key : {"llama.rope.dimension_count", "llama.attention.key_length", "llama.attention.value_length"})
    MESHTRAIN_REQUIRE(f.metadata_int(key, head_dim) == head_dim,
                      "%s: %s is %lld, not d_model / n_heads = %lld; meshtrain's Llama rotates and attends over the "
                      "whole head",
                      path.c_str(), key, static_cast<long long>(f.metadata_int(key, head_dim)),
                      static_cast<long long>(head_dim));
  const std::string scaling = f.metadata_string("llama.rope.scaling.type", "none");
  MESHTRAIN_REQUIRE(scaling == "none" && !f.find_tensor("rope_freqs.weight"),
                    "%s uses RoPE scaling (%s); meshtrain implements plain RoPE only", path.c_str(),
                    scaling == "none" ? "rope_freqs.weight" : scaling.c_str());
  const formats::GgufTensorInfo* emb = f.find_tensor("token_embd.weight");
  MESHTRAIN_REQUIRE(emb && emb->ne.size() == 2, "%s has no 2-D token_embd.weight tensor", path.c_str());
  return {{"model.family", "llama"},
          {"model.vocab_size", std::to_string(emb->shape()[0])},
          {"model.d_model", std::to_string(d)},
          {"model.n_layers", std::to_string(dim("llama.block_count"))},
          {"model.n_heads", std::to_string(heads)},
          {"model.n_kv_heads", std::to_string(dim("llama.attention.head_count_kv", heads))},
          {"model.ffn_dim", std::to_string(dim("llama.feed_forward_length"))},
          {"model.tie_embeddings", f.find_tensor("output.weight") ? "false" : "true"},
          {"model.norm_eps", float32_text(f.metadata_float("llama.attention.layer_norm_rms_epsilon"))},
          {"model.rope_theta", float32_text(f.metadata_float("llama.rope.freq_base", 10000.0))}};
}

GgufWeights::GgufWeights(const std::string& path, const std::vector<model::ParamSpec>& specs,
                         const model::ModelDims& dims)
    : file_(std::make_unique<formats::GgufFile>(path)), specs_(specs), sources_(specs.size()) {
  MESHTRAIN_REQUIRE(dims.family == model::Family::Llama, "initial weights %s: GGUF files hold llama models; set "
                    "model.family=llama (or leave the model keys to the file)", path.c_str());
  std::map<std::string, bool> used;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const model::ParamSpec& p = specs[i];
    const std::string name = gguf_tensor_name(p.name);
    const formats::GgufTensorInfo* t = name.empty() ? nullptr : file_->find_tensor(name);
    if (!t && p.is_lora) continue;  // a base model for LoRA fine-tuning: adapters keep their init
    MESHTRAIN_REQUIRE(t, "initial weights %s lack the tensor %s (the parameter %s)%s", path.c_str(),
                      name.empty() ? "?" : name.c_str(), p.name.c_str(),
                      p.role == "lm_head.weight" ? "; the file ties the LM head to the embedding: set "
                                                   "model.tie_embeddings=true" : "");
    used[name] = true;
    const std::vector<std::int64_t> shape = t->shape();
    const bool short_vocab = format::has_vocab_rows(p, dims) && shape.size() == 2 && shape[0] == dims.valid_vocab &&
                             shape[1] == p.shape[1];
    MESHTRAIN_REQUIRE(shape == p.shape || short_vocab, "initial weights %s: tensor %s has shape %s, the model "
                      "expects %s for %s", path.c_str(), name.c_str(), shape_string(shape).c_str(),
                      shape_string(p.shape).c_str(), p.name.c_str());
    MESHTRAIN_REQUIRE(formats::gguf_can_dequantize(t->type),
                      "initial weights %s: tensor %s is %s; meshtrain reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K "
                      "and Q6_K (re-quantise the model to one of them with llama.cpp's llama-quantize)",
                      path.c_str(), name.c_str(), formats::ggml_type_name(t->type));
    Source& s = sources_[i];
    s.info = t;
    s.data = file_->tensor(*t).data;
    // A 1-D parameter is one ggml row; its "rows" in a Piece are its elements.
    s.one_d = shape.size() == 1;
    s.rows = shape[0];
    s.row_bytes = s.one_d ? t->nbytes : t->nbytes / static_cast<std::uint64_t>(s.rows);
    if (p.role == "self_attn.q_proj.weight" || p.role == "self_attn.k_proj.weight") s.qk_head_dim = dims.head_dim;
    bytes_ += t->nbytes;
  }
  std::vector<std::string> unexpected;
  for (const formats::GgufTensorInfo& t : file_->tensors())
    if (!used.count(t.name)) unexpected.push_back(t.name);
  if (!unexpected.empty()) {
    if (unexpected.size() > 5) {
      const std::size_t more = unexpected.size() - 5;
      unexpected.resize(5);
      unexpected.push_back(strprintf("and %zu more", more));
    }
    throw UserError(strprintf("initial weights %s hold tensors that are not parameters of this llama model: %s; "
                              "check the model settings (n_layers, tie_embeddings)",
                              path.c_str(), join(unexpected, ", ").c_str()));
  }
}

const std::byte* GgufWeights::row_data(int spec, std::int64_t row) const {
  const Source& s = sources_[spec];
  const std::int64_t r = s.qk_head_dim > 0 ? gguf_qk_row(row, s.qk_head_dim) : row;
  return s.data + static_cast<std::uint64_t>(r) * s.row_bytes;
}

void GgufWeights::read(const Piece& piece, float* dst) const {
  const Source& s = sources_[piece.spec];
  // Rows dequantise independently from the mapped file: on the host threads.
  piece.for_each_row_run_parallel([&](std::int64_t at, std::int64_t row, std::int64_t col, std::int64_t n) {
    if (s.one_d) {
      formats::gguf_dequantize(s.info->type, s.data, row, n, dst + at);  // 1-D: (row, 0) is element `row`
      return;
    }
    if (row >= s.rows) {
      std::fill(dst + at, dst + at + n, 0.0f);  // vocab padding rows absent from the file
      return;
    }
    const std::int64_t r = s.qk_head_dim > 0 ? gguf_qk_row(row, s.qk_head_dim) : row;
    formats::gguf_dequantize(s.info->type, s.data + static_cast<std::uint64_t>(r) * s.row_bytes, col, n, dst + at);
  });
}

}  // namespace meshtrain::checkpoint
