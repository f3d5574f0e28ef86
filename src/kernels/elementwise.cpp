#include "kernels/elementwise.hpp"

#include "gelu.hpp"
#include "kernel_common.hpp"
#include "swiglu_rows.hpp"

namespace meshtrain::kernels {
using namespace detail;

namespace {

/// Value of a storage scalar in a type that converts to any other without surprises
/// (bf16 goes through float).
KOKKOS_INLINE_FUNCTION float widen(float x) { return x; }
KOKKOS_INLINE_FUNCTION double widen(double x) { return x; }
KOKKOS_INLINE_FUNCTION float widen(bf16 x) { return static_cast<float>(x); }

template <class Out>
struct Narrow {
  template <class W>
  KOKKOS_INLINE_FUNCTION static Out from(W x) { return static_cast<Out>(x); }
};
template <>
struct Narrow<bf16> {
  template <class W>
  KOKKOS_INLINE_FUNCTION static bf16 from(W x) { return bf16(static_cast<float>(x)); }
};

/// splitmix64's finaliser: a bijection of 64-bit words whose outputs of consecutive
/// counters are statistically independent.
KOKKOS_INLINE_FUNCTION std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// u in [0, 1) with 24 random bits: exactly representable in float and double.
KOKKOS_INLINE_FUNCTION double uniform_bits(std::uint64_t seed, std::uint64_t i) {
  return static_cast<double>(splitmix64(seed * 0x100000001B3ull ^ i) >> 40) * (1.0 / 16777216.0);
}

}  // namespace

template <class In, class Out>
void cast(const In* in, Out* out, std::size_t n) {
  Kokkos::parallel_for(
      "Kernels::cast", Range64(0, static_cast<std::int64_t>(n)),
      KOKKOS_LAMBDA(std::int64_t i) { out[i] = Narrow<Out>::from(widen(in[i])); });
}

template <class T>
void add_inplace(T* y, const T* x, std::size_t n) {
  Kokkos::parallel_for(
      "Kernels::add_inplace", Range64(0, static_cast<std::int64_t>(n)),
      KOKKOS_LAMBDA(std::int64_t i) { y[i] = store<T>(load(y[i]) + load(x[i])); });
}

template <class T>
void add_widened(acc_t<T>* y, const T* x, std::size_t n) {
  Kokkos::parallel_for(
      "Kernels::add_widened", Range64(0, static_cast<std::int64_t>(n)),
      KOKKOS_LAMBDA(std::int64_t i) { y[i] += load(x[i]); });
}

template <class T>
void scale_inplace(T* x, std::size_t n, double s) {
  const acc_t<T> sa = static_cast<acc_t<T>>(s);
  Kokkos::parallel_for(
      "Kernels::scale_inplace", Range64(0, static_cast<std::int64_t>(n)),
      KOKKOS_LAMBDA(std::int64_t i) { x[i] = store<T>(load(x[i]) * sa); });
}

template <class T>
void fill(T* x, std::size_t n, double value) {
  const T v = store<T>(static_cast<acc_t<T>>(value));
  Kokkos::parallel_for(
      "Kernels::fill", Range64(0, static_cast<std::int64_t>(n)),
      KOKKOS_LAMBDA(std::int64_t i) { x[i] = v; });
}

double uniform_at(std::uint64_t seed, std::uint64_t i) { return uniform_bits(seed, i); }

template <class T>
void fill_uniform(T* x, std::size_t n, double lo, double hi, std::uint64_t seed) {
  const double span = hi - lo;
  Kokkos::parallel_for(
      "Kernels::fill_uniform", Range64(0, static_cast<std::int64_t>(n)), KOKKOS_LAMBDA(std::int64_t i) {
        x[i] = store<T>(static_cast<acc_t<T>>(lo + span * uniform_bits(seed, static_cast<std::uint64_t>(i))));
      });
}

template <class T>
void add_bias(T* y, const T* bias, int rows, int cols, int ld) {
  // y: (rows, cols; ld), bias: (cols)
  Kokkos::parallel_for(
      "Kernels::add_bias", row_policy(rows), KOKKOS_LAMBDA(const Member& team) {
        T* yr = y + static_cast<std::int64_t>(team.league_rank()) * ld;
        team_for(team, cols, [&](int c) { yr[c] = store<T>(load(yr[c]) + load(bias[c])); });
      });
}

template <class T>
void bias_backward(const T* dy, acc_t<T>* dbias, int rows, int cols, int ld) {
  // dy: (rows, cols; ld) -> dbias (cols, acc_t<T>) +=
  using A = acc_t<T>;
  if (dbias == nullptr) return;  // a frozen bias
  column_sums<A, 1>(
      "Kernels::bias_backward", rows, cols,
      KOKKOS_LAMBDA(int r, int c, A* v) { v[0] = load(dy[static_cast<std::int64_t>(r) * ld + c]); },
      KOKKOS_LAMBDA(int c, const A* s) { dbias[c] += s[0]; });
}

// GELU: the tanh approximation through the sigmoid (gelu.hpp).
template <class T>
void gelu_forward(const T* x, T* y, std::size_t n) {
  using A = acc_t<T>;
  Kokkos::parallel_for(
      "Kernels::gelu_forward", Range64(0, static_cast<std::int64_t>(n)),
      KOKKOS_LAMBDA(std::int64_t i) { y[i] = store<T>(GeluTanh<A>::value(load(x[i]))); });
}

template <class T>
void gelu_backward(const T* x, const T* dy, T* dx, std::size_t n) {
  using A = acc_t<T>;
  Kokkos::parallel_for(
      "Kernels::gelu_backward", Range64(0, static_cast<std::int64_t>(n)),
      KOKKOS_LAMBDA(std::int64_t i) { dx[i] = store<T>(load(dy[i]) * GeluTanh<A>::derivative(load(x[i]))); });
}

template <class T>
void bias_gelu_forward(T* pre, int ld_pre, const T* bias, T* act, int ld_act, int rows, int cols) {
  // pre (rows, cols; ld_pre) += bias (cols); act (rows, cols; ld_act) = gelu(pre), each value
  // rounded to T where add_bias and gelu_forward round it.
  using A = acc_t<T>;
  Kokkos::parallel_for(
      "Kernels::bias_gelu_forward", row_policy(rows), KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t r = team.league_rank();
        T* p = pre + r * ld_pre;
        T* a = act + r * ld_act;
        // Captured here, outside the if constexpr (nvcc: an extended lambda cannot first
        // capture a variable inside one).
        const T* b = bias;
        const int n = cols;
        if constexpr (kHostExec) {
          // Two loops over the row (it stays in L1 between them): each vectorizes, where one
          // loop writing two arrays the compiler must assume may alias does not.
          for (int c = 0; c < n; ++c) p[c] = store<T>(load(p[c]) + load(b[c]));
          for (int c = 0; c < n; ++c) a[c] = store<T>(GeluTanh<A>::value(load(p[c])));
        } else {
          team_for(team, n, [&](int c) {
            const T h = store<T>(load(p[c]) + load(b[c]));
            p[c] = h;
            a[c] = store<T>(GeluTanh<A>::value(load(h)));
          });
        }
      });
}

