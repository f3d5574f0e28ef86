#include "model/layout.hpp"

#include "core/error.hpp"

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
  const auto shard_of = [&](std::int64_t n) { return align((n + shards - 1) / shards); };
  // Pass 0 lays out the frozen parameters from 0, pass 1 the trainable ones after the
  // padded frozen segment; slots stay in spec order within each segment.
  std::vector<std::int64_t> end(n_units, 0), last(n_units, 0);
  for (int pass = 0; pass < 2; ++pass) {
    const bool frozen = pass == 0;
    if (!frozen)
      for (UnitLayout& L : layouts) {
        L.frozen_shard_numel = shard_of(end[L.unit]);
        end[L.unit] = L.frozen_padded();
      }
    for (int i = 0; i < static_cast<int>(specs.size()); ++i) {
      if (specs[i].frozen != frozen) continue;
      UnitLayout& L = layouts[specs[i].unit];
      MESHTRAIN_ASSERT(!specs[i].fused_with_previous || (i > 0 && specs[i - 1].frozen == frozen),
                       "%s is fused with a parameter of the other (frozen/trainable) segment", specs[i].name.c_str());
      ParamSlot slot;
      slot.spec = i;
      slot.offset = specs[i].fused_with_previous ? end[L.unit] : align(end[L.unit]);
      slot.local_shape = local_shape(specs[i], tp);
      slot.numel = local_numel(specs[i], tp);
      end[L.unit] = last[L.unit] = slot.offset + slot.numel;
      L.slots.push_back(slot);
    }
  }
  for (UnitLayout& L : layouts) {
    L.numel = last[L.unit];
    L.shard_numel = shard_of(end[L.unit] - L.trainable_begin());
  }
  return layouts;
}

}  // namespace meshtrain::model
