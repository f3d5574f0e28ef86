#include "kernels/embedding.hpp"

#include <algorithm>
#include <vector>

#include "kernel_common.hpp"

namespace meshtrain::kernels {
using namespace detail;

template <class T>
void embedding_forward(const std::int32_t* tokens, int n_tokens, const T* wte,
                       std::int64_t vocab_start, std::int64_t vocab_local, int C, T* out) {
  // tokens: (n_tokens), wte: (vocab_local, C) -> out: (n_tokens, C)
  Kokkos::parallel_for(
      "Kernels::embedding_forward", row_policy(n_tokens), KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t i = team.league_rank();
        const std::int64_t row = static_cast<std::int64_t>(tokens[i]) - vocab_start;
        T* o = out + i * C;
        if (row >= 0 && row < vocab_local) {
          const T* w = wte + row * C;
          team_for(team, C, [&](int c) { o[c] = w[c]; });
        } else {
          team_for(team, C, [&](int c) { o[c] = store<T>(acc_t<T>(0)); });
        }
      });
}

std::int64_t token_grad_index_elems(int n_tokens) { return 2 + 3 * static_cast<std::int64_t>(n_tokens); }

void token_grad_index(const std::int32_t* tokens, int n_tokens, std::int64_t vocab_start, std::int64_t vocab_local,
                      std::int32_t* out) {
  const std::size_t n = static_cast<std::size_t>(n_tokens);
  std::vector<std::int32_t> count(static_cast<std::size_t>(vocab_local) + 1, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t row = static_cast<std::int64_t>(tokens[i]) - vocab_start;
    if (row >= 0 && row < vocab_local) ++count[static_cast<std::size_t>(row) + 1];
  }
  std::int32_t* rows = out + 1;
  std::int32_t* offsets = out + 1 + n;
  std::int32_t* positions = out + 2 + 2 * n;
  std::int32_t R = 0;
  offsets[0] = 0;
  for (std::int64_t r = 0; r < vocab_local; ++r)
    if (count[static_cast<std::size_t>(r) + 1] > 0) {
      rows[R] = static_cast<std::int32_t>(r);
      offsets[R + 1] = offsets[R] + count[static_cast<std::size_t>(r) + 1];
      ++R;
    }
  out[0] = R;
  for (std::int64_t r = 0; r < vocab_local; ++r) count[static_cast<std::size_t>(r) + 1] += count[static_cast<std::size_t>(r)];
  for (std::size_t i = 0; i < n; ++i) {  // stable: positions of a row stay in token order
    const std::int64_t row = static_cast<std::int64_t>(tokens[i]) - vocab_start;
    if (row >= 0 && row < vocab_local) positions[count[static_cast<std::size_t>(row)]++] = static_cast<std::int32_t>(i);
  }
}

template <class T>
void embedding_backward_indexed(const std::int32_t* index, int n_tokens, const T* dout, std::int64_t vocab_local,
                                int C, acc_t<T>* dwte) {
  const int teams = static_cast<int>(std::min<std::int64_t>(n_tokens, vocab_local));
  if (teams <= 0) return;
  const std::int32_t* R = index + 1;
  const std::int32_t* O = index + 1 + n_tokens;
  const std::int32_t* Pp = index + 2 + 2 * static_cast<std::int64_t>(n_tokens);
  Kokkos::parallel_for(
      "Kernels::embedding_backward", row_policy(teams), KOKKOS_LAMBDA(const Member& team) {
        const int u = team.league_rank();
        if (u >= index[0]) return;  // rows this batch does not have
        acc_t<T>* w = dwte + static_cast<std::int64_t>(R[u]) * C;
        team_for(team, C, [&](int c) {
          acc_t<T> acc = w[c];
          for (int p = O[u]; p < O[u + 1]; ++p) acc += load(dout[static_cast<std::int64_t>(Pp[p]) * C + c]);
          w[c] = acc;
        });
      });
}

template <class T>
void embedding_backward(const std::int32_t* tokens, int n_tokens, const T* dout, std::int64_t vocab_start,
                        std::int64_t vocab_local, int C, acc_t<T>* dwte, const std::int32_t* index) {
  // dout: (n_tokens, C) -> dwte: (vocab_local, C) +=
  // Every element of dwte receives its contributions in token order, whatever the blocking
  // or thread count, and no two work items touch the same element (no atomics).
  if constexpr (kHostExec) {
    (void)index;
    // Parallel over column blocks, serial over tokens.
    const int CB = column_block(C, C);
    const int nblocks = (C + CB - 1) / CB;
    Kokkos::parallel_for(
        "Kernels::embedding_backward", RangeInt(0, nblocks), KOKKOS_LAMBDA(int blk) {
          const int c0 = blk * CB;
          const int nc = C - c0 < CB ? C - c0 : CB;
          for (int i = 0; i < n_tokens; ++i) {
            const std::int64_t row = static_cast<std::int64_t>(tokens[i]) - vocab_start;
            if (row < 0 || row >= vocab_local) continue;
            acc_t<T>* w = dwte + row * C + c0;
            const T* d = dout + static_cast<std::int64_t>(i) * C + c0;
            for (int j = 0; j < nc; ++j) w[j] += load(d[j]);
          }
        });
  } else {
    if (index != nullptr) {
      embedding_backward_indexed(index, n_tokens, dout, vocab_local, C, dwte);
      return;
    }
    // Without an index (callers other than the training step): the tokens are read back and
    // grouped by row on the host, and the index uploaded (this waits for the device).
    std::vector<std::int32_t> host(static_cast<std::size_t>(n_tokens));
    Kokkos::deep_copy(UView<std::int32_t, HostMem>(host.data(), host.size()),
                      UView<std::int32_t>(const_cast<std::int32_t*>(tokens), host.size()));
    std::vector<std::int32_t> idx(static_cast<std::size_t>(token_grad_index_elems(n_tokens)), 0);
    token_grad_index(host.data(), n_tokens, vocab_start, vocab_local, idx.data());
    Buffer<std::int32_t> d_idx(idx.size(), MemCategory::Workspace);
    Kokkos::deep_copy(d_idx.view(), UView<std::int32_t, HostMem>(idx.data(), idx.size()));
    embedding_backward_indexed(d_idx.data(), n_tokens, dout, vocab_local, C, dwte);
    Kokkos::fence();  // the index buffer returns to the pool when this function ends
  }
}