template <class T>
void gelu_backward_bias_grad(const T* pre, int ld_pre, T* d, int ld_d, acc_t<T>* dbias, int rows, int cols) {
  // d (rows, cols; ld_d) *= gelu'(pre (rows, cols; ld_pre)); dbias (cols) += column sums of
  // the rounded new d, in row order: gelu_backward then bias_backward, bit for bit.
  using A = acc_t<T>;
  if (dbias == nullptr) {
    Kokkos::parallel_for(
        "Kernels::gelu_backward_bias_grad", row_policy(rows), KOKKOS_LAMBDA(const Member& team) {
          const std::int64_t r = team.league_rank();
          const T* p = pre + r * ld_pre;
          T* dr = d + r * ld_d;
          team_for(team, cols, [&](int c) { dr[c] = store<T>(load(dr[c]) * GeluTanh<A>::derivative(load(p[c]))); });
        });
    return;
  }
  if constexpr (kHostExec) {
    // column_sums' host form (threads own column blocks, rows stream through in order, so
    // each column is summed in row order) with the block's row segment in two loops: the
    // GELU gradient written in place, then added to the block's sums; each vectorizes.
    // Blocks of up to 4096 columns (16 KiB of sums): with one thread per rank a GPT-2 row
    // (4C = 3072) is one contiguous segment; 1024-column blocks, which read 4 KiB of every
    // 12 KiB row, made this pass 5% slower than the two kernels it replaces (bench_kernels
    // --only=epilogues, CPU time), now 6% faster.
    constexpr int kMax = 4096;
    const int cb = column_block(cols, kMax);
    const int nblocks = (cols + cb - 1) / cb;
    Kokkos::parallel_for(
        "Kernels::gelu_backward_bias_grad", RangeInt(0, nblocks), KOKKOS_LAMBDA(int blk) {
          const int c0 = blk * cb;
          const int nc = cols - c0 < cb ? cols - c0 : cb;
          A acc[kMax];
          for (int j = 0; j < nc; ++j) acc[j] = A(0);
          for (int r = 0; r < rows; ++r) {
            T* dr = d + static_cast<std::int64_t>(r) * ld_d + c0;
            const T* pr = pre + static_cast<std::int64_t>(r) * ld_pre + c0;
            for (int j = 0; j < nc; ++j) dr[j] = store<T>(load(dr[j]) * GeluTanh<A>::derivative(load(pr[j])));
            for (int j = 0; j < nc; ++j) acc[j] += load(dr[j]);
          }
          for (int j = 0; j < nc; ++j) dbias[c0 + j] += acc[j];
        });
    return;
  }
  // Each (r, c) is visited exactly once by the column sums' first pass, which writes it.
  column_sums<A, 1>(
      "Kernels::gelu_backward_bias_grad", rows, cols,
      KOKKOS_LAMBDA(int r, int c, A* v) {
        T& x = d[static_cast<std::int64_t>(r) * ld_d + c];
        const T g = store<T>(load(x) * GeluTanh<A>::derivative(load(pre[static_cast<std::int64_t>(r) * ld_pre + c])));
        x = g;
        v[0] = load(g);
      },
      KOKKOS_LAMBDA(int c, const A* s) { dbias[c] += s[0]; });
}

