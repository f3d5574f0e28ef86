// Rotary embeddings: fp32 tables as Hugging Face computes them, rotate_half rotation,
// its transpose as the gradient.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_utils.hpp"
#include "kernels/rope.hpp"

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
