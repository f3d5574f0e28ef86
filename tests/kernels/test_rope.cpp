// Rotary embeddings: fp32 tables as Hugging Face computes them, rotate_half rotation,
// its transpose as the gradient.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_utils.hpp"
#include "kernels/rope.hpp"
#include "../../src/kernels/rope_rows.hpp"

using namespace meshtrain;
using namespace meshtrain::test;
namespace k = meshtrain::kernels;

namespace {

constexpr int kB = 2, kT = 9, kH = 3, kHd = 8, kMaxSeq = 12;
constexpr int kLd = kH * kHd + 5;  // heads followed by other columns (rope touches only the heads)

struct Tables {
  Buffer<float> cos, sin;
};
Tables make_tables(double theta, int hd, int max_seq) {
  Tables t{Buffer<float>(static_cast<std::size_t>(max_seq) * hd / 2, MemCategory::Workspace),
           Buffer<float>(static_cast<std::size_t>(max_seq) * hd / 2, MemCategory::Workspace)};
  k::rope_tables(theta, hd, max_seq, t.cos.data(), t.sin.data());
  return t;
}

}  // namespace

TEST(KernelsRope, TablesMatchHuggingFace) {
  const int hd = 128, max_seq = 4096;
  const double theta = 500000.0;
  auto t = make_tables(theta, hd, max_seq);
  const auto c = to_host(t.cos), s = to_host(t.sin);
  int bad = 0;
  for (int pos = 0; pos < max_seq; ++pos)
    for (int i = 0; i < hd / 2; ++i) {
      // HF: inv_freq = 1.0 / (base ** (arange(0, dim, 2).float() / dim)) in fp32, angle =
      // pos.float() * inv_freq in fp32, then cos/sin of that fp32 angle.
      const float inv_freq = 1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / static_cast<float>(hd));
      const float angle = static_cast<float>(pos) * inv_freq;
      const std::size_t idx = static_cast<std::size_t>(pos) * (hd / 2) + i;
      // 2e-7 absolute: the fp32 cos/sin of the same fp32 angle, within an ulp or two of
      // the exact value (|cos| <= 1, ulp(1) = 1.2e-7). A wrong angle (fp64 inv_freq, or
      // a different pairing of frequencies) is off by far more at large positions.
      if (std::fabs(c[idx] - std::cos(static_cast<double>(angle))) > 2e-7 ||
          std::fabs(s[idx] - std::sin(static_cast<double>(angle))) > 2e-7) {
        if (++bad <= 5) ADD_FAILURE() << "pos " << pos << " i " << i;
      }
    }
  EXPECT_EQ(bad, 0);
}

TEST(KernelsRope, ForwardAndGradient) {
  auto tables = make_tables(10000.0, kHd, kMaxSeq);
  const auto cs = to_host(tables.cos), sn = to_host(tables.sin);
  const int half = kHd / 2;
  auto x = random_normal(static_cast<std::size_t>(kB) * kT * kLd, 1);
  const auto w = random_normal(x.size(), 2);
  auto forward = [&]() {
    auto dx = upload<double>(x);
    k::rope_forward(dx.data(), kLd, kB, kT, kH, kHd, tables.cos.data(), tables.sin.data());
    return download(dx);
  };
  const auto y = forward();
  std::vector<double> ref = x;
  for (int r = 0; r < kB * kT; ++r)
    for (int h = 0; h < kH; ++h)
      for (int i = 0; i < half; ++i) {
        const std::size_t p = static_cast<std::size_t>(r) * kLd + h * kHd + i;
        const double c = cs[(r % kT) * half + i], s = sn[(r % kT) * half + i];
        ref[p] = x[p] * c - x[p + half] * s;         // x * cos + rotate_half(x) * sin
        ref[p + half] = x[p + half] * c + x[p] * s;  // rotate_half(x) = cat(-x2, x1)
      }
  // 1e-15 (floor 1e-12): the same two products and one sum in double.
  expect_close("rope_forward", y, ref, 1e-15, 1e-12);
  auto dw = upload<double>(w);
  k::rope_backward(dw.data(), kLd, kB, kT, kH, kHd, tables.cos.data(), tables.sin.data());
  const auto grad = download(dw);
  fd_check("rope dx", x, grad, [&]() { return weighted_sum(w, forward()); }, 80, 3);
  // Columns past the heads are not touched (forward and backward).
  for (int r = 0; r < kB * kT; ++r)
    for (int c = kH * kHd; c < kLd; ++c) {
      const std::size_t i = static_cast<std::size_t>(r) * kLd + c;
      EXPECT_EQ(y[i], x[i]);
      EXPECT_EQ(grad[i], w[i]);
    }
}

