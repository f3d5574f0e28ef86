#pragma once
/// \brief Deterministic, mesh-independent initialisation: every logical element's initial
/// value is a pure function of (seed, parameter name, logical index), so a model
/// initialised on any mesh holds exactly the same numbers.

#include <cstdint>
#include <vector>

#include "model/layout.hpp"

namespace meshtrain::model {

/// Fills host memory `out` (end - begin floats) with the initial values of unit elements
/// [begin, end) of `layout` for tp rank `tp_rank` (padding gets 0).
void init_unit_range(const std::vector<ParamSpec>& specs, const UnitLayout& layout, int tp,
                     int tp_rank, std::int64_t begin, std::int64_t end, std::uint64_t seed,
                     float* out);

/// The initial value of logical element (row, col) of `spec` (exposed for tests).
float initial_value(const ParamSpec& spec, std::int64_t row, std::int64_t col, std::uint64_t seed);

/// Visits the logical coordinates of unit elements [begin, end): f(slot, local_offset_in_range,
/// global_row, global_col, count_along_cols) for each contiguous piece of a global row.
template <class F>
void for_each_global_run(const std::vector<ParamSpec>& specs, const UnitLayout& layout, int tp,
                         int tp_rank, std::int64_t begin, std::int64_t end, F&& f) {
  for (const ParamSlot& slot : layout.slots) {
    const std::int64_t a = std::max(begin, slot.offset);
    const std::int64_t b = std::min(end, slot.offset + slot.numel);
    if (a >= b) continue;
    const ParamSpec& p = specs[slot.spec];
    const std::int64_t local_cols = slot.local_shape.size() > 1 ? slot.local_shape[1] : 1;
    for (const Box& lb : local_run_boxes(p, tp, a - slot.offset, b - slot.offset)) {
      for (const BoxPair& bp : local_to_global(p, tp, tp_rank, lb)) {
        for (std::int64_t r = 0; r < bp.local.nrows; ++r) {
          const std::int64_t local_flat = (bp.local.row0 + r) * local_cols + bp.local.col0;
          f(slot, slot.offset + local_flat - begin, bp.global.row0 + r, bp.global.col0, bp.local.ncols);
        }
      }
    }
  }
}

}  // namespace meshtrain::model
