#include "pieces.hpp"

#include <algorithm>

namespace meshtrain::checkpoint {

std::vector<Piece> unit_pieces(const std::vector<model::ParamSpec>& specs, const model::UnitLayout& layout, int tp,
                               int tp_rank, std::int64_t begin, std::int64_t end, std::int64_t base,
                               bool counted_only) {
  std::vector<Piece> out;
  for (const model::ParamSlot& slot : layout.slots) {
    const std::int64_t a = std::max(begin, slot.offset);
    const std::int64_t b = std::min(end, slot.offset + slot.numel);
    if (a >= b) continue;
    const model::ParamSpec& p = specs[slot.spec];
    if (counted_only && !model::counted_on_tp_rank(p, tp_rank)) continue;
    Piece piece;
    piece.spec = slot.spec;
    piece.offset = a - base;
    piece.count = b - a;
    piece.local_begin = a - slot.offset;
    piece.local_cols = slot.local_shape.size() > 1 ? slot.local_shape[1] : 1;
    for (const model::Box& lb : model::local_run_boxes(p, tp, a - slot.offset, b - slot.offset))
      for (const model::BoxPair& bp : model::local_to_global(p, tp, tp_rank, lb)) piece.boxes.push_back(bp);
    out.push_back(std::move(piece));
  }
  return out;
}

}  // namespace meshtrain::checkpoint