TEST(KernelsRope, Bf16MatchesFloat) {
  auto tables = make_tables(10000.0, kHd, kMaxSeq);
  const auto x = bf16_exact(random_normal(static_cast<std::size_t>(kB) * kT * kLd, 10));
  auto run = [&](auto tag) {
    using T = decltype(tag);
    auto dx = upload<T>(x);
    k::rope_forward(dx.data(), kLd, kB, kT, kH, kHd, tables.cos.data(), tables.sin.data());
    auto fwd = download(dx);
    k::rope_backward(dx.data(), kLd, kB, kT, kH, kHd, tables.cos.data(), tables.sin.data());
    return std::vector<std::vector<double>>{fwd, download(dx)};
  };
  const auto f = run(float{});
  const auto b = run(bf16{});
  expect_bf16_close("rope_forward", b[0], f[0]);
  expect_bf16_close("rope_backward(rope_forward(x))", b[1], f[1]);
  // R^T R = I: backward undoes forward (fp32: to rounding).
  expect_close("rope round trip", f[1], x, 1e-5, 1e-3);
}

// ---- the packed GPU form, pack by pack on the host -------------------------------------------
// On GPUs one thread rotates a 16-byte pack of a head's first half with the matching pack of
// its second half (rope_rows.hpp: rope_pack). Here that body runs on the host for every pack,
// in reverse order, forward and backward, with plain and packed-document positions, and must
// give the bits of the row form's rotation pair by pair, leave the columns past the heads
// alone, and agree with the kernel this build runs (bit for bit on host builds).

