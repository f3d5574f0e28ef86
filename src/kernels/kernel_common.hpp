#pragma once
/// \brief Private building blocks of the kernels: row (team) loops and reductions, and
/// deterministic column sums. One source serves host and GPU execution spaces:
///
/// - On host spaces (Serial/OpenMP) a team is one thread that owns a whole row, so a row
///   loop is a plain unit-stride loop the compiler vectorizes, and a row reduction keeps
///   kLanes independent partial sums (vectorizable, and a fixed summation order).
/// - On GPUs a team of threads shares a row and reduces with Kokkos team reductions
///   (a fixed tree for a fixed team size, hence deterministic).
///
/// The choice is made once, at compile time, from the default execution space. The norm
/// kernels choose at run time between that team form and a warp per row (`RowOps` below).

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include <Kokkos_Core.hpp>

#include "core/bf16.hpp"
#include "core/kokkos_compat.hpp"
#include "core/memory.hpp"
#include "core/views.hpp"

namespace meshtrain::kernels::detail {

/// True when kernels execute on host threads.
inline constexpr bool kHostExec =
    Kokkos::SpaceAccessibility<ExecSpace, Kokkos::HostSpace>::accessible;

using TeamPolicy = Kokkos::TeamPolicy<ExecSpace>;
using Member = TeamPolicy::member_type;
using Range64 = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>;
using RangeInt = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<int>>;

/// Independent partial sums per row reduction on host (two SSE registers of float).
inline constexpr int kLanes = 8;

/// \brief Width of the column blocks of column-parallel, row-serial kernels (column sums,
/// embedding scatter): on host as wide as the thread count allows, so that each thread
/// streams contiguous row segments (one block = whole rows with one thread), at least 64
/// and at most `max_cols`; on GPUs one column per thread (adjacent threads read adjacent
/// addresses). Results never depend on it: every column is processed in row order.
inline int column_block(int cols, int max_cols) {
  if constexpr (kHostExec) {
    const int conc = ExecSpace().concurrency();
    const int cb = ((cols + conc - 1) / conc + 15) / 16 * 16;
    return cb < 64 ? 64 : (cb > max_cols ? max_cols : cb);
  } else {
    return 1;
  }
}

/// \brief exp for float without a libm call, so that host loops around it vectorize
/// (libm's expf is a scalar call, several times the cost of the surrounding kernel; this
/// is 2-3x faster per element in SSE2 code). Cephes' expf: x = n ln2 + r with |r| <= ln2/2,
/// a degree-7 polynomial for e^r, and 2^n from exponent bits (split in two factors so
/// that results near overflow and in the subnormal range round like IEEE). Measured max
/// error < 1 ulp; exp(-inf) = 0, exp(+inf) = inf, NaN propagates. Range checks are done
/// on the bit pattern: with the default -ftrapping-math, GCC does not if-convert (and so
/// does not vectorize) floating-point comparisons.
KOKKOS_FORCEINLINE_FUNCTION float exp_poly(float x) {
  constexpr std::int32_t kBits89 = 0x42b20000;   // 89.0f: exp overflows above ~88.72
  constexpr std::int32_t kBits104 = 0x42d00000;  // 104.0f: exp(-104) rounds to 0
  constexpr std::int32_t kBitsMinus104 = static_cast<std::int32_t>(0xc2d00000u);
  std::int32_t ix;
  std::memcpy(&ix, &x, sizeof ix);
  // All-ones / all-zeros masks (branch-free selects).
  const std::int32_t ax = ix & 0x7fffffff;
  const std::int32_t is_nan = -static_cast<std::int32_t>(ax > 0x7f800000);
  const std::int32_t underflow = -static_cast<std::int32_t>((ix < 0) & (ax > kBits104));  // x < -104
  const std::int32_t overflow = -static_cast<std::int32_t>((ix >= 0) & (ax > kBits89));   // x > 89
  const std::int32_t ic = (underflow & kBitsMinus104) | (overflow & kBits89) | (~(underflow | overflow) & ix);
  float xc;
  std::memcpy(&xc, &ic, sizeof xc);
  // n = round(x / ln2) by the 1.5 * 2^23 trick (|x / ln2| < 2^22), r = x - n ln2 in two parts.
  const float fn = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const int n = static_cast<int>(fn);
  const float r = (xc - fn * 0.693359375f) - fn * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int n1 = n / 2, n2 = n - n1;
  const std::int32_t b1 = (n1 + 127) << 23, b2 = (n2 + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, sizeof s1);
  std::memcpy(&s2, &b2, sizeof s2);
  const float e = (p * s1) * s2;
  std::int32_t ie;
  std::memcpy(&ie, &e, sizeof ie);
  ie = (is_nan & ix) | (~is_nan & ~underflow & ie);
  float out;
  std::memcpy(&out, &ie, sizeof out);
  return out;
}

/// exp in the accumulator type: the vectorizable polynomial for float on host, the
/// platform's exp otherwise (double: gradient checks; GPUs: the fast hardware exp).
template <class A>
KOKKOS_FORCEINLINE_FUNCTION A exp_acc(A x) {
  if constexpr (kHostExec && std::is_same_v<A, float>) {
    return exp_poly(x);
  } else {
    return math::exp(x);
  }
}

/// One team per row.
inline TeamPolicy row_policy(int rows) {
  if constexpr (kHostExec) {
    return TeamPolicy(rows, 1);
  } else {
    return TeamPolicy(rows, Kokkos::AUTO);
  }
}

/// Sum over i < n of f(i), in a fixed order (lanes combined pairwise).
template <class A, class F>
KOKKOS_INLINE_FUNCTION A lane_sum(int n, const F& f) {
  A acc[kLanes];
  for (int l = 0; l < kLanes; ++l) acc[l] = A(0);
  int i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += f(i + l);
  for (int l = 0; i + l < n; ++l) acc[l] += f(i + l);
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/// Max over i < n of f(i); `init` when n == 0.
template <class A, class F>
KOKKOS_INLINE_FUNCTION A lane_max(int n, A init, const F& f) {
  A acc[kLanes];
  for (int l = 0; l < kLanes; ++l) acc[l] = init;
  int i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const A v = f(i + l);
      acc[l] = acc[l] > v ? acc[l] : v;
    }
  for (int l = 0; i + l < n; ++l) {
    const A v = f(i + l);
    acc[l] = acc[l] > v ? acc[l] : v;
  }
  A m = acc[0];
  for (int l = 1; l < kLanes; ++l) m = m > acc[l] ? m : acc[l];
  return m;
}

/// Row loop: f(i) for i < n, spread over the team.
template <class F>
KOKKOS_INLINE_FUNCTION void team_for(const Member& team, int n, const F& f) {
  if constexpr (kHostExec) {
    for (int i = 0; i < n; ++i) f(i);
  } else {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), f);
  }
}

