// The description of attention's operands that the cuDNN path hands to cuDNN
// (kernels/sdpa_layout.hpp): a double-precision causal attention that reads q, k, v and
// writes out, the log-sum-exp statistics and dq, dk, dv only through the layout's dims,
// strides and offsets -- exactly as the fused kernel will -- must reproduce the Kokkos path
// (itself tested against a direct reference and finite differences in test_kernels_attention)
// on the same buffers: plain MHA, GQA, GQA under tensor parallelism with split kv heads,
// replicated kv heads read by several or by one query head per rank. The shapes the fused
// kernel cannot express are refused with a reason. This is the CPU half of the cuDNN path's
// check; selfcheck_paths and test_cuda_link run cuDNN itself where a GPU is.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernel_test_utils.hpp"
#include "kernels/attention.hpp"
#include "kernels/sdpa_layout.hpp"
#include "sdpa_reference.hpp"

using namespace meshtrain;
using namespace meshtrain::test;
namespace k = meshtrain::kernels;

namespace {

struct Case {
  const char* name;
  int B, T, Hq, Hkv, hd, group, q_off, kv_off;
};

k::AttentionShape shape_of(const Case& c) {
  k::AttentionShape s;
  s.B = c.B;
  s.T = c.T;
  s.Hq = c.Hq;
  s.Hkv = c.Hkv;
  s.hd = c.hd;
  s.group = c.group;
  s.q_head_offset = c.q_off;
  s.kv_head_offset = c.kv_off;
  s.scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
  return s;
}

}  // namespace

TEST(SdpaLayout, ReproducesTheKokkosPathThroughDimsAndStrides) {
  const Case cases[] = {
      {"mha", 2, 23, 3, 3, 16, 1, 0, 0},
      {"gqa", 2, 19, 4, 2, 16, 2, 0, 0},
      // tp=2 of 8 query / 4 kv heads, rank 1: split kv heads (kv_head_offset = rank * Hkv).
      {"gqa tp split kv", 1, 17, 4, 2, 8, 2, 4, 2},
      // tp=3 of 6 query / 2 kv heads, rank 1: replicated kv heads, local query heads 2, 3 read kv 0, 1.
      {"gqa tp replicated kv", 2, 13, 2, 2, 8, 3, 2, 0},
      // tp=4 of 8 query / 2 kv heads, rank 1: both local query heads read kv head 0 (kv 1 unread).
      {"gqa tp one group", 1, 21, 2, 2, 8, 4, 2, 0},
  };
  for (const Case& c : cases) {
    const k::AttentionShape s = shape_of(c);
    const int ld = (c.Hq + 2 * c.Hkv) * c.hd + 8, ldo = c.Hq * c.hd + 8;
    const k::SdpaLayout L = k::sdpa_layout(s, ld, ld, ld, ldo);
    ASSERT_TRUE(L.supported) << c.name << ": " << L.why_not;
    const std::size_t N = static_cast<std::size_t>(c.B) * c.T;
    const std::size_t q0 = 0, k0 = static_cast<std::size_t>(c.Hq) * c.hd, v0 = k0 + static_cast<std::size_t>(c.Hkv) * c.hd;
    const std::vector<double> qkv = random_vector(N * ld, 11), dout = random_vector(N * ldo, 12);

    // The Kokkos path in double on the same buffers.
    auto d = upload<double>(qkv);
    auto out = upload<double>(std::vector<double>(N * ldo, 0.0));
    Buffer<double> stats(static_cast<std::size_t>(c.B) * c.Hq * c.T * 2, MemCategory::Workspace);
    auto work = upload<double>(std::vector<double>(k::attention_workspace_elems(s), 0.0));
    k::attention_forward(s, d.data() + q0, ld, d.data() + k0, ld, d.data() + v0, ld, out.data(), ldo, stats.data(),
                         work.data());
    auto dO = upload<double>(dout);
    auto g = upload<double>(std::vector<double>(N * ld, 0.0));
    k::attention_backward(s, d.data() + q0, ld, d.data() + k0, ld, d.data() + v0, ld, out.data(), stats.data(),
                          dO.data(), ldo, g.data() + q0, g.data() + k0, g.data() + v0, work.data());
    const std::vector<double> kokkos_out = download(out), kokkos_stats = download(stats), kokkos_grad = download(g);

    // The layout's reading of the same buffers; columns it must not touch stay 0.
    std::vector<double> lay_out(N * ldo, 0.0), lay_stats(kokkos_stats.size(), 0.0), lay_grad(N * ld, 0.0);
    test::sdpa_reference(L, test::dense_sequences(L), s.scale, qkv.data() + q0, qkv.data() + k0, qkv.data() + v0, lay_out.data(),
                        lay_stats.data(), dout.data(), lay_grad.data() + q0, lay_grad.data() + k0,
                        lay_grad.data() + v0);
    expect_close(lay_out, kokkos_out, 1e-12, "out", c.name);
    expect_close(lay_grad, kokkos_grad, 1e-12, "dq|dk|dv", c.name);
    // Statistics: the Kokkos path keeps (max, 1 / sum) per row, cuDNN the log-sum-exp in the
    // first element of each pair (the second is never written by it).
    std::vector<double> lse(kokkos_stats.size(), 0.0);
    for (std::size_t r = 0; r < lse.size(); r += 2) lse[r] = kokkos_stats[r] - std::log(kokkos_stats[r + 1]);
    expect_close(lay_stats, lse, 1e-12, "lse", c.name);
    EXPECT_EQ(L.unread_kv_heads, std::string(c.name) == "gqa tp one group") << c.name;
  }
}

TEST(SdpaLayout, RefusesWhatTheFusedKernelCannotExpress) {
  // tp=2 of 6 query / 3 kv heads (replicated): rank 0's query heads 0, 1, 2 read kv 0, 0, 1.
  k::AttentionShape s = shape_of({"straddle", 1, 8, 3, 3, 8, 2, 0, 0});
  k::SdpaLayout L = k::sdpa_layout(s, 64, 64, 64, 24);
  EXPECT_FALSE(L.supported);
  EXPECT_NE(L.why_not.find("query heads"), std::string::npos) << L.why_not;

  s = shape_of({"hd12", 1, 8, 2, 2, 12, 1, 0, 0});
  L = k::sdpa_layout(s, 72, 72, 72, 24);
  EXPECT_FALSE(L.supported);
  EXPECT_NE(L.why_not.find("head dimension 12"), std::string::npos) << L.why_not;

  s = shape_of({"hd256", 1, 8, 1, 1, 256, 1, 0, 0});
  EXPECT_FALSE(k::sdpa_layout(s, 768, 768, 768, 256).supported);

  s = shape_of({"ld", 1, 8, 2, 2, 8, 1, 0, 0});
  L = k::sdpa_layout(s, 50, 50, 50, 16);
  EXPECT_FALSE(L.supported);
  EXPECT_NE(L.why_not.find("row stride 50"), std::string::npos) << L.why_not;

  std::vector<std::int32_t> docs(8, 0);
  s = shape_of({"packed", 1, 8, 2, 2, 8, 1, 0, 0});
  s.doc_start = docs.data();
  L = k::sdpa_layout(s, 48, 48, 48, 16);
  EXPECT_FALSE(L.supported);
  EXPECT_NE(L.why_not.find("document"), std::string::npos) << L.why_not;
}
