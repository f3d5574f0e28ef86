// The outer unit kept quantized (issue 32: the QLoRA step's largest bf16 copy, the
// dequantized embedding / LM head, never exists) against the form it replaces: a
// Transformer reading the outer unit as its quantized segment (model::OuterParams: the
// embedding rows dequantized as they are looked up, the LM head a chunk at a time) against
// the same Transformer reading the segment dequantized whole into the unit buffer (what
// FsdpEngine::wait_params gave before). For both families, a tied and an untied head (and
// GPT-2's quantized position table), nf4, int8 and gguf (a GGUF base's own blocks: Q4_K,
// Q6_K, Q8_0, F16 matrices of a "file" that lacks the padded vocabulary rows), float
// and bf16, a whole vocabulary and a tensor-parallel slice of it (tp=2, rank 1: rows 160..319):
//   * one head chunk (the default for a head of at most model::kHeadWeightChunkElements):
//     the embedding, the logits, the losses, the sequence log-probabilities and dx are bit
//     for bit the unquantized form's (the dequantized values are the same, and so are the
//     GEMMs);
//   * many chunks (forced): the embedding is still exact; the head's GEMMs are cut into
//     vocabulary-row chunks (logits) and column chunks (dx), and the BLAS may sum a dot
//     product in another order for another GEMM width (OpenBLAS 0.3.21 does for widths
//     under 8 and others), so those agree within float/bf16 rounding (tolerances below).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "config/choices.hpp"
#include "core/format.hpp"
#include "formats/gguf_file.hpp"
#include "kernels/dequant.hpp"
#include "kernels/dequant_gguf.hpp"
#include "model/init.hpp"
#include "model/transformer.hpp"
#include "parallel/gguf_base.hpp"
#include "parallel/quantized_base.hpp"
#include "test_support.hpp"

using namespace meshtrain;
using namespace meshtrain::model;

namespace {

struct Case {
  Family family;
  bool tied;
  BaseQuant quant;
  int tp, tp_rank;
};

std::string name(const Case& c) {
  return strprintf("%s %s %s tp %d rank %d", c.family == Family::Gpt2 ? "gpt2" : "llama", c.tied ? "tied" : "untied",
                   choice_name(c.quant), c.tp, c.tp_rank);
}

/// `n_blocks` blocks of ggml type `t` (n_blocks values for the float types) of random bytes
/// whose f16 scales (and float values) are small normal numbers, below 2^-9 in magnitude
/// (the largest decoded weight, a Q6_K one, below 8): finite logits.
std::vector<std::uint8_t> small_blocks(formats::GgmlType t, std::int64_t n_blocks, std::uint64_t seed) {
  using formats::GgmlType;
  std::mt19937_64 gen(seed);
  const formats::GgmlTypeTraits& tr = *formats::ggml_type_traits(static_cast<std::uint32_t>(t));
  std::vector<std::uint8_t> b(static_cast<std::size_t>(n_blocks * tr.block_bytes));
  for (auto& x : b) x = static_cast<std::uint8_t>(gen());
  // A half of exponent field 2..5 (2^-13 .. 2^-10 times 1.m), random sign and mantissa.
  const auto half = [&](std::uint8_t* p) {
    const std::uint16_t h = static_cast<std::uint16_t>((gen() & 0x83FFu) | ((2 + gen() % 4) << 10));
    p[0] = static_cast<std::uint8_t>(h & 0xFF);
    p[1] = static_cast<std::uint8_t>(h >> 8);
  };
  for (std::int64_t k = 0; k < n_blocks; ++k) {
    std::uint8_t* blk = b.data() + k * tr.block_bytes;
    switch (t) {
      case GgmlType::Q8_0: case GgmlType::F16: half(blk); break;
      case GgmlType::Q4_1: case GgmlType::Q4_K: half(blk); half(blk + 2); break;
      case GgmlType::Q6_K: half(blk + 208); break;
      default: ADD_FAILURE() << "no small blocks of " << tr.name;
    }
  }
  return b;
}

/// The outer unit of a small LoRA model on tp rank c.tp_rank of c.tp, in both forms.
template <class T>
struct Outer {
  ModelDims dims;
  std::vector<ParamSpec> specs;
  std::vector<UnitLayout> layouts;
  parallel::QuantMap map;
  Buffer<std::uint8_t> payload;
  Buffer<kernels::QuantRun> runs;
  Buffer<float> group_max;
  Buffer<T> dense;  ///< the 1-D parameters, in map.dense order
  Buffer<T> unit;   ///< the segment dequantized whole, 1-D parameters in place
  // gguf: the map of the unit's blocks and its runs (payload: the one shard's blocks).
  parallel::GgufMap gguf;
  Buffer<kernels::GgufRun> gguf_runs;