namespace {

template <class T, int K>
void check_rope_packs(bool documents) {
  using A = acc_t<T>;
  constexpr int B = 2, Tq = 7, H = 3, hd = 32, half = hd / 2, ld = H * hd + 8, rows = B * Tq;
  constexpr int max_seq = 16;
  static_assert(half % K == 0, "whole packs");
  const std::string what = std::string(sizeof(T) == 2 ? "bf16" : sizeof(T) == 4 ? "fp32" : "fp64") + " K=" +
                           std::to_string(K) + (documents ? " documents" : "");
  auto tables = make_tables(10000.0, hd, max_seq);
  const AlignedHost<float> cs(to_host(tables.cos)), sn(to_host(tables.sin));
  ASSERT_TRUE(k::detail::rope_rows_in_packs(static_cast<const T*>(nullptr), ld, hd, cs.data(), sn.data()));
  // Packed rows: documents start at positions 0, 3 and 5 of each sequence.
  std::vector<std::int32_t> doc(rows, 0);
  if (documents)
    for (int r = 0; r < rows; ++r) {
      const int t = r % Tq;
      doc[r] = t >= 5 ? 5 : t >= 3 ? 3 : 0;
    }
  const std::int32_t* ds = documents ? doc.data() : nullptr;
  const std::vector<T> x0 = convert<T>(random_normal(static_cast<std::size_t>(rows) * ld, 800 + K));

  for (const bool forward : {true, false}) {
    std::vector<T> want = x0;
    for (int r = 0; r < rows; ++r) {
      const int pos = r % Tq - doc[r];
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < half; ++i) {
          const std::size_t p = static_cast<std::size_t>(r) * ld + h * hd + i;
          const A c = static_cast<A>(cs.data()[pos * half + i]), s = static_cast<A>(sn.data()[pos * half + i]);
          A y1, y2;
          if (forward) k::detail::rope_rotate<true, A>(load(x0[p]), load(x0[p + half]), c, s, y1, y2);
          else k::detail::rope_rotate<false, A>(load(x0[p]), load(x0[p + half]), c, s, y1, y2);
          want[p] = store<T>(y1);
          want[p + half] = store<T>(y2);
        }
    }
    AlignedHost<T> x(x0);
    for (std::int64_t i = std::int64_t(rows) * H * (half / K) - 1; i >= 0; --i) {
      if (forward) k::detail::rope_pack<true, K>(x.data(), ld, Tq, H, half, cs.data(), sn.data(), ds, i);
      else k::detail::rope_pack<false, K>(x.data(), ld, Tq, H, half, cs.data(), sn.data(), ds, i);
    }
    EXPECT_TRUE(bitwise_equal(x.vec(), want)) << what << (forward ? " forward" : " backward");

    // The kernel this build runs.
    auto dx = to_device(x0);
    auto d_doc = to_device(doc);
    const std::int32_t* dds = documents ? d_doc.data() : nullptr;
    if (forward) k::rope_forward(dx.data(), ld, B, Tq, H, hd, tables.cos.data(), tables.sin.data(), dds);
    else k::rope_backward(dx.data(), ld, B, Tq, H, hd, tables.cos.data(), tables.sin.data(), dds);
    if constexpr (kDeviceIsHost) {
      EXPECT_TRUE(bitwise_equal(to_host(dx), want)) << what << " kernel";
    } else {  // fma contraction may differ between device and host code
      const double rtol = sizeof(T) == 2 ? 1e-2 : sizeof(T) == 4 ? 1e-5 : 1e-13;
      expect_close(what + " kernel", to_double(to_host(dx)), to_double(want), rtol, 1e-6);
    }
  }
}

}  // namespace

TEST(KernelsRope, PackedFormPackByPackMatchesTheRowForm) {
  for (const bool documents : {false, true}) {
    check_rope_packs<bf16, 8>(documents);
    check_rope_packs<float, 4>(documents);
    check_rope_packs<double, 2>(documents);  // tables read element by element (2 floats)
    check_rope_packs<bf16, 1>(documents);
  }
}

TEST(KernelsRope, PacksOnlyOnGpusAndWholeAlignedRows) {
  alignas(16) static bf16 x[64];
  alignas(16) static float t[64];
  // SmolLM2: head_dim 64, qkv rows of (9 + 2 x 3) x 64.
  EXPECT_TRUE(k::detail::rope_rows_in_packs(x, 960, 64, t, t));
  EXPECT_TRUE(k::detail::rope_rows_in_packs(x, 960, 64, t + 32, t + 32));   // tables from position pos0
  EXPECT_FALSE(k::detail::rope_rows_in_packs(x, 960, 8, t, t));             // half of 4 bf16: half a pack
  EXPECT_FALSE(k::detail::rope_rows_in_packs(x, 962, 64, t, t));            // rows off 16 bytes
  EXPECT_FALSE(k::detail::rope_rows_in_packs(x + 1, 960, 64, t, t));        // x off 16 bytes
  EXPECT_FALSE(k::detail::rope_rows_in_packs(x, 960, 64, t + 2, t));        // a table off 16 bytes
  EXPECT_FALSE(k::detail::rope_rows_in_packs(reinterpret_cast<double*>(t), 960, 4, t, t));  // 2-float table rows
  EXPECT_EQ(k::detail::rope_rows_packable(x, 960, 64, t, t), !kDeviceIsHost);
}
