#include "kernels/sdpa_ragged.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/views.hpp"

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

int sdpa_ragged_documents(const std::int32_t* doc_start_host, int B, int T) {
  int documents = 0;
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(B) * T; ++i)
    documents += doc_start_host[i] == i % T ? 1 : 0;
  return documents;
}

std::array<std::int64_t, kRaggedOperands> sdpa_ragged_token_strides(const AttentionShape& s, int ldq, int ldk,
                                                                    int ldv, int ldo) {
  return {ldq, ldk, ldv, ldo, s.Hq};
}

void sdpa_ragged_index(const std::int32_t* doc_start, int B, int T, const std::int64_t* token_stride, int batch,
                       std::int64_t* block, std::int64_t* first) {
  const std::int64_t N = static_cast<std::int64_t>(B) * T;
  const std::int64_t stride = sdpa_ragged_index_stride(batch);
  // 1) The documents in row order: document e's first token (global index) into first[e],
  //    the count into first[batch]. Token t starts one where its start is its own position.
  Kokkos::parallel_scan(
      "Kernels::sdpa_ragged_index_scan", Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>(0, N),
      KOKKOS_LAMBDA(std::int64_t t, std::int64_t & before, const bool final) {
        const std::int64_t starts = doc_start[t] == t % T ? 1 : 0;
        if (final) {
          if (starts && before < batch) first[before] = t;
          if (t == N - 1) first[batch] = before + starts;
        }
        before += starts;
      });
  // 2) Every int64 element of the block, as index_block() lays it out: array a < kRaggedOperands
  //    the offsets of operand a; then seq_len as int32 pairs (little-endian, as the host's
  //    memcpy of an int32 array into the block; both the host and CUDA GPUs are little-endian);
  //    zeros elsewhere.
  const std::int64_t s0 = token_stride[0], s1 = token_stride[1], s2 = token_stride[2], s3 = token_stride[3],
               s4 = token_stride[4];
  Kokkos::parallel_for(
      "Kernels::sdpa_ragged_index_fill", Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>(
                                             0, sdpa_ragged_index_elems(batch)),
      KOKKOS_LAMBDA(std::int64_t j) {
        const std::int64_t a = j / stride, e = j % stride;
        const std::int64_t docs = first[batch];
        if (a < kRaggedOperands) {
          const std::int64_t st = a == 0 ? s0 : a == 1 ? s1 : a == 2 ? s2 : a == 3 ? s3 : s4;
          block[j] = e <= batch ? (e < docs ? first[e] : N) * st : 0;
          return;
        }
        // Tokens of document i: up to the next document's first token if it is in the same
        // row, else to the end of the row; 0 past the last document.
        auto len = [&](std::int64_t i) -> std::uint32_t {
          if (i >= batch || i >= docs) return 0;
          const std::int64_t row = first[i] / T;
          const std::int64_t end = i + 1 < docs && first[i + 1] / T == row ? first[i + 1] : (row + 1) * T;
          return static_cast<std::uint32_t>(end - first[i]);
        };
        const std::uint64_t lo = len(2 * e), hi = len(2 * e + 1);
        block[j] = static_cast<std::int64_t>((hi << 32) | lo);
      });
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
  if (s.ragged_batch > 0) {
    MESHTRAIN_ASSERT(s.ragged_batch >= R.documents && sdpa_ragged_batch(s.ragged_batch) == s.ragged_batch,
                     "attention: graph batch %d for %d packed documents (a power of two, at least the count)",
                     s.ragged_batch, R.documents);
    R.batch = s.ragged_batch;
  }
  R.seq_len.resize(static_cast<std::size_t>(R.batch), 0);
  const std::int64_t N = static_cast<std::int64_t>(s.B) * s.T;
  const std::array<std::int64_t, kRaggedOperands> stride = sdpa_ragged_token_strides(s, ldq, ldk, ldv, ldo);
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