/// Two-level row loop: f(o, i) for o < n_outer, i < n_inner (nested unit-stride loops on
/// host; one flattened range over the team on GPUs).
template <class F>
KOKKOS_INLINE_FUNCTION void team_for2(const Member& team, int n_outer, int n_inner, const F& f) {
  if constexpr (kHostExec) {
    for (int o = 0; o < n_outer; ++o)
      for (int i = 0; i < n_inner; ++i) f(o, i);
  } else {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n_outer * n_inner), [&](int oi) {
      const int o = oi / n_inner;
      f(o, oi - o * n_inner);
    });
  }
}

/// Row reduction: sum over i < n of f(i); every thread of the team gets the result.
template <class A, class F>
KOKKOS_INLINE_FUNCTION A team_sum(const Member& team, int n, const F& f) {
  if constexpr (kHostExec) {
    return lane_sum<A>(n, f);
  } else {
    A s = A(0);
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, n), [&](int i, A& acc) { acc += f(i); }, s);
    return s;
  }
}

/// Row reduction: max over i < n of f(i) (`init` when n == 0).
template <class A, class F>
KOKKOS_INLINE_FUNCTION A team_max(const Member& team, int n, A init, const F& f) {
  if constexpr (kHostExec) {
    return lane_max<A>(n, init, f);
  } else {
    A m = init;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, n),
        [&](int i, A& acc) {
          const A v = f(i);
          acc = acc > v ? acc : v;
        },
        Kokkos::Max<A>(m));
    return m > init ? m : init;
  }
}

