#include "parallel/gguf_base.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/format.hpp"
#include "formats/gguf_file.hpp"

namespace meshtrain::parallel {
namespace {

/// A contiguous range of the segment before it is cut at shard boundaries: whole blocks of
/// one matrix (spec >= 0), or zeros (spec -1).
struct Span {
  std::int64_t local = 0, numel = 0, global = 0;
  int spec = -1;
  std::uint32_t type = kernels::kGgufZeroRun;
  std::int64_t block_elems = 1, block_bytes = 0;
};

std::string shape_text(const model::ParamSpec& p) {
  return strprintf("(%lld x %lld)", static_cast<long long>(p.shape[0]), static_cast<long long>(p.shape[1]));
}

/// The spans of frozen matrix `p` in slot `slot`: its TP-local rows (whole file rows, or
/// one piece of each row), rows the file lacks as zeros.
void matrix_spans(const model::ParamSpec& p, int spec, const model::ParamSlot& slot, int tp, int tp_rank,
                  const model::BaseTensorFormat& f, std::vector<Span>& out) {
  const formats::GgmlTypeTraits* tr = formats::ggml_type_traits(f.ggml_type);
  const std::int64_t be = tr->block_elements, bb = tr->block_bytes, cols = p.shape[1];
  const std::int64_t lrows = slot.local_shape[0], lcols = slot.local_shape[1];
  const auto add = [&](std::int64_t local, std::int64_t n, std::int64_t row, std::int64_t col) {
    const bool present = row < f.rows;
    out.push_back(present ? Span{local, n, row * cols + col, spec, f.ggml_type, be, bb} : Span{local, n});
  };
  for (const model::BoxPair& bp : model::local_to_global(p, tp, tp_rank, model::Box{0, 0, lrows, lcols})) {
    if (bp.global.ncols == cols) {
      // Whole rows: those the file holds, then those it lacks.
      const std::int64_t r0 = bp.global.row0, r1 = r0 + bp.global.nrows, mid = std::clamp(f.rows, r0, r1);
      const std::int64_t local = slot.offset + bp.local.row0 * lcols;
      if (mid > r0) add(local, (mid - r0) * cols, r0, 0);
      if (r1 > mid) add(local + (mid - r0) * cols, (r1 - mid) * cols, mid, 0);
      continue;
    }
    if (bp.global.col0 % be != 0 || bp.local.ncols % be != 0)
      throw UserError(strprintf(
          "model.base_quant=gguf: %s %s is %s in the base file, whose blocks of %lld weights are never divided, but "
          "at parallel.tp=%d each rank holds %lld of its columns (rank %d's slice starts at column %lld): choose a tp "
          "that divides its %lld columns into whole blocks, or model.base_quant=nf4 (the file's values re-quantized "
          "into blocks of 64) or none",
          p.name.c_str(), shape_text(p).c_str(), tr->name, static_cast<long long>(be), tp,
          static_cast<long long>(bp.local.ncols), tp_rank, static_cast<long long>(bp.global.col0),
          static_cast<long long>(cols)));
    for (std::int64_t r = 0; r < bp.local.nrows; ++r)
      add(slot.offset + (bp.local.row0 + r) * lcols + bp.local.col0, bp.local.ncols, bp.global.row0 + r,
          bp.global.col0);
  }
}

}  // namespace

std::int64_t GgufMap::dense_numel() const {
  std::int64_t n = 0;
  for (const model::DenseSlot& d : dense) n += d.numel;
  return n;
}

std::pair<std::int64_t, std::int64_t> GgufMap::groups_of(std::int64_t first, std::int64_t last) const {
  if (last <= first || runs.empty()) return {0, 0};
  // For element e: the group holding it and true, or the first group after it and false
  // (e in a 1-D slot, or past the last run).
  const auto locate = [&](std::int64_t e) -> std::pair<std::int64_t, bool> {
    const auto next = std::upper_bound(runs.begin(), runs.end(), e,
                                       [](std::int64_t x, const kernels::GgufRun& r) { return x < r.local; });
    if (next != runs.begin() && e < (next - 1)->local + (next - 1)->numel)
      return {(next - 1)->first_group + (e - (next - 1)->local) / kernels::kGgufGroup, true};
    return {next == runs.end() ? groups : next->first_group, false};
  };
  const std::int64_t lo = locate(first).first;
  const auto [g, inside] = locate(last - 1);
  return {lo, std::max(lo, inside ? g + 1 : g)};
}

GgufMap build_gguf_map(const std::vector<model::ParamSpec>& specs, const model::UnitLayout& L, int tp, int tp_rank,
                       const model::BaseFormats& formats) {
  GgufMap m;
  const std::int64_t fsn = L.frozen_shard_numel, end = L.frozen_padded();
  m.shard_bytes.assign(static_cast<std::size_t>(L.shards), 0);
  if (end == 0) return m;
  // 1. The segment's matrices as spans, its 1-D slots as dense ranges.
  std::vector<Span> spans;
  for (const model::ParamSlot& slot : L.slots) {
    const model::ParamSpec& p = specs[static_cast<std::size_t>(slot.spec)];
    if (!p.frozen) continue;
    if (p.shape.size() != 2) {
      m.dense.push_back({slot.offset, slot.numel});
      continue;
    }
    const auto it = formats.find(p.name);
    MESHTRAIN_REQUIRE(it != formats.end(),
                      "model.base_quant=gguf: the base file does not describe %s; the base must be the GGUF file the "
                      "model is loaded from (checkpoint.init_from)",
                      p.name.c_str());
    MESHTRAIN_REQUIRE(kernels::gguf_kernel_type(it->second.ggml_type),
                      "model.base_quant=gguf: %s is %s in the base file; a base kept in its own quantization may hold "
                      "Q4_0, Q4_1, Q8_0, Q4_K, Q6_K, F32, F16 or BF16 matrices: use model.base_quant=nf4 (re-quantized) "
                      "or none",
                      p.name.c_str(), formats::ggml_type_name(static_cast<formats::GgmlType>(it->second.ggml_type)));
    matrix_spans(p, slot.spec, slot, tp, tp_rank, it->second, spans);
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.local < b.local; });
  // 2. Zeros wherever neither covers the segment (alignment padding, the segment's tail).
  std::vector<std::pair<std::int64_t, std::int64_t>> covered;
  for (const Span& s : spans) covered.emplace_back(s.local, s.local + s.numel);
  for (const model::DenseSlot& d : m.dense) covered.emplace_back(d.offset, d.offset + d.numel);
  std::sort(covered.begin(), covered.end());
  std::int64_t at = 0;
  for (const auto& [b, e] : covered) {
    if (b > at) spans.push_back(Span{at, b - at});
    at = std::max(at, e);
  }
  if (end > at) spans.push_back(Span{at, end - at});
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.local < b.local; });
  // 3. Runs: each span's blocks cut where the shard of their first element changes, each
  // piece placed after the blocks its shard already holds; adjacent zeros merged.
  for (const Span& s : spans) {
    if (s.spec < 0) {
      kernels::GgufRun* last = m.runs.empty() ? nullptr : &m.runs.back();
      if (last && last->type == kernels::kGgufZeroRun && last->local + last->numel == s.local) {
        last->numel += s.numel;
        continue;
      }
      m.runs.push_back({s.local, s.numel, 0, 0, kernels::kGgufZeroRun});
      m.sources.push_back({});
      continue;
    }
    const std::int64_t blocks = s.numel / s.block_elems;
    for (std::int64_t k = 0; k < blocks;) {
      const std::int64_t first = s.local + k * s.block_elems;
      const int shard = static_cast<int>(first / fsn);
      // The first block whose first element lies in the next shard.
      const std::int64_t next = std::min(blocks, ((shard + 1) * fsn - s.local + s.block_elems - 1) / s.block_elems);
      const std::int64_t n = next - k, bytes = n * s.block_bytes;
      std::int64_t& held = m.shard_bytes[static_cast<std::size_t>(shard)];
      m.runs.push_back({first, n * s.block_elems, 0, 0, s.type});
      m.sources.push_back({s.spec, s.global + k * s.block_elems, shard, held, bytes});
      held += bytes;
      k = next;
    }
  }
  m.stride = (*std::max_element(m.shard_bytes.begin(), m.shard_bytes.end()) + 7) / 8 * 8;
  for (std::size_t r = 0; r < m.runs.size(); ++r) {
    kernels::GgufRun& run = m.runs[r];
    run.first_group = m.groups;
    m.groups += kernels::gguf_groups(run.numel);
    if (m.sources[r].spec >= 0) run.byte = m.sources[r].shard * m.stride + m.sources[r].shard_byte;
  }
  return m;
}

}  // namespace meshtrain::parallel