  explicit Outer(const Case& c) {
    ModelSettings s;
    s.family = c.family;
    s.vocab_size = 300;
    s.vocab_pad_multiple = 64;  // 320 rows: 160 a tp rank, whole 64-weight blocks at d_model 48
    s.d_model = c.quant == BaseQuant::Gguf ? 256 : 48;  // nf4, int8: rows start mid-block; gguf: K-quant rows
    s.n_layers = 1;
    s.n_heads = 2;
    s.ffn_dim = 96;
    s.max_seq_len = 16;
    s.tie_embeddings = c.tied;
    s.init_std = 0.5;
    s.lora_rank = 2;
    s.lora_targets = lora_target_names(c.family);
    s.base_quant = c.quant;
    dims = resolve_dims(s);
    specs = build_param_specs(dims, c.tp);
    layouts = build_layouts(specs, num_units(dims), c.tp, 1);
    const UnitLayout& L = layouts[0];
    EXPECT_EQ(L.trainable_padded(), 0);  // LoRA: the outer unit is all frozen
    const std::int64_t n = L.frozen_padded();
    std::vector<float> values(static_cast<std::size_t>(n), 0.0f);
    init_unit_range(specs, L, c.tp, c.tp_rank, 0, n, 5, values.data());
    // Norm weights away from 1 so that their copy matters.
    for (const ParamSlot& slot : L.slots)
      if (specs[slot.spec].shape.size() == 1)
        for (std::int64_t i = 0; i < slot.numel; ++i) values[static_cast<std::size_t>(slot.offset + i)] += 0.01f * (i % 7);
    if (c.quant == BaseQuant::Gguf) {
      make_gguf(c, values);
      return;
    }
    // Quantized as FsdpEngine::set_frozen does with one shard (the group maxima of this
    // rank's blocks only: both forms read the same payload, which is what is compared).
    map = parallel::build_quant_map(specs, L, c.tp, c.tp_rank, c.quant);
    std::vector<float> gmax(static_cast<std::size_t>(map.groups), 0.0f);
    if (c.quant == BaseQuant::Nf4) parallel::partial_group_max(map, values.data(), 0, n, gmax);
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(parallel::payload_bytes(c.quant, n)));
    parallel::encode_shard(c.quant, map, values.data(), 0, n, gmax, bytes.data());
    std::vector<T> dense_host;
    for (const DenseSlot& d : map.dense)
      for (std::int64_t i = 0; i < d.numel; ++i) dense_host.push_back(static_cast<T>(values[static_cast<std::size_t>(d.offset + i)]));
    payload = test::to_device(bytes);
    runs = test::to_device(map.runs);
    group_max = test::to_device(gmax.empty() ? std::vector<float>{0.0f} : gmax);
    dense = test::to_device(dense_host);
    unit = Buffer<T>(static_cast<std::size_t>(n), MemCategory::Workspace);
    const int n_runs = static_cast<int>(map.runs.size());
    if (c.quant == BaseQuant::Nf4)
      kernels::dequantize_nf4(payload.data(), static_cast<std::int64_t>(bytes.size()), n, runs.data(), n_runs,
                              group_max.data(), unit.data(), n);
    else
      kernels::dequantize_int8(payload.data(), static_cast<std::int64_t>(bytes.size()), n, runs.data(), n_runs,
                               unit.data(), n);
    std::int64_t at = 0;
    for (const DenseSlot& d : map.dense) {
      Kokkos::deep_copy(unit.view(static_cast<std::size_t>(d.offset), static_cast<std::size_t>(d.numel)),
                        dense.view(static_cast<std::size_t>(at), static_cast<std::size_t>(d.numel)));
      at += d.numel;
    }
  }

