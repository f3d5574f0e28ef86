#include "parallel/quantized_base.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.hpp"
#include "formats/int8_blocks.hpp"
#include "formats/nf4.hpp"

namespace meshtrain::parallel {
namespace {

constexpr std::int64_t kBlock = formats::nf4::kBlock;
constexpr std::int64_t kGroup = formats::nf4::kScaleGroup;
static_assert(formats::int8_blocks::kBlock == formats::nf4::kBlock, "one block size for both formats");
static_assert(model::kFlatAlign % formats::nf4::kBlock == 0, "unit slots and shards start on quantization blocks");

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

/// Adds the contiguous piece of `p` at local element `local` = global element `global`
/// (count elements) to the runs, merged with the previous run when both continue it.
void add_piece(const model::ParamSpec& p, int tp, std::int64_t local, std::int64_t global, std::int64_t count,
               std::int64_t group_base, std::vector<kernels::QuantRun>& runs) {
  const bool tail = global + count == p.numel();  // the tensor's last block may be partial
  if (local % kBlock != 0 || global % kBlock != 0 || (count % kBlock != 0 && !tail))
    throw UserError(strprintf(
        "model.base_quant: %s %s does not split into whole %lld-weight blocks at parallel.tp=%d (a slice of %lld "
        "weights starts at weight %lld of the tensor): quantization blocks are defined on the whole tensor, so each "
        "tensor-parallel slice must cover whole blocks; choose a tp that divides its split dimension into multiples "
        "of %lld, or model.base_quant=none",
        p.name.c_str(), p.shape.size() == 2 ? strprintf("(%lld x %lld)", static_cast<long long>(p.shape[0]),
                                                        static_cast<long long>(p.shape[1])).c_str()
                                            : "",
        static_cast<long long>(kBlock), tp, static_cast<long long>(count), static_cast<long long>(global),
        static_cast<long long>(kBlock)));
  kernels::QuantRun r{local / kBlock, ceil_div(count, kBlock), global / kBlock, group_base};
  if (!runs.empty()) {
    kernels::QuantRun& last = runs.back();
    if (last.group_base == group_base && last.local_block + last.n_blocks == r.local_block &&
        last.global_block + last.n_blocks == r.global_block) {
      last.n_blocks += r.n_blocks;
      return;
    }
  }
  runs.push_back(r);
}

/// Absmax of the 64 weights at v.
float block_absmax(const float* v) {
  float m = 0.0f;
  for (std::int64_t i = 0; i < kBlock; ++i) m = std::max(m, std::fabs(v[i]));
  return m;
}

/// Calls f(run, local_block) for every quantized block of [begin, begin + numel).
template <class F>
void for_each_block(const QuantMap& map, std::int64_t begin, std::int64_t numel, F&& f) {
  const std::int64_t b0 = begin / kBlock, b1 = (begin + numel) / kBlock;
  for (const kernels::QuantRun& r : map.runs) {
    const std::int64_t lo = std::max(b0, r.local_block), hi = std::min(b1, r.local_block + r.n_blocks);
    for (std::int64_t lb = lo; lb < hi; ++lb) f(r, lb);
  }
}

}  // namespace

std::int64_t QuantMap::dense_numel() const {
  std::int64_t n = 0;
  for (const model::DenseSlot& d : dense) n += d.numel;
  return n;
}

BaseQuant unit_base_quant(BaseQuant quant, bool quant_embeddings, int unit) {
  return unit == 0 && !quant_embeddings ? BaseQuant::None : quant;
}

QuantMap build_quant_map(const std::vector<model::ParamSpec>& specs, const model::UnitLayout& L, int tp, int tp_rank,
                         BaseQuant quant) {
  QuantMap map;
  if (quant == BaseQuant::None) return map;
  for (const model::ParamSlot& slot : L.slots) {
    const model::ParamSpec& p = specs[slot.spec];
    if (!p.frozen) continue;
    if (p.shape.size() != 2) {
      map.dense.push_back({slot.offset, slot.numel});
      continue;
    }
    const std::int64_t base = map.groups;
    map.groups += ceil_div(ceil_div(p.numel(), kBlock), kGroup);
    const std::int64_t lrows = slot.local_shape[0], lcols = slot.local_shape[1], cols = p.shape[1];
    // Rectangles of the global tensor that this rank's slice consists of: row ranges (rows
    // split or nothing split: contiguous in both) or column ranges (one piece per row).
    for (const model::BoxPair& bp : model::local_to_global(p, tp, tp_rank, model::Box{0, 0, lrows, lcols})) {
      if (bp.global.ncols == cols) {
        add_piece(p, tp, slot.offset + bp.local.row0 * lcols, bp.global.row0 * cols, bp.local.numel(), base,
                  map.runs);
        continue;
      }
      for (std::int64_t r = 0; r < bp.local.nrows; ++r)
        add_piece(p, tp, slot.offset + (bp.local.row0 + r) * lcols + bp.local.col0,
                  (bp.global.row0 + r) * cols + bp.global.col0, bp.local.ncols, base, map.runs);
    }
  }
  std::sort(map.runs.begin(), map.runs.end(),
            [](const kernels::QuantRun& a, const kernels::QuantRun& b) { return a.local_block < b.local_block; });
  return map;
}

std::int64_t payload_bytes(BaseQuant quant, std::int64_t shard_numel) {
  const std::int64_t blocks = shard_numel / kBlock;
  switch (quant) {
    case BaseQuant::Nf4: return shard_numel / 2 + blocks;
    case BaseQuant::Int8: return shard_numel + blocks * static_cast<std::int64_t>(sizeof(float));
    case BaseQuant::None: case BaseQuant::Gguf: break;  // gguf: the map's stride (parallel/gguf_base.hpp)
  }
  return 0;
}

void partial_group_max(const QuantMap& map, const float* shard, std::int64_t begin, std::int64_t numel,
                       std::vector<float>& group_max) {
  for_each_block(map, begin, numel, [&](const kernels::QuantRun& r, std::int64_t lb) {
    const float m = block_absmax(shard + lb * kBlock - begin);
    MESHTRAIN_REQUIRE(std::isfinite(m), "model.base_quant: a non-finite frozen weight (block %lld of unit segment)",
                      static_cast<long long>(lb));
    float& g = group_max[static_cast<std::size_t>(r.group_base + (r.global_block + lb - r.local_block) / kGroup)];
    g = std::max(g, m);
  });
}

void encode_shard(BaseQuant quant, const QuantMap& map, const float* shard, std::int64_t begin, std::int64_t numel,
                  const std::vector<float>& group_max, std::uint8_t* payload) {
  std::memset(payload, 0, static_cast<std::size_t>(payload_bytes(quant, numel)));
  for_each_block(map, begin, numel, [&](const kernels::QuantRun& r, std::int64_t lb) {
    const std::int64_t kb = lb - begin / kBlock;  // block within the shard
    const float* v = shard + kb * kBlock;
    const float m = block_absmax(v);
    if (quant == BaseQuant::Int8) {
      // codes | absmax, as formats::int8_blocks::quantize
      std::memcpy(payload + numel + kb * static_cast<std::int64_t>(sizeof(float)), &m, sizeof(float));
      if (m == 0.0f) return;
      for (std::int64_t i = 0; i < kBlock; ++i)
        payload[kb * kBlock + i] = static_cast<std::uint8_t>(formats::int8_blocks::code_of(v[i], m));
      return;
    }
    // codes | scales, as formats::nf4::quantize with the group's maximum over the world.
    const float top = group_max[static_cast<std::size_t>(r.group_base + (r.global_block + lb - r.local_block) / kGroup)];
    const float per = top > 0.0f ? 255.0f / top : 0.0f;
    const float rounded = std::nearbyint(m * per);
    payload[numel / 2 + kb] = static_cast<std::uint8_t>(m > 0.0f ? std::clamp(rounded, 1.0f, 255.0f) : 0.0f);
    const float inv = m > 0.0f ? 1.0f / m : 0.0f;
    for (std::int64_t i = 0; i < kBlock; i += 2)
      payload[kb * (kBlock / 2) + i / 2] = static_cast<std::uint8_t>(
          formats::nf4::code_of(v[i] * inv) << 4 | formats::nf4::code_of(v[i + 1] * inv));
  });
}

void dequantized_tensor(BaseQuant quant, bool quant_embeddings, const model::ParamSpec& p, std::vector<float>& v) {
  quant = unit_base_quant(quant, quant_embeddings, p.unit);
  // A GGUF base's values are the file's own dequantization, which `v` already is.
  if (quant == BaseQuant::None || quant == BaseQuant::Gguf || p.shape.size() != 2 || v.empty()) return;
  const std::size_t n = v.size();
  std::vector<float> padded(v);
  padded.resize(static_cast<std::size_t>(ceil_div(static_cast<std::int64_t>(n), kBlock) * kBlock), 0.0f);
  const auto m = static_cast<std::int64_t>(padded.size());
  if (quant == BaseQuant::Nf4) formats::nf4::dequantize(formats::nf4::quantize(padded.data(), m), 0, m, padded.data());
  else formats::int8_blocks::dequantize(formats::int8_blocks::quantize(padded.data(), m), 0, m, padded.data());
  padded.resize(n);
  v = std::move(padded);
}

}  // namespace meshtrain::parallel