namespace {

// The packed GPU form of SwiGLU (swiglu_rows.hpp): one thread per 16-byte pack. Separate
// functions, not lambdas under `if constexpr` (nvcc: an extended lambda cannot first capture
// a variable inside one).
template <int K, class T>
void swiglu_forward_packs(const T* gate, const T* up, int ld_in, T* out, int ld_out, int rows, int cols) {
  const int ppr = cols / K;
  Kokkos::parallel_for(
      "Kernels::swiglu_forward_packs", Range64(0, static_cast<std::int64_t>(rows) * ppr),
      KOKKOS_LAMBDA(std::int64_t i) { swiglu_forward_pack<K>(gate, up, ld_in, out, ld_out, ppr, i); });
}

template <int K, class T>
void swiglu_backward_packs(const T* gate, const T* up, int ld_in, const T* dout, int ld_out, T* dgate, T* dup,
                           int rows, int cols) {
  const int ppr = cols / K;
  Kokkos::parallel_for(
      "Kernels::swiglu_backward_packs", Range64(0, static_cast<std::int64_t>(rows) * ppr),
      KOKKOS_LAMBDA(std::int64_t i) { swiglu_backward_pack<K>(gate, up, ld_in, dout, ld_out, dgate, dup, ppr, i); });
}

}  // namespace

template <class T>
void swiglu_forward(const T* gate, const T* up, int ld_in, T* out, int ld_out, int rows, int cols, bool row_packs) {
  // gate, up: (rows, cols; ld_in) -> out (rows, cols; ld_out) = silu(gate) * up
  using A = acc_t<T>;
  if (row_packs && swiglu_rows_packable<T>(cols, ld_in, ld_out, {gate, up, out})) {
    swiglu_forward_packs<kPackWidth<T>>(gate, up, ld_in, out, ld_out, rows, cols);
    return;
  }
  Kokkos::parallel_for(
      "Kernels::swiglu_forward", row_policy(rows), KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t r = team.league_rank();
        const T* g = gate + r * ld_in;
        const T* u = up + r * ld_in;
        T* o = out + r * ld_out;
        team_for(team, cols, [&](int c) { o[c] = store<T>(swiglu_value<A>(load(g[c]), load(u[c]))); });
      });
}

