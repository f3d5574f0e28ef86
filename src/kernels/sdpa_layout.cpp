#include "kernels/sdpa_layout.hpp"

#include "core/format.hpp"

namespace meshtrain::kernels {
namespace {

/// A BHSD view of `heads` heads of hd columns, starting at column head0 * hd of a row-major
/// (B*T, ld) buffer.
SdpaTensor rows_as_bhsd(const AttentionShape& s, int heads, int head0, int ld) {
  SdpaTensor t;
  t.dim = {s.B, heads, s.T, s.hd};
  t.stride = {static_cast<std::int64_t>(s.T) * ld, s.hd, ld, 1};
  t.offset = static_cast<std::int64_t>(head0) * s.hd;
  return t;
}

}  // namespace

SdpaLayout sdpa_layout(const AttentionShape& s, int ldq, int ldk, int ldv, int ldo) {
  SdpaLayout L;
  auto refuse = [&L](std::string why) {
    L.why_not = std::move(why);
    return L;
  };
  if (s.doc_start != nullptr) return refuse("document-masked (packed) rows (sdpa_ragged describes them)");
  if (s.hd % 8 != 0 || s.hd > kSdpaMaxHeadDim)
    return refuse(strprintf("head dimension %d (the fused path takes multiples of 8 up to %d)", s.hd, kSdpaMaxHeadDim));
  for (int ld : {ldq, ldk, ldv, ldo})
    if (ld % 8 != 0) return refuse(strprintf("row stride %d is not a multiple of 8 elements", ld));
  if (s.Hq < 1 || s.group < 1) return refuse("no query heads");
  // kv heads read by the local query heads: [first, last] of k/v's local heads.
  const int first = s.q_head_offset / s.group - s.kv_head_offset;
  const int last = (s.q_head_offset + s.Hq - 1) / s.group - s.kv_head_offset;
  if (first < 0 || last >= s.Hkv)
    return refuse(strprintf("query heads read kv heads [%d, %d] outside the %d present", first, last, s.Hkv));
  const int kv = last - first + 1;
  if (s.Hq % kv != 0) return refuse(strprintf("%d query heads over %d kv heads", s.Hq, kv));
  const int per_kv = s.Hq / kv;
  for (int h = 0; h < s.Hq; ++h)
    if ((s.q_head_offset + h) / s.group - s.kv_head_offset - first != h / per_kv)
      return refuse(strprintf("query head %d does not read kv head %d of the fused kernel's grouping", h, h / per_kv));
  L.q = rows_as_bhsd(s, s.Hq, 0, ldq);
  L.k = rows_as_bhsd(s, kv, first, ldk);
  L.v = rows_as_bhsd(s, kv, first, ldv);
  L.o = rows_as_bhsd(s, s.Hq, 0, ldo);
  L.stats.dim = {s.B, s.Hq, s.T, 1};
  L.stats.stride = {2 * static_cast<std::int64_t>(s.Hq) * s.T, 2 * static_cast<std::int64_t>(s.T), 2, 1};
  L.kv_heads = kv;
  L.unread_kv_heads = kv < s.Hkv;
  L.supported = true;
  return L;
}

}  // namespace meshtrain::kernels