template <class T>
void add_position_embedding(T* x, const T* wpe, int B, int T_seq, int C, const std::int32_t* doc_start) {
  // x: (B, T_seq, C) += wpe[t - doc_start]: (max_seq_len, C)
  Kokkos::parallel_for(
      "Kernels::add_position_embedding", row_policy(B * T_seq), KOKKOS_LAMBDA(const Member& team) {
        const int r = team.league_rank();
        T* xr = x + static_cast<std::int64_t>(r) * C;
        const int pos = r % T_seq - (doc_start != nullptr ? doc_start[r] : 0);
        const T* w = wpe + static_cast<std::int64_t>(pos) * C;
        team_for(team, C, [&](int c) { xr[c] = store<T>(load(xr[c]) + load(w[c])); });
      });
}

template <class T>
void position_embedding_backward(const T* dx, acc_t<T>* dwpe, int B, int T_seq, int C, const std::int32_t* doc_start) {
  using A = acc_t<T>;
  if (doc_start != nullptr) {
    // Packed rows: token (b, t) adds to row p = t - doc_start[b*T + t] of dwpe. One team per
    // position p (threads over the columns: coalesced on GPUs, a unit-stride row loop on
    // host) visits the tokens at position p in token order -- sequence by sequence, one per
    // document long enough -- so every element is summed in token order with the same
    // roundings as a serial scan, deterministic and without atomics. A sequence's documents
    // are found by jumping: from the token at position p of one document, a binary search
    // over the (non-decreasing) document starts gives the next document's start; a document
    // shorter than p + 1 tokens is passed over by jumping to position p of the document
    // that holds t. About T / p + documents probes per (p, sequence), none per column.
    Kokkos::parallel_for(
        "Kernels::position_embedding_backward_docs", row_policy(T_seq), KOKKOS_LAMBDA(const Member& team) {
          const int p = team.league_rank();
          A* w = dwpe + static_cast<std::int64_t>(p) * C;
          for (int b = 0; b < B; ++b) {
            const std::int32_t* d = doc_start + static_cast<std::int64_t>(b) * T_seq;  // this sequence's starts
            int t = p;
            while (t < T_seq) {
              const int ds = d[t];
              if (t - ds == p) {
                const T* g = dx + (static_cast<std::int64_t>(b) * T_seq + t) * C;
                // Each thread keeps its columns from token to token: no barrier needed.
                team_for(team, C, [&](int c) { w[c] += load(g[c]); });
                int lo = t + 1, hi = T_seq;  // first index after t in a later document
                while (lo < hi) {
                  const int mid = lo + (hi - lo) / 2;
                  if (d[mid] > ds) hi = mid;
                  else lo = mid + 1;
                }
                t = lo + p;
              } else {
                // t is at position t - ds < p of its document: its position p, if it has one.
                // (Starts are validated on load; the max only guards against a malformed row.)
                t = ds + p > t ? ds + p : t + 1;
              }
            }
          }
        });
    return;
  }
  // dx: (B, T_seq*C) viewed as B rows of T_seq*C columns -> dwpe (T_seq*C) += column sums.
  const std::int64_t row_stride = static_cast<std::int64_t>(T_seq) * C;
  column_sums<A, 1>(
      "Kernels::position_embedding_backward", B, T_seq * C,
      KOKKOS_LAMBDA(int b, int tc, A* v) { v[0] = load(dx[b * row_stride + tc]); },
      KOKKOS_LAMBDA(int tc, const A* s) { dwpe[tc] += s[0]; });
}

#define MESHTRAIN_INSTANTIATE_EMBEDDING(T)                                                       \
  template void embedding_forward<T>(const std::int32_t*, int, const T*, std::int64_t,           \
                                     std::int64_t, int, T*);                                     \
  template void embedding_backward_indexed<T>(const std::int32_t*, int, const T*, std::int64_t, int,   \
                                              acc_t<T>*);                                       \
  template void embedding_backward<T>(const std::int32_t*, int, const T*, std::int64_t,          \
                                      std::int64_t, int, acc_t<T>*, const std::int32_t*);        \
  template void add_position_embedding<T>(T*, const T*, int, int, int, const std::int32_t*);    \
  template void position_embedding_backward<T>(const T*, acc_t<T>*, int, int, int, const std::int32_t*);
MESHTRAIN_INSTANTIATE_EMBEDDING(float)
MESHTRAIN_INSTANTIATE_EMBEDDING(double)
MESHTRAIN_INSTANTIATE_EMBEDDING(bf16)
#undef MESHTRAIN_INSTANTIATE_EMBEDDING

}  // namespace meshtrain::kernels