  /// gguf: the matrices as a GGUF file's blocks (the embedding Q4_K, or Q8_0 when the
  /// head is tied; the head Q6_K; GPT-2's position table F16), the file holding 300
  /// vocabulary rows of the 320; the segment laid out and filled as FsdpEngine and
  /// checkpoint/load.cpp do with one shard, and dequantized whole by kernels::dequantize_gguf.
  void make_gguf(const Case& c, const std::vector<float>& values) {
    using formats::GgmlType;
    const UnitLayout& L = layouts[0];
    const std::int64_t n = L.frozen_padded();
    std::map<std::string, std::vector<std::uint8_t>> file;
    std::uint64_t seed = 40;
    for (const ParamSpec& p : build_param_specs(dims, 1)) {
      if (!p.frozen || p.shape.size() != 2 || p.unit != 0) continue;
      const bool positions = p.role == "wpe.weight";  // GPT-2's position table: all its rows
      const GgmlType t = positions                   ? GgmlType::F16
                         : p.role == "lm_head.weight" ? GgmlType::Q6_K
                         : c.tied                     ? GgmlType::Q8_0
                                                      : GgmlType::Q4_K;
      const std::int64_t rows = positions ? p.shape[0] : 300;
      const auto& tr = *formats::ggml_type_traits(static_cast<std::uint32_t>(t));
      dims.base_formats[p.name] = {static_cast<std::uint32_t>(t), rows};
      file[p.name] = small_blocks(t, rows * p.shape[1] / tr.block_elements, ++seed);
    }
    gguf = parallel::build_gguf_map(specs, L, c.tp, c.tp_rank, dims.base_formats);
    EXPECT_EQ(gguf.shard_bytes.size(), 1u);
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(gguf.stride), 0);
    for (std::size_t r = 0; r < gguf.runs.size(); ++r) {
      const parallel::GgufMap::Source& src = gguf.sources[r];
      if (src.spec < 0) continue;
      const ParamSpec& p = specs[static_cast<std::size_t>(src.spec)];
      const auto& tr = *formats::ggml_type_traits(gguf.runs[r].type);
      const std::int64_t be = tr.block_elements, bb = tr.block_bytes;
      // Whole rows of the file (the vocabulary is split by rows): one copy.
      const std::uint8_t* from = file.at(p.name).data() + src.global / be * bb;
      std::copy(from, from + src.bytes, bytes.begin() + src.shard_byte);
    }
    std::vector<T> dense_host;
    for (const DenseSlot& d : gguf.dense)
      for (std::int64_t i = 0; i < d.numel; ++i) dense_host.push_back(static_cast<T>(values[static_cast<std::size_t>(d.offset + i)]));
    payload = test::to_device(bytes);
    gguf_runs = test::to_device(gguf.runs);
    dense = test::to_device(dense_host);
    unit = Buffer<T>(static_cast<std::size_t>(n), MemCategory::Workspace);
    kernels::dequantize_gguf(payload.data(), gguf_runs.data(), static_cast<int>(gguf.runs.size()), 0, gguf.groups, 0, n,
                             unit.data());
    std::int64_t at = 0;
    for (const DenseSlot& d : gguf.dense) {
      Kokkos::deep_copy(unit.view(static_cast<std::size_t>(d.offset), static_cast<std::size_t>(d.numel)),
                        dense.view(static_cast<std::size_t>(at), static_cast<std::size_t>(d.numel)));
      at += d.numel;
    }
  }

  OuterParams<T> quantized(BaseQuant quant) const {
    OuterParams<T> p;
    if (quant == BaseQuant::Gguf) {
      p.quant.format = kernels::QuantFormat::Gguf;
      p.quant.payload = payload.data();
      p.quant.gguf_runs = gguf_runs.data();
      p.quant.n_runs = static_cast<int>(gguf.runs.size());
      p.dense = dense.data();
      p.dense_slots = &gguf.dense;
      return p;
    }
    p.quant = kernels::QuantSegment{quant == BaseQuant::Nf4 ? kernels::QuantFormat::Nf4 : kernels::QuantFormat::Int8,
                                    payload.data(), static_cast<std::int64_t>(payload.size()),
                                    layouts[0].frozen_padded(), runs.data(), static_cast<int>(map.runs.size()),
                                    group_max.data()};
    p.dense = dense.data();
    p.dense_slots = &map.dense;
    return p;
  }
};

/// Everything the model computes from the outer unit, on the host.
struct Results {
  std::vector<double> x;       ///< embedding (N, C)
  double loss = 0, loss_only = 0;
  std::vector<double> dx;      ///< (N, C)
  std::vector<double> logp;    ///< (B)
  std::vector<float> logits;   ///< (N, valid vocab)
};

template <class T>
std::vector<double> host_doubles(const Buffer<T>& b) {
  std::vector<double> out;
  for (const T& v : test::to_host(b)) out.push_back(static_cast<double>(static_cast<float>(v)));
  return out;
}

