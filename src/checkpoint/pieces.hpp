#pragma once
// The one mapping behind save, load, import and export: a range of an FSDP unit's flat
// buffer, intersected with each parameter, is a run of that parameter's TP-local elements
// in row-major order; the run splits into at most three local rectangles (partial first
// row, whole rows, partial last row), and each becomes one or more rectangles of the
// logical tensor (several where it crosses the chunks of a fused split such as q|k|v).

#include <cstdint>
#include <vector>

#include <Kokkos_Core.hpp>

#include "model/layout.hpp"

namespace meshtrain::checkpoint {

/// The part of one parameter inside a range of a unit buffer.
struct Piece {
  int spec = 0;                        ///< index into the spec list
  std::int64_t offset = 0;             ///< first element, relative to the caller's buffer base
  std::int64_t count = 0;              ///< elements (a contiguous run of the buffer)
  std::int64_t local_begin = 0;        ///< first element as a TP-local flat index
  std::int64_t local_cols = 1;         ///< columns of the TP-local slice (1 for 1-D)
  std::vector<model::BoxPair> boxes;   ///< local rectangles and their logical images

  /// Calls f(buffer_index, logical_row, logical_col, n) for every piece of a logical row,
  /// buffer_index relative to the piece's first element.
  template <class F>
  void for_each_row_run(F&& f) const {
    for (const model::BoxPair& bp : boxes)
      for (std::int64_t r = 0; r < bp.local.nrows; ++r)
        f((bp.local.row0 + r) * local_cols + bp.local.col0 - local_begin, bp.global.row0 + r, bp.global.col0,
          bp.local.ncols);
  }

  /// Calls f(buffer_index, tensor_index, n) for the piece's row runs merged where they
  /// continue each other both in the buffer and in the row-major tensor of `cols` columns
  /// (a piece without tensor parallelism is one run; a 1-D piece arrives one element per
  /// row run): the contiguous byte ranges of a checksum or of a file write.
  template <class F>
  void for_each_contiguous_run(std::int64_t cols, F&& f) const {
    std::int64_t run_at = 0, run_pos = -1, run_n = 0;
    for_each_row_run([&](std::int64_t at, std::int64_t row, std::int64_t col, std::int64_t n) {
      const std::int64_t pos = row * cols + col;
      if (run_n > 0 && at == run_at + run_n && pos == run_pos + run_n) {
        run_n += n;
        return;
      }
      if (run_n > 0) f(run_at, run_pos, run_n);
      run_at = at;
      run_pos = pos;
      run_n = n;
    });
    if (run_n > 0) f(run_at, run_pos, run_n);
  }

  /// for_each_row_run on the host threads: f must only write its own run's elements and
  /// must not throw (validate before). Runs are disjoint, so the result is the serial one.
  template <class F>
  void for_each_row_run_parallel(F&& f) const {
    struct Run {
      std::int64_t at, row, col, n;
    };
    std::vector<Run> runs;
    for_each_row_run([&](std::int64_t at, std::int64_t row, std::int64_t col, std::int64_t n) {
      runs.push_back({at, row, col, n});
    });
    // A small piece (a norm weight, one row per element) is not worth waking the threads.
    if (count < (std::int64_t{1} << 16)) {
      for (const Run& r : runs) f(r.at, r.row, r.col, r.n);
      return;
    }
    Kokkos::parallel_for("piece_rows", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, runs.size()),
                         [&](std::size_t i) { f(runs[i].at, runs[i].row, runs[i].col, runs[i].n); });
  }
};

/// Pieces of the parameters of `layout` inside unit elements [begin, end), in slot order;
/// offsets are relative to unit element `base`. With `counted_only`, parameters that this
/// tp rank does not count (replicated over tp, tp_rank > 0) are left out: that is the set
/// a rank writes, while a rank loads every parameter of its range.
std::vector<Piece> unit_pieces(const std::vector<model::ParamSpec>& specs, const model::UnitLayout& layout, int tp,
                               int tp_rank, std::int64_t begin, std::int64_t end, std::int64_t base,
                               bool counted_only);

}  // namespace meshtrain::checkpoint
