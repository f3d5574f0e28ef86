#include "model/model_dims.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "model/param_spec.hpp"

namespace meshtrain::model {

Family parse_family(const std::string& name) {
  if (const std::optional<Family> f = parse_choice<Family>(name)) return *f;
  throw UserError(strprintf("model.family = '%s' is not known; use %s", name.c_str(), choice_list<Family>().c_str()));
}

const char* family_name(Family f) { return choice_name(f); }

std::vector<std::string> lora_target_names(Family f) {
  if (f == Family::Gpt2) return {"c_attn", "attn.c_proj", "c_fc", "mlp.c_proj"};
  return {"q", "k", "v", "o", "gate", "up", "down"};
}

const char* lora_target_role(Family f, int target) {
  static const char* const kGpt2[] = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
  static const char* const kLlama[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                       "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
  const int n = f == Family::Gpt2 ? 4 : 7;
  MESHTRAIN_ASSERT(target >= 0 && target < n, "LoRA target index %d out of range", target);
  return f == Family::Gpt2 ? kGpt2[target] : kLlama[target];
}

std::string lora_auto_targets(Family f) {
  // PEFT's default target_modules for these architectures: the attention projections,
  // q_proj/v_proj for Llama and the fused c_attn (q, k and v) for GPT-2.
  return f == Family::Gpt2 ? "c_attn" : "q,v";
}

ModelDims resolve_dims(const ModelSettings& c) {
  ModelDims d;
  d.family = c.family;
  d.valid_vocab = c.vocab_size;
  const std::int64_t pad = c.vocab_pad_multiple;
  d.vocab = (c.vocab_size + pad - 1) / pad * pad;
  d.d_model = c.d_model;
  d.n_layers = c.n_layers;
  d.n_heads = c.n_heads;
  d.n_kv_heads = c.n_kv_heads < 0 ? c.n_heads : c.n_kv_heads;
  MESHTRAIN_REQUIRE(c.d_model % c.n_heads == 0,
                    "model.d_model=%d is not divisible by model.n_heads=%d (head_dim must be whole)",
                    c.d_model, c.n_heads);
  d.head_dim = c.d_model / c.n_heads;
  MESHTRAIN_REQUIRE(d.head_dim % 2 == 0 || d.family == Family::Gpt2,
                    "llama needs an even head_dim for RoPE; d_model/n_heads = %d", d.head_dim);
  if (d.family == Family::Gpt2) {
    MESHTRAIN_REQUIRE(d.n_kv_heads == d.n_heads,
                      "gpt2 has no grouped-query attention: leave model.n_kv_heads at -1 (or = n_heads)");
  }
  MESHTRAIN_REQUIRE(d.n_heads % d.n_kv_heads == 0,
                    "model.n_heads=%d must be a multiple of model.n_kv_heads=%d", d.n_heads, d.n_kv_heads);
  if (c.ffn_dim > 0) {
    d.ffn_dim = c.ffn_dim;
  } else if (d.family == Family::Gpt2) {
    d.ffn_dim = 4 * c.d_model;
  } else {
    // Llama rule: 2/3 of 4d, rounded up to a multiple of 256.
    const int raw = 8 * c.d_model / 3;
    d.ffn_dim = (raw + 255) / 256 * 256;
  }
  d.max_seq_len = c.max_seq_len;
  d.tied = d.family == Family::Gpt2 ? true : c.tie_embeddings;
  if (d.family == Family::Gpt2)
    MESHTRAIN_REQUIRE(c.tie_embeddings, "gpt2 always ties the LM head to the token embedding; remove model.tie_embeddings=false");
  d.norm_eps = c.norm_eps;
  d.rope_theta = c.rope_theta;
  d.init_std = c.init_std;
  d.lora_rank = c.lora_rank;
  d.lora_alpha = c.lora_alpha;
  if (c.lora_rank > 0) {
    const std::vector<std::string> valid = lora_target_names(d.family);
    for (const std::string& t : c.lora_targets) {
      const auto it = std::find(valid.begin(), valid.end(), t);
      MESHTRAIN_REQUIRE(it != valid.end(), "model.lora_targets: '%s' is not a %s projection; choose from %s", t.c_str(),
                        family_name(d.family), join(valid, ", ").c_str());
      // Twice the same projection would build two adapters on it whose tensors share one
      // name in the checkpoint (the first save then fails, the run's work lost).
      MESHTRAIN_REQUIRE(std::find(d.lora_targets.begin(), d.lora_targets.end(), t) == d.lora_targets.end(),
                        "model.lora_targets names '%s' twice; give each projection once", t.c_str());
      d.lora_targets.push_back(t);
      d.lora_target_ids.push_back(static_cast<int>(it - valid.begin()));
    }
    MESHTRAIN_REQUIRE(!d.lora_targets.empty(), "model.lora_rank=%d needs at least one model.lora_targets entry",
                      c.lora_rank);
  }
  // A quantized base is the frozen base of a LoRA run: a trained parameter needs its fp32
  // master, so without adapters there is nothing frozen to quantize.
  MESHTRAIN_REQUIRE(c.base_quant == BaseQuant::None || c.lora_rank > 0,
                    "model.base_quant=%s quantizes the frozen base of a LoRA run, but model.lora_rank=0 trains every "
                    "weight; set model.lora_rank > 0 (QLoRA) or model.base_quant=none",
                    choice_name(c.base_quant));
  d.base_quant = c.base_quant;
  MESHTRAIN_REQUIRE(c.base_quant_embeddings || c.base_quant != BaseQuant::None,
                    "model.base_quant_embeddings=false keeps the embeddings and LM head of a quantized base in the "
                    "compute dtype, but model.base_quant=none quantizes nothing; set model.base_quant=nf4, int8 or gguf, or "
                    "drop model.base_quant_embeddings");
  d.base_quant_embeddings = c.base_quant_embeddings || c.base_quant == BaseQuant::None;
  return d;
}

std::int64_t ModelDims::num_params() const {
  std::int64_t n = 0;
  for (const ParamSpec& p : build_param_specs(*this)) n += p.numel();
  return n;
}

double ModelDims::flops_per_token_forward(int seq_len) const {
  // Matmul parameters: everything except norms, biases and position/token lookup (the LM
  // head matmul uses the embedding when tied, so count it once as a matmul).
  const double C = d_model, F = ffn_dim, layers = n_layers;
  const double kv = static_cast<double>(n_kv_heads) * head_dim;
  const double attn = C * C /*q*/ + 2 * C * kv /*k,v*/ + C * C /*o*/;
  const double mlp = family == Family::Gpt2 ? 2 * C * F : 3 * C * F;
  const double head = static_cast<double>(vocab) * C;
  const double matmul = layers * (attn + mlp) + head;
  const double attention = 2.0 * 2.0 * layers * seq_len * C;  // q k^T and p v, full (not causal-halved)
  return 2.0 * matmul + attention;
}

TpDims tp_dims(const ModelDims& d, int tp, int rank) {
  TpDims t;
  t.tp = tp;
  t.rank = rank;
  MESHTRAIN_REQUIRE(d.n_heads % tp == 0,
                    "model.n_heads=%d is not divisible by parallel.tp=%d; attention heads are split "
                    "over tensor-parallel ranks: choose tp dividing %d",
                    d.n_heads, tp, d.n_heads);
  MESHTRAIN_REQUIRE(d.ffn_dim % tp == 0,
                    "the MLP width (model.ffn_dim=%d) is not divisible by parallel.tp=%d", d.ffn_dim, tp);
  MESHTRAIN_REQUIRE(d.vocab % tp == 0,
                    "the vocabulary (%lld) is not divisible by parallel.tp=%d and is not padded; set "
                    "model.vocab_pad_multiple=%d (or a multiple of it) to pad it",
                    static_cast<long long>(d.vocab), tp, tp * 64);
  t.heads = d.n_heads / tp;
  t.q_head_offset = rank * t.heads;
  if (d.n_kv_heads % tp == 0) {
    t.kv_heads = d.n_kv_heads / tp;
    t.kv_head_offset = rank * t.kv_heads;
  } else {
    t.kv_replicated = true;
    t.kv_heads = d.n_kv_heads;
    t.kv_head_offset = 0;
  }
  t.ffn = d.ffn_dim / tp;
  t.vocab = d.vocab / tp;
  t.vocab_start = rank * t.vocab;
  return t;
}

}  // namespace meshtrain::model