/// Writes by one thread of the team.
template <class F>
KOKKOS_INLINE_FUNCTION void team_single(const Member& team, const F& f) {
  Kokkos::single(Kokkos::PerTeam(team), f);
}

/// \brief A row kernel's operations in either form (kernels::NormForm), so that one kernel
/// body serves both. `unit` is the team's (Rows) or the warp's (Warps) unit of work: a row,
/// or a block of rows; in the last team of Warps it may be past the end. `sync` orders a
/// row's stores before other threads of the team read them.
///
/// - RowOps<false>, Rows: a team per unit, the team_* functions above (on host a thread
///   whose loops vectorize); `sync` is a team barrier.
/// - RowOps<true>, Warps: teams of kWarps warps of kVectorLanes lanes, each warp owning a
///   unit by itself and reducing across its lanes with shuffles (Kokkos' ThreadVectorRange:
///   a fixed tree, deterministic), so no team barrier stands between a row's passes and
///   thousands of units are in flight. Lane l handles elements l, l + kVectorLanes, ... in
///   every loop over a row, so it reads back only what it stored itself: `sync` is nothing.
///   On host spaces a warp is one thread with one lane and its loops run in index order:
///   the CPU suite runs this form's logic there against the same references as the GPU.
template <bool Warps>
struct RowOps {
  static TeamPolicy policy(int units) { return row_policy(units); }
  KOKKOS_INLINE_FUNCTION static int unit(const Member& team) { return team.league_rank(); }
  template <class A, class F>
  KOKKOS_INLINE_FUNCTION static A sum(const Member& team, int n, const F& f) {
    return team_sum<A>(team, n, f);
  }
  template <class F>
  KOKKOS_INLINE_FUNCTION static void loop(const Member& team, int n, const F& f) {
    team_for(team, n, f);
  }
  template <class F>
  KOKKOS_INLINE_FUNCTION static void single(const Member& team, const F& f) {
    team_single(team, f);
  }
  KOKKOS_INLINE_FUNCTION static void sync(const Member& team) { team.team_barrier(); }
};
template <>
struct RowOps<true> {
  static constexpr int kWarps = kHostExec ? 1 : 4;          // 128 threads per GPU block
  static constexpr int kVectorLanes = kHostExec ? 1 : 32;  // a CUDA warp (half a HIP wavefront)
  static TeamPolicy policy(int units) { return TeamPolicy((units + kWarps - 1) / kWarps, kWarps, kVectorLanes); }
  KOKKOS_INLINE_FUNCTION static int unit(const Member& team) {
    return team.league_rank() * team.team_size() + team.team_rank();
  }
  template <class A, class F>
  KOKKOS_INLINE_FUNCTION static A sum(const Member& team, int n, const F& f) {
    A s = A(0);  // every lane gets the result
    Kokkos::parallel_reduce(
        Kokkos::ThreadVectorRange(team, n), [&](int i, A& acc) { acc += f(i); }, s);
    return s;
  }
  template <class F>
  KOKKOS_INLINE_FUNCTION static void loop(const Member& team, int n, const F& f) {
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, n), f);
  }
  template <class F>
  KOKKOS_INLINE_FUNCTION static void single(const Member& team, const F& f) {
    Kokkos::single(Kokkos::PerThread(team), f);  // one lane of the warp
  }
  KOKKOS_INLINE_FUNCTION static void sync(const Member&) {}
};

