#include "meshtrain/model/layout.hpp"

namespace meshtrain::model {

const ParamSlot* UnitLayout::find(const std::vector<ParamSpec>& specs, const std::string& role) const {
  for (const ParamSlot& s : slots)
    if (specs[s.spec].role == role) return &s;
  return nullptr;
}

std::vector<UnitLayout> build_layouts(const std::vector<ParamSpec>& specs, int n_units, int tp, int shards) {
  std::vector<UnitLayout> layouts(n_units);
  for (int u = 0; u < n_units; ++u) {
    layouts[u].unit = u;
    layouts[u].shards = shards;
  }
  const auto align = [](std::int64_t x) { return (x + kFlatAlign - 1) / kFlatAlign * kFlatAlign; };
  for (int i = 0; i < static_cast<int>(specs.size()); ++i) {
    UnitLayout& L = layouts[specs[i].unit];
    ParamSlot slot;
    slot.spec = i;
    slot.offset = specs[i].fused_with_previous ? L.numel : align(L.numel);
    slot.local_shape = local_shape(specs[i], tp);
    slot.numel = local_numel(specs[i], tp);
    L.numel = slot.offset + slot.numel;
    L.slots.push_back(slot);
  }
  for (UnitLayout& L : layouts) {
    const std::int64_t per = (L.numel + shards - 1) / shards;
    L.shard_numel = align(per);
  }
  return layouts;
}

}  // namespace meshtrain::model
