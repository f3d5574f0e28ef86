#include "model/param_spec.hpp"

#include <cmath>

#include "core/error.hpp"
#include "core/format.hpp"

namespace meshtrain::model {

std::int64_t ParamSpec::numel() const {
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

namespace {

struct SpecBuilder {
  std::vector<ParamSpec>& out;
  int unit;
  std::string prefix;

  ParamSpec& add(const std::string& role, std::vector<std::int64_t> shape, int split_dim,
                 InitKind init, double std_dev, bool decay) {
    ParamSpec p;
    p.name = prefix + role;
    p.role = role;
    p.shape = std::move(shape);
    p.split_dim = split_dim;
    p.init = init;
    p.init_std = std_dev;
    p.weight_decay = decay;
    p.unit = unit;
    out.push_back(p);
    return out.back();
  }
};

void fix_norm_shapes(std::vector<ParamSpec>& specs, std::int64_t C) {
  for (auto& p : specs)
    if (p.shape.size() == 1 && p.shape[0] == 0) p.shape[0] = C;
}

void gpt2_specs(const ModelDims& d, std::vector<ParamSpec>& out) {
  const std::int64_t C = d.d_model, F = d.ffn_dim, V = d.vocab, P = d.max_seq_len;
  const double std_dev = d.init_std, proj_std = d.init_std / std::sqrt(2.0 * d.n_layers);
  SpecBuilder outer{out, 0, "transformer."};
  outer.add("wte.weight", {V, C}, 0, InitKind::Normal, std_dev, false).is_embedding = true;
  outer.add("wpe.weight", {P, C}, -1, InitKind::Normal, std_dev, false).is_embedding = true;
  outer.add("ln_f.weight", {C}, -1, InitKind::Ones, 0, false);
  outer.add("ln_f.bias", {C}, -1, InitKind::Zeros, 0, false);
  for (int i = 0; i < d.n_layers; ++i) {
    SpecBuilder b{out, 1 + i, strprintf("transformer.h.%d.", i)};
    b.add("ln_1.weight", {C}, -1, InitKind::Ones, 0, false);
    b.add("ln_1.bias", {C}, -1, InitKind::Zeros, 0, false);
    // HF Conv1D stores (in, out): c_attn (C, 3C) with columns [q | k | v] — a fused split.
    b.add("attn.c_attn.weight", {C, 3 * C}, 1, InitKind::Normal, std_dev, true).split_chunks = 3;
    b.add("attn.c_attn.bias", {3 * C}, 0, InitKind::Zeros, 0, false).split_chunks = 3;
    b.add("attn.c_proj.weight", {C, C}, 0, InitKind::Normal, proj_std, true);  // row-parallel
    b.add("attn.c_proj.bias", {C}, -1, InitKind::Zeros, 0, false);
    b.add("ln_2.weight", {C}, -1, InitKind::Ones, 0, false);
    b.add("ln_2.bias", {C}, -1, InitKind::Zeros, 0, false);
    b.add("mlp.c_fc.weight", {C, F}, 1, InitKind::Normal, std_dev, true);
    b.add("mlp.c_fc.bias", {F}, 0, InitKind::Zeros, 0, false);
    b.add("mlp.c_proj.weight", {F, C}, 0, InitKind::Normal, proj_std, true);
    b.add("mlp.c_proj.bias", {C}, -1, InitKind::Zeros, 0, false);
  }
}

void llama_specs(const ModelDims& d, std::vector<ParamSpec>& out) {
  const std::int64_t C = d.d_model, F = d.ffn_dim, V = d.vocab;
  const std::int64_t Q = static_cast<std::int64_t>(d.n_heads) * d.head_dim;
  const std::int64_t KV = static_cast<std::int64_t>(d.n_kv_heads) * d.head_dim;
  const double std_dev = d.init_std, proj_std = d.init_std / std::sqrt(2.0 * d.n_layers);
  SpecBuilder outer{out, 0, ""};
  outer.add("model.embed_tokens.weight", {V, C}, 0, InitKind::Normal, std_dev, false).is_embedding = true;
  outer.add("model.norm.weight", {C}, -1, InitKind::Ones, 0, false);
  if (!d.tied) outer.add("lm_head.weight", {V, C}, 0, InitKind::Normal, std_dev, true);
  for (int i = 0; i < d.n_layers; ++i) {
    SpecBuilder b{out, 1 + i, strprintf("model.layers.%d.", i)};
    b.add("input_layernorm.weight", {C}, -1, InitKind::Ones, 0, false);
    // q, k, v adjacent: one GEMM against the stacked (q|k|v) rows.
    b.add("self_attn.q_proj.weight", {Q, C}, 0, InitKind::Normal, std_dev, true);
    b.add("self_attn.k_proj.weight", {KV, C}, 0, InitKind::Normal, std_dev, true).fused_with_previous = true;
    b.add("self_attn.v_proj.weight", {KV, C}, 0, InitKind::Normal, std_dev, true).fused_with_previous = true;
    b.add("self_attn.o_proj.weight", {C, Q}, 1, InitKind::Normal, proj_std, true);
    b.add("post_attention_layernorm.weight", {C}, -1, InitKind::Ones, 0, false);
    b.add("mlp.gate_proj.weight", {F, C}, 0, InitKind::Normal, std_dev, true);
    b.add("mlp.up_proj.weight", {F, C}, 0, InitKind::Normal, std_dev, true).fused_with_previous = true;
    b.add("mlp.down_proj.weight", {C, F}, 1, InitKind::Normal, proj_std, true);
  }
}

/// LoRA (Hu et al. 2021): W x + (alpha/r) B A x with A (r, in), B (out, r), B = 0 at start,
/// every base parameter frozen. Adapters follow their base projection's tensor parallelism:
///   column-parallel base (out split): B split like the base's rows, A replicated with
///     partial gradients (summed over tp);
///   row-parallel base (in split): A split by columns, B replicated (identical gradients).
/// Names follow PEFT: <module>.lora_A.weight, <module>.lora_B.weight.
void add_lora_specs(const ModelDims& d, std::vector<ParamSpec>& out) {
  for (auto& p : out) p.frozen = true;
  const std::size_t n_base = out.size();
  for (std::size_t i = 0; i < n_base; ++i) {
    const ParamSpec base = out[i];  // copy: out grows below
    if (base.unit == 0) continue;
    for (const int t : d.lora_target_ids) {
      if (base.role != std::string(lora_target_role(d.family, t)) + ".weight") continue;
      // Logical (in, out) of the projection: HF Conv1D (gpt2) stores (in, out), Linear (out, in).
      const bool conv1d = d.family == Family::Gpt2;
      const std::int64_t in = conv1d ? base.shape[0] : base.shape[1];
      const std::int64_t outd = conv1d ? base.shape[1] : base.shape[0];
      const int out_dim = conv1d ? 1 : 0;  // the base's output dimension
      const bool column_parallel = base.split_dim == out_dim;
      const bool row_parallel = base.split_dim >= 0 && !column_parallel;
      const std::string module = base.name.substr(0, base.name.size() - 7);  // strip ".weight"
      const std::string mrole = base.role.substr(0, base.role.size() - 7);
      ParamSpec a;
      a.name = module + ".lora_A.weight";
      a.role = mrole + ".lora_A.weight";
      a.shape = {d.lora_rank, in};
      a.init = InitKind::Uniform;
      a.init_std = 1.0 / std::sqrt(static_cast<double>(in));  // PEFT: kaiming_uniform(a=sqrt(5))
      a.weight_decay = false;
      a.unit = base.unit;
      a.is_lora = true;
      ParamSpec b = a;
      b.name = module + ".lora_B.weight";
      b.role = mrole + ".lora_B.weight";
      b.shape = {outd, d.lora_rank};
      b.init = InitKind::Zeros;
      b.init_std = 0;
      if (column_parallel) {
        a.grad_tp_sum = true;
        b.split_dim = 0;
        b.split_chunks = base.split_chunks;
      } else if (row_parallel) {
        a.split_dim = 1;
      } else if (base.grad_tp_sum) {  // replicated GQA key/value projection
        a.grad_tp_sum = b.grad_tp_sum = true;
      }
      out.push_back(a);
      out.push_back(b);
    }
  }
}

}  // namespace

std::vector<ParamSpec> build_param_specs(const ModelDims& d, int tp) {
  std::vector<ParamSpec> out;
  if (d.family == Family::Gpt2) gpt2_specs(d, out);
  else llama_specs(d, out);
  fix_norm_shapes(out, d.d_model);
  if (d.family == Family::Llama && d.n_kv_heads % tp != 0) {
    for (auto& p : out)
      if (p.role == "self_attn.k_proj.weight" || p.role == "self_attn.v_proj.weight") {
        p.split_dim = -1;
        p.grad_tp_sum = true;
      }
  }
  if (d.lora_rank > 0) add_lora_specs(d, out);
  return out;
}

std::vector<std::int64_t> local_shape(const ParamSpec& p, int tp) {
  std::vector<std::int64_t> s = p.shape;
  if (p.split_dim >= 0) {
    MESHTRAIN_ASSERT(s[p.split_dim] % (tp * p.split_chunks) == 0, "%s: dim %d (%lld) not divisible by tp=%d x %d chunks",
                     p.name.c_str(), p.split_dim, static_cast<long long>(s[p.split_dim]), tp, p.split_chunks);
    s[p.split_dim] /= tp;
  }
  return s;
}

std::int64_t local_numel(const ParamSpec& p, int tp) {
  std::int64_t n = 1;
  for (auto s : local_shape(p, tp)) n *= s;
  return n;
}

std::vector<Box> local_run_boxes(const ParamSpec& p, int tp, std::int64_t begin, std::int64_t end) {
  std::vector<Box> boxes;
  if (end <= begin) return boxes;
  const auto ls = local_shape(p, tp);
  const std::int64_t cols = ls.size() > 1 ? ls[1] : 1;
  if (ls.size() == 1) {
    // 1-D: one run of rows with a single column.
    boxes.push_back({begin, 0, end - begin, 1});
    return boxes;
  }
  std::int64_t r0 = begin / cols, c0 = begin % cols;
  const std::int64_t r1 = end / cols, c1 = end % cols;
  if (r0 == r1) {  // inside one row
    boxes.push_back({r0, c0, 1, c1 - c0});
    return boxes;
  }
  if (c0 != 0) {  // partial first row
    boxes.push_back({r0, c0, 1, cols - c0});
    ++r0;
  }
  if (r1 > r0) boxes.push_back({r0, 0, r1 - r0, cols});  // whole rows
  if (c1 != 0) boxes.push_back({r1, 0, 1, c1});           // partial last row
  return boxes;
}

std::vector<BoxPair> local_to_global(const ParamSpec& p, int tp, int tp_rank, const Box& local) {
  std::vector<BoxPair> out;
  if (p.split_dim < 0 || tp == 1) {
    out.push_back({local, local});
    return out;
  }
  // Along the split dim the logical extent S is k chunks of S/k; each chunk is sliced into
  // tp pieces of w = S/(k*tp); local index j -> chunk j / w, offset j % w.
  const std::int64_t S = p.shape[p.split_dim];
  const std::int64_t k = p.split_chunks;
  const std::int64_t w = S / (k * tp);
  const bool rows = p.split_dim == 0;
  std::int64_t start = rows ? local.row0 : local.col0;
  const std::int64_t count = rows ? local.nrows : local.ncols;
  const std::int64_t stop = start + count;
  while (start < stop) {
    const std::int64_t chunk = start / w;
    const std::int64_t within = start % w;
    const std::int64_t n = std::min(stop - start, w - within);
    const std::int64_t g = chunk * (S / k) + tp_rank * w + within;
    BoxPair bp{local, local};
    if (rows) {
      bp.local.row0 = start;
      bp.local.nrows = n;
      bp.global.row0 = g;
      bp.global.nrows = n;
    } else {
      bp.local.col0 = start;
      bp.local.ncols = n;
      bp.global.col0 = g;
      bp.global.ncols = n;
    }
    out.push_back(bp);
    start += n;
  }
  return out;
}

}  // namespace meshtrain::model