/// \brief Packs: K consecutive elements of a row moved together. The Warps form moves
/// rows in packs of kPackWidth<T> elements (16 bytes: 8 bf16, 4 float, 2 double) when the
/// rows allow it (kernels::norm_rows_packable), so that a warp's 32 lanes read 512
/// contiguous bytes with one 16-byte load each instead of 64 bytes with a 2-byte load each;
/// every other form uses packs of one element (a plain load or store). A kernel body written
/// over packs -- pack p holds elements [p K, p K + K), the row has C / K packs -- thus
/// serves every form. In the Warps form lane l owns packs l, l + 32, ... in every loop over
/// a row, so it still reads back only what it stored itself.
template <class T>
inline constexpr int kPackWidth = static_cast<int>(16 / sizeof(T));

template <class T, int K>
struct alignas(sizeof(T) * K < 16 ? sizeof(T) * K : 16) Pack {
  T v[K];
};

/// One 16-byte unit of a pack's move: in device code, a pack's storage and the row are both
/// read and written as these (one 128-bit load or store each, ld/st.global.v4). Copying
/// through a temporary instead let nvcc split some stores into four word stores
/// (perf/gpu/ptx_loads.sh counts them). Host code (host builds, and the host side of a CUDA
/// build, where tests call these row functions) copies with memcpy.
struct alignas(16) Bytes16 {
  std::uint32_t w[4];
};

/// Pack p of `row` (elements [p K, p K + K)). K > 1: the pack's address must be 16-byte
/// aligned (norm_rows_packable checked it before the launch).
template <int K, class T>
KOKKOS_FORCEINLINE_FUNCTION Pack<T, K> load_pack(const T* row, int p) {
  Pack<T, K> out;
  const T* src = row + static_cast<std::int64_t>(p) * K;
  if constexpr (K == 1) {
    out.v[0] = *src;
  } else {
    static_assert(sizeof(T) * K % 16 == 0, "a pack is whole 16-byte units");
    for (int q = 0; q < static_cast<int>(sizeof(T) * K / 16); ++q) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
      reinterpret_cast<Bytes16*>(out.v)[q] = reinterpret_cast<const Bytes16*>(src)[q];  // the 16-byte load
#else
      std::memcpy(reinterpret_cast<char*>(out.v) + 16 * q, reinterpret_cast<const char*>(src) + 16 * q, 16);
#endif
    }
  }
  return out;
}

/// Stores `in` as pack p of `row` (see load_pack).
template <int K, class T>
KOKKOS_FORCEINLINE_FUNCTION void store_pack(T* row, int p, const Pack<T, K>& in) {
  T* dst = row + static_cast<std::int64_t>(p) * K;
  if constexpr (K == 1) {
    *dst = in.v[0];
  } else {
    static_assert(sizeof(T) * K % 16 == 0, "a pack is whole 16-byte units");
    for (int q = 0; q < static_cast<int>(sizeof(T) * K / 16); ++q) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
      reinterpret_cast<Bytes16*>(dst)[q] = reinterpret_cast<const Bytes16*>(in.v)[q];  // the 16-byte store
#else
      std::memcpy(reinterpret_cast<char*>(dst) + 16 * q, reinterpret_cast<const char*>(in.v) + 16 * q, 16);
#endif
    }
  }
}

/// \brief Whether strided rows can be moved in 16-byte packs (kPackWidth elements of
/// `elem_bytes`): `cols` a whole number of packs, every leading dimension in `lds` a whole
/// number of 16-byte units, and every base in `bases` (nullptr: not used) on a 16-byte
/// boundary, so that every pack of every row is. The one test of every row kernel's packed
/// form: norms (kernels::norm_rows_packable), cross-entropy, SwiGLU, RoPE.
inline bool rows_in_packs(int cols, std::size_t elem_bytes, std::initializer_list<int> lds,
                          std::initializer_list<const void*> bases) {
  if (cols <= 0 || (static_cast<std::size_t>(cols) * elem_bytes) % 16 != 0) return false;
  for (const int ld : lds)
    if (ld < 0 || (static_cast<std::size_t>(ld) * elem_bytes) % 16 != 0) return false;
  for (const void* b : bases)
    if (b != nullptr && reinterpret_cast<std::uintptr_t>(b) % 16 != 0) return false;
  return true;
}