template <class T>
Results run(const Case& c, const Outer<T>& o, const OuterParams<T>& outer, std::int64_t head_chunk) {
  // A tp slice without its group (ctx.tp is null: the reductions are no-ops) takes the
  // three-pass loss, which reads only its own vocabulary columns; the whole vocabulary the
  // fused one (the default).
  KernelPaths paths;
  paths.fused_loss = c.tp == 1;
  Transformer<T> model(o.dims, tp_dims(o.dims, c.tp, c.tp_rank), o.specs, o.layouts, paths);
  if (head_chunk > 0) model.set_head_weight_chunk(head_chunk);
  ComputeContext ctx;
  const BatchShape s{2, 12};
  const int N = s.N(), C = o.dims.d_model;
  std::mt19937_64 gen(11);
  std::uniform_int_distribution<int> tok(0, 299);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(N)), targets(static_cast<std::size_t>(N));
  for (auto& t : tokens) t = tok(gen);
  for (auto& t : targets) t = tok(gen);
  targets[5] = -1;
  std::vector<T> xh(static_cast<std::size_t>(N) * C);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : xh) v = static_cast<T>(normal(gen));
  auto d_tok = test::to_device(tokens);
  auto d_tgt = test::to_device(targets);
  auto x_in = test::to_device(xh);
  Results r;
  Buffer<T> x(static_cast<std::size_t>(N) * C, MemCategory::Workspace);
  model.embed_forward(ctx, outer, d_tok.data(), s, x.data(), c.family == Family::Gpt2 ? 3 : 0);
  r.x = host_doubles(x);
  Buffer<T> dx(static_cast<std::size_t>(N) * C, MemCategory::Workspace);
  std::vector<float> scale(static_cast<std::size_t>(N), 0.7f);
  auto row_scale = test::to_device(scale);
  r.loss = model.head_forward_backward(ctx, outer, nullptr, s, x_in.data(), d_tgt.data(), 1.0f / N, dx.data(),
                                       row_scale.data());
  r.dx = host_doubles(dx);
  r.loss_only = model.head_loss(ctx, outer, s, x_in.data(), d_tgt.data());
  r.logp = model.head_sequence_logp(ctx, outer, s, x_in.data(), d_tgt.data());
  r.logits = model.logits(ctx, outer, s, x_in.data(), false);
  return r;
}

/// Largest |a - b| over the largest |b| (a relative error of the whole tensor).
template <class V>
double tensor_err(const std::vector<V>& a, const std::vector<V>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, top = 1e-30;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    top = std::max(top, std::fabs(static_cast<double>(b[i])));
  }
  return diff / top;
}

template <class T>
void check(const Case& c) {
  SCOPED_TRACE(name(c));
  const Outer<T> o(c);
  const Results plain = run<T>(c, o, o.unit.data(), 0);
  // One head chunk (the default here): bit for bit.
  const Results one = run<T>(c, o, o.quantized(c.quant), 0);
  EXPECT_EQ(one.x, plain.x);
  EXPECT_EQ(one.loss, plain.loss);
  EXPECT_EQ(one.loss_only, plain.loss_only);
  EXPECT_EQ(one.dx, plain.dx);
  EXPECT_EQ(one.logp, plain.logp);
  EXPECT_EQ(one.logits, plain.logits);
  // Many chunks: 300 elements = 6 vocabulary rows (forward) and 1 or 2 columns (dx) a
  // chunk; 4000 = 64 rows and 16 or 24 columns. The embedding reads no GEMM: exact.
  // Measured on OpenBLAS 0.3.21 (Haswell kernels): float up to 8e-7 (dx; 3.2e-6 for the gguf
  // cases' 256 columns), bf16 0 (the sums stayed within one rounding). Bounds: 10x that for float, two bf16 ulps (2^-7) for bf16.
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1.0 / 128;
  for (const std::int64_t chunk : {std::int64_t{300}, std::int64_t{4000}}) {
    const Results many = run<T>(c, o, o.quantized(c.quant), chunk);
    EXPECT_EQ(many.x, plain.x);
    const double e_loss = test::rel_err(many.loss, plain.loss), e_only = test::rel_err(many.loss_only, plain.loss_only);
    const double e_dx = tensor_err(many.dx, plain.dx), e_logp = tensor_err(many.logp, plain.logp);
    const double e_logits = tensor_err(many.logits, plain.logits);
    std::printf("%s, head chunk %lld: loss %.1e, loss (eval) %.1e, dx %.1e, logp %.1e, logits %.1e\n", name(c).c_str(),
                static_cast<long long>(chunk), e_loss, e_only, e_dx, e_logp, e_logits);
    EXPECT_LT(e_loss, tol);
    EXPECT_LT(e_only, tol);
    EXPECT_LT(e_dx, tol);
    EXPECT_LT(e_logp, tol);
    EXPECT_LT(e_logits, tol);
  }
}

const Case kCases[] = {
    {Family::Llama, true, BaseQuant::Nf4, 1, 0},  {Family::Llama, false, BaseQuant::Nf4, 1, 0},
    {Family::Llama, false, BaseQuant::Int8, 2, 1}, {Family::Llama, true, BaseQuant::Nf4, 2, 1},
    {Family::Gpt2, true, BaseQuant::Nf4, 1, 0},   {Family::Gpt2, true, BaseQuant::Int8, 2, 1},
    {Family::Llama, false, BaseQuant::Gguf, 1, 0}, {Family::Llama, true, BaseQuant::Gguf, 2, 1},
    {Family::Gpt2, true, BaseQuant::Gguf, 2, 1},
};

}  // namespace

TEST(QuantizedOuter, FloatEqualsTheDequantizedUnit) {
  for (const Case& c : kCases) check<float>(c);
}

TEST(QuantizedOuter, Bf16EqualsTheDequantizedUnit) {
  for (const Case& c : kCases) check<bf16>(c);
}