template <class T>
void swiglu_backward(const T* gate, const T* up, int ld_in, const T* dout, int ld_out, T* dgate,
                     T* dup, int rows, int cols, bool row_packs) {
  using A = acc_t<T>;
  if (row_packs && swiglu_rows_packable<T>(cols, ld_in, ld_out, {gate, up, dout, dgate, dup})) {
    swiglu_backward_packs<kPackWidth<T>>(gate, up, ld_in, dout, ld_out, dgate, dup, rows, cols);
    return;
  }
  Kokkos::parallel_for(
      "Kernels::swiglu_backward", row_policy(rows), KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t r = team.league_rank();
        const T* g = gate + r * ld_in;
        const T* u = up + r * ld_in;
        const T* d = dout + r * ld_out;
        T* dg = dgate + r * ld_in;
        T* du = dup + r * ld_in;
        team_for(team, cols, [&](int c) {
          // All inputs are read before either output is written: dgate/dup may alias gate/up.
          const SwigluGrads<A> gr = swiglu_grads<A>(load(g[c]), load(u[c]), load(d[c]));
          dg[c] = store<T>(gr.dgate);
          du[c] = store<T>(gr.dup);
        });
      });
}

template <class T>
double sum_squares(const T* x, std::size_t n) {
  const std::int64_t n64 = static_cast<std::int64_t>(n);
  double total = 0;
  if constexpr (kHostExec) {
    // Fixed chunks, each summed with independent lanes (vectorizable); chunk sums are then
    // combined by Kokkos in an order fixed by the thread count.
    constexpr std::int64_t kChunk = 4096;
    const std::int64_t nchunks = (n64 + kChunk - 1) / kChunk;
    Kokkos::parallel_reduce(
        "Kernels::sum_squares", Range64(0, nchunks),
        KOKKOS_LAMBDA(std::int64_t ch, double& acc) {
          const std::int64_t b = ch * kChunk;
          const int len = static_cast<int>(n64 - b < kChunk ? n64 - b : kChunk);
          const T* p = x + b;
          acc += lane_sum<double>(len, [&](int i) {
            const double v = static_cast<double>(load(p[i]));
            return v * v;
          });
        },
        total);
  } else {
    Kokkos::parallel_reduce(
        "Kernels::sum_squares", Range64(0, n64),
        KOKKOS_LAMBDA(std::int64_t i, double& acc) {
          const double v = static_cast<double>(load(x[i]));
          acc += v * v;
        },
        total);
  }
  return total;
}

#define MESHTRAIN_INSTANTIATE_ELEMENTWISE(T)                                                     \
  template void add_inplace<T>(T*, const T*, std::size_t);                                       \
  template void add_widened<T>(acc_t<T>*, const T*, std::size_t);                                \
  template void scale_inplace<T>(T*, std::size_t, double);                                       \
  template void fill<T>(T*, std::size_t, double);                                                \
  template void fill_uniform<T>(T*, std::size_t, double, double, std::uint64_t);                 \
  template void add_bias<T>(T*, const T*, int, int, int);                                        \
  template void bias_backward<T>(const T*, acc_t<T>*, int, int, int);                            \
  template void gelu_forward<T>(const T*, T*, std::size_t);                                      \
  template void gelu_backward<T>(const T*, const T*, T*, std::size_t);                           \
  template void bias_gelu_forward<T>(T*, int, const T*, T*, int, int, int);                      \
  template void gelu_backward_bias_grad<T>(const T*, int, T*, int, acc_t<T>*, int, int);         \
  template void swiglu_forward<T>(const T*, const T*, int, T*, int, int, int, bool);             \
  template void swiglu_backward<T>(const T*, const T*, int, const T*, int, T*, T*, int, int, bool); \
  template double sum_squares<T>(const T*, std::size_t);
MESHTRAIN_INSTANTIATE_ELEMENTWISE(float)
MESHTRAIN_INSTANTIATE_ELEMENTWISE(double)
MESHTRAIN_INSTANTIATE_ELEMENTWISE(bf16)
#undef MESHTRAIN_INSTANTIATE_ELEMENTWISE

#define MESHTRAIN_INSTANTIATE_CAST(In, Out) template void cast<In, Out>(const In*, Out*, std::size_t);
MESHTRAIN_INSTANTIATE_CAST(float, float)
MESHTRAIN_INSTANTIATE_CAST(float, double)
MESHTRAIN_INSTANTIATE_CAST(float, bf16)
MESHTRAIN_INSTANTIATE_CAST(double, float)
MESHTRAIN_INSTANTIATE_CAST(double, double)
MESHTRAIN_INSTANTIATE_CAST(double, bf16)
MESHTRAIN_INSTANTIATE_CAST(bf16, float)
MESHTRAIN_INSTANTIATE_CAST(bf16, double)
MESHTRAIN_INSTANTIATE_CAST(bf16, bf16)
#undef MESHTRAIN_INSTANTIATE_CAST

}  // namespace meshtrain::kernels