/// f(0) + f(1) + ... + f(K - 1), in that order (K == 1: f(0) itself, so a one-element pack
/// sums exactly as the element would).
template <class A, int K, class F>
KOKKOS_FORCEINLINE_FUNCTION A pack_sum(const F& f) {
  A s = f(0);
  for (int j = 1; j < K; ++j) s += f(j);
  return s;
}

/// \brief Deterministic sums over rows for each column, NS sums at once:
/// for c < cols: g(c, s) with s[k] = sum over r < rows (in row order) of the k-th value
/// written by f(r, c, v). The result does not depend on the thread count.
/// On host: parallel over column blocks, serial over rows; a block's accumulators (at most
/// kMax columns) live on the stack, in L1, while the rows stream through.
/// On GPUs: two passes with a fixed order — chunks of kGpuChunk rows summed per column by
/// one thread each (adjacent threads, adjacent columns), then the chunk partials summed in
/// chunk order — so 16k rows x 768 columns use ~200k threads instead of 768 serial ones.
template <class A, int NS, class F, class G>
void column_sums(const char* name, int rows, int cols, const F& f, const G& g) {
  if constexpr (kHostExec) {
    constexpr int kMax = 1024;
    const int cb = column_block(cols, kMax);
    const int nblocks = (cols + cb - 1) / cb;
    Kokkos::parallel_for(
        name, RangeInt(0, nblocks), KOKKOS_LAMBDA(int blk) {
          const int c0 = blk * cb;
          const int nc = cols - c0 < cb ? cols - c0 : cb;
          A acc[NS][kMax];
          for (int k = 0; k < NS; ++k)
            for (int j = 0; j < nc; ++j) acc[k][j] = A(0);
          for (int r = 0; r < rows; ++r)
            for (int j = 0; j < nc; ++j) {
              A v[NS];
              f(r, c0 + j, v);
              for (int k = 0; k < NS; ++k) acc[k][j] += v[k];
            }
          for (int j = 0; j < nc; ++j) {
            A s[NS];
            for (int k = 0; k < NS; ++k) s[k] = acc[k][j];
            g(c0 + j, s);
          }
        });
  } else {
    constexpr int kGpuChunk = 64;
    const int chunks = (rows + kGpuChunk - 1) / kGpuChunk;
    // partial: (chunks, NS, cols) from the memory pool (no device allocation per call).
    Buffer<A> partial(static_cast<std::size_t>(chunks) * NS * cols, MemCategory::Workspace);
    A* P = partial.data();
    Kokkos::parallel_for(
        name, Range64(0, static_cast<std::int64_t>(chunks) * cols), KOKKOS_LAMBDA(std::int64_t idx) {
          const int ch = static_cast<int>(idx / cols);
          const int c = static_cast<int>(idx % cols);
          A acc[NS];
          for (int k = 0; k < NS; ++k) acc[k] = A(0);
          const int r1 = rows < (ch + 1) * kGpuChunk ? rows : (ch + 1) * kGpuChunk;
          for (int r = ch * kGpuChunk; r < r1; ++r) {
            A v[NS];
            f(r, c, v);
            for (int k = 0; k < NS; ++k) acc[k] += v[k];
          }
          for (int k = 0; k < NS; ++k) P[(static_cast<std::int64_t>(ch) * NS + k) * cols + c] = acc[k];
        });
    Kokkos::parallel_for(
        name, RangeInt(0, cols), KOKKOS_LAMBDA(int c) {
          A s[NS];
          for (int k = 0; k < NS; ++k) s[k] = A(0);
          for (int ch = 0; ch < chunks; ++ch)
            for (int k = 0; k < NS; ++k) s[k] += P[(static_cast<std::int64_t>(ch) * NS + k) * cols + c];
          g(c, s);
        });
  }
}

}  // namespace meshtrain::kernels::detail
