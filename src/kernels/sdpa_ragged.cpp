#include "kernels/sdpa_ragged.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"
#include "core/format.hpp"

namespace meshtrain::kernels {

std::int64_t sdpa_ragged_index_stride(int batch) { return (static_cast<std::int64_t>(batch) + 1 + 31) / 32 * 32; }

std::int64_t sdpa_ragged_index_elems(int batch) { return (kRaggedOperands + 1) * sdpa_ragged_index_stride(batch); }

std::vector<std::int64_t> SdpaRagged::index_block() const {
  const std::int64_t stride = sdpa_ragged_index_stride(batch);
  std::vector<std::int64_t> block(static_cast<std::size_t>(sdpa_ragged_index_elems(batch)), 0);
  for (int op = 0; op < kRaggedOperands; ++op)
    std::copy(offset(static_cast<SdpaOperand>(op)), offset(static_cast<SdpaOperand>(op)) + batch + 1,
              block.begin() + op * stride);
  // seq_len: batch int32 values fit in stride int64 slots (stride > batch / 2).
  std::memcpy(block.data() + kRaggedOperands * stride, seq_len.data(), seq_len.size() * sizeof(std::int32_t));
  return block;
}

int sdpa_ragged_batch(int documents) {
  int b = 1;
  while (b < documents) b *= 2;
  return b;
}

SdpaRaggedCall sdpa_ragged(const AttentionShape& s, const std::int32_t* doc_start_host, int ldq, int ldk, int ldv,
                           int ldo) {
  SdpaRaggedCall call;
  SdpaLayout& L = call.layout;
  if (doc_start_host == nullptr) {
    L.why_not = "document-masked (packed) rows without a host copy of their document starts";
    return call;
  }
  // Heads, head dimension and strides: the dense description's rules.
  AttentionShape dense = s;
  dense.doc_start = nullptr;
  L = sdpa_layout(dense, ldq, ldk, ldv, ldo);
  if (!L.supported) return call;

  // Documents in row order: token t of row b starts one where its start is itself.
  SdpaRagged& R = call.ragged;
  std::vector<std::int64_t> first;  // global token index of each document's first token
  for (int b = 0; b < s.B; ++b) {
    const std::int32_t* d = doc_start_host + static_cast<std::int64_t>(b) * s.T;
    for (int t = 0; t < s.T; ++t) {
      MESHTRAIN_ASSERT(d[t] == t || (t > 0 && d[t] == d[t - 1]),
                       "attention: row %d's token %d has document start %d (expected %d or the previous token's)", b,
                       t, d[t], t);
      if (d[t] == t) {
        first.push_back(static_cast<std::int64_t>(b) * s.T + t);
        R.seq_len.push_back(1);
      } else {
        ++R.seq_len.back();
      }
    }
  }
  R.documents = static_cast<int>(first.size());
  R.batch = sdpa_ragged_batch(R.documents);
  R.seq_len.resize(static_cast<std::size_t>(R.batch), 0);
  const std::int64_t N = static_cast<std::int64_t>(s.B) * s.T;
  const std::int64_t stride[kRaggedOperands] = {ldq, ldk, ldv, ldo, s.Hq};  // elements per token
  R.offsets.resize(static_cast<std::size_t>(kRaggedOperands) * (R.batch + 1));
  for (int op = 0; op < kRaggedOperands; ++op)
    for (int e = 0; e <= R.batch; ++e)
      R.offsets[static_cast<std::size_t>(op) * (R.batch + 1) + e] = (e < R.documents ? first[e] : N) * stride[op];

  // Every operand is a batch of documents of at most T tokens; the batch stride is replaced
  // by the ragged offsets.
  for (SdpaTensor* t : {&L.q, &L.k, &L.v, &L.o}) t->dim[0] = R.batch;
  L.stats.dim = {R.batch, s.Hq, s.T, 1};
  L.stats.stride = {static_cast<std::int64_t>(s.Hq) * s.T, 1, s.Hq, 1};  // token-major
  L.stats.offset = 0;
  L.ragged = true;
  L.ragged_tokens = N;
  return call;
}

}  // namespace meshtrain::kernels
