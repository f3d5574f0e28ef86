// Token (vocab-parallel) and position embeddings.
#include <gtest/gtest.h>

#include "kernel_test_utils.hpp"
#include "kernels/embedding.hpp"

using namespace meshtrain;
using namespace meshtrain::test;
namespace k = meshtrain::kernels;

namespace {

// A vocab slice [vocab_start, vocab_start + vocab_local) of a 40-token vocabulary, and
// tokens with repeats, some outside the slice.
constexpr int kC = 70;
constexpr std::int64_t kVocabStart = 10, kVocabLocal = 17;
std::vector<std::int32_t> tokens() {
  return {12, 0, 26, 12, 39, 10, 15, 12, 27, 9, 26, 20, 11, 11, 30, 12, 25, 10, 3, 14, 26};
}

}  // namespace

TEST(KernelsEmbedding, ForwardAndGradient) {
  const auto tok = tokens();
  const int n = static_cast<int>(tok.size());
  auto wte = random_normal(static_cast<std::size_t>(kVocabLocal) * kC, 1);
  const auto w = random_normal(static_cast<std::size_t>(n) * kC, 2);
  auto dtok = to_device(tok);
  auto forward = [&]() {
    auto dw = upload<double>(wte);
    auto out = upload<double>(std::vector<double>(w.size(), 7.0));
    k::embedding_forward(dtok.data(), n, dw.data(), kVocabStart, kVocabLocal, kC, out.data());
    return download(out);
  };
  const auto out = forward();
  for (int i = 0; i < n; ++i) {
    const std::int64_t row = tok[i] - kVocabStart;
    const bool in_slice = row >= 0 && row < kVocabLocal;
    for (int c = 0; c < kC; ++c)  // exact: a copy, or 0 for tokens of other slices
      EXPECT_EQ(out[static_cast<std::size_t>(i) * kC + c], in_slice ? wte[row * kC + c] : 0.0);
  }
  // dwte += scatter(dout); initial dwte nonzero to check accumulation.
  const auto dwte0 = random_normal(wte.size(), 3);
  auto ddw = upload<double>(dwte0);
  auto dout = upload<double>(w);
  k::embedding_backward(dtok.data(), n, dout.data(), kVocabStart, kVocabLocal, kC, ddw.data());
  const auto dwte = download(ddw);
  std::vector<double> host = dwte0, grad(wte.size());
  for (int i = 0; i < n; ++i) {  // token order, like the kernel: exact
    const std::int64_t row = tok[i] - kVocabStart;
    if (row < 0 || row >= kVocabLocal) continue;
    for (int c = 0; c < kC; ++c) host[row * kC + c] += w[static_cast<std::size_t>(i) * kC + c];
  }
  // Exact: each element is summed in token order, which is the reference's order.
  EXPECT_TRUE(bitwise_equal(dwte, host));
  for (std::size_t i = 0; i < grad.size(); ++i) grad[i] = dwte[i] - dwte0[i];
  fd_check("dwte", wte, grad, [&]() { return weighted_sum(w, forward()); }, 60, 4);
}

TEST(KernelsEmbedding, PositionForwardAndGradient) {
  const int B = 3, T = 11, C = 70, max_seq = 16;
  const auto x0 = random_normal(static_cast<std::size_t>(B) * T * C, 10);
  auto wpe = random_normal(static_cast<std::size_t>(max_seq) * C, 11);
  const auto w = random_normal(x0.size(), 12);
  auto forward = [&]() {
    auto dx = upload<double>(x0);
    auto dw = upload<double>(wpe);
    k::add_position_embedding(dx.data(), dw.data(), B, T, C);
    return download(dx);
  };
  const auto y = forward();
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) {
        const std::size_t i = (static_cast<std::size_t>(b) * T + t) * C + c;
        EXPECT_EQ(y[i], x0[i] + wpe[static_cast<std::size_t>(t) * C + c]);  // exact: one add
      }
  const auto dwpe0 = random_normal(wpe.size(), 13);
  auto ddw = upload<double>(dwpe0);
  auto dy = upload<double>(w);
  k::position_embedding_backward(dy.data(), ddw.data(), B, T, C);
  const auto dwpe = download(ddw);
  std::vector<double> grad(wpe.size());
  for (std::size_t i = 0; i < grad.size(); ++i) grad[i] = dwpe[i] - dwpe0[i];
  // Rows t >= T_seq are untouched.
  for (std::size_t i = static_cast<std::size_t>(T) * C; i < dwpe.size(); ++i) EXPECT_EQ(dwpe[i], dwpe0[i]);
  fd_check("dwpe", wpe, grad, [&]() { return weighted_sum(w, forward()); }, 60, 14);
}

TEST(KernelsEmbedding, Bf16MatchesFloat) {
  const auto tok = tokens();
  const int n = static_cast<int>(tok.size());
  const int B = 3, T = 7;  // 21 tokens as (B, T)
  const auto wte = bf16_exact(random_normal(static_cast<std::size_t>(kVocabLocal) * kC, 20));
  const auto wpe = bf16_exact(random_normal(static_cast<std::size_t>(T) * kC, 21));
  const auto dy = bf16_exact(random_normal(static_cast<std::size_t>(n) * kC, 22));
  auto dtok = to_device(tok);
  auto run = [&](auto tag) {
    using T_ = decltype(tag);
    std::vector<std::vector<double>> outs;
    auto dw = upload<T_>(wte);
    auto dp = upload<T_>(wpe);
    Buffer<T_> out(dy.size(), MemCategory::Workspace);
    k::embedding_forward(dtok.data(), n, dw.data(), kVocabStart, kVocabLocal, kC, out.data());
    k::add_position_embedding(out.data(), dp.data(), B, T, kC);
    outs.push_back(download(out));
    auto ddy = upload<T_>(dy);
    // Parameter gradients are acc_t<T>: fp32 for bf16.
    auto gw = upload<acc_t<T_>>(std::vector<double>(wte.size(), 0.0));
    auto gp = upload<acc_t<T_>>(std::vector<double>(wpe.size(), 0.0));
    k::embedding_backward(dtok.data(), n, ddy.data(), kVocabStart, kVocabLocal, kC, gw.data());
    k::position_embedding_backward(ddy.data(), gp.data(), B, T, kC);
    outs.push_back(download(gw));
    outs.push_back(download(gp));
    return outs;
  };
  const auto f = run(float{});
  const auto b = run(bf16{});
  expect_bf16_close("embedding + position forward", b[0], f[0]);
  expect_bf16_close("embedding_backward", b[1], f[1]);
  expect_bf16_close("position_embedding_backward", b[2], f[2]);
}

TEST(KernelsEmbedding, BackwardDeterministic) {
  std::vector<std::int32_t> tok(4096);
  for (std::size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<std::int32_t>((i * 7919) % 37);
  const int n = static_cast<int>(tok.size()), C = 200;
  const auto dy = random_normal(static_cast<std::size_t>(n) * C, 30);
  auto dtok = to_device(tok);
  auto ddy = upload<float>(dy);
  auto run = [&]() {
    auto g = upload<float>(std::vector<double>(static_cast<std::size_t>(37) * C, 0.0));
    auto gp = upload<float>(std::vector<double>(static_cast<std::size_t>(64) * C, 0.0));
    k::embedding_backward(dtok.data(), n, ddy.data(), 0, 37, C, g.data());
    k::position_embedding_backward(ddy.data(), gp.data(), 64, 64, C);
    auto a = to_host(g), b = to_host(gp);
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  EXPECT_TRUE(bitwise_equal(run(), run()));
}

// Packed rows: each token's row goes to its position inside its document. The kernel visits
// the tokens of each position in token order, so it must equal the serial token-order scan
// bit for bit, with the same per-add rounding (bf16 rows added into an fp32 gradient), for
// documents of every length: 1-token documents, one that fills a whole sequence, and random
// boundaries.
TEST(KernelsEmbedding, PackedPositionBackwardTokenOrder) {
  const int B = 4, T = 37, C = 70;
  std::vector<std::int32_t> docs(static_cast<std::size_t>(B) * T);
  std::mt19937_64 gen(40);
  for (int b = 0; b < B; ++b) {
    int start = 0;
    for (int t = 0; t < T; ++t) {
      // b = 0: one document; b = 1: every token its own document; otherwise random cuts.
      const bool cut = t > 0 && (b == 1 || (b >= 2 && gen() % (b == 2 ? 3 : 9) == 0));
      if (cut) start = t;
      docs[static_cast<std::size_t>(b) * T + t] = start;
    }
  }
  const auto dy = bf16_exact(random_normal(static_cast<std::size_t>(B) * T * C, 41));
  const auto dwpe0 = bf16_exact(random_normal(static_cast<std::size_t>(T) * C, 42));
  auto ddoc = to_device(docs);
  auto run = [&](auto tag) {
    using T_ = decltype(tag);
    auto g = upload<acc_t<T_>>(dwpe0);
    auto d = upload<T_>(dy);
    k::position_embedding_backward(d.data(), g.data(), B, T, C, ddoc.data());
    return to_host(g);
  };
  auto reference = [&](auto tag) {
    using T_ = decltype(tag);
    using A = acc_t<T_>;
    std::vector<A> w = convert<A>(dwpe0);
    const std::vector<T_> d = convert<T_>(dy);
    for (int r = 0; r < B * T; ++r) {
      const int p = r % T - docs[static_cast<std::size_t>(r)];
      for (int c = 0; c < C; ++c) w[static_cast<std::size_t>(p) * C + c] += static_cast<A>(d[static_cast<std::size_t>(r) * C + c]);
    }
    return w;
  };
  EXPECT_TRUE(bitwise_equal(to_double(run(double{})), to_double(reference(double{}))));
  EXPECT_TRUE(bitwise_equal(to_double(run(float{})), to_double(reference(float{}))));
  EXPECT_TRUE(bitwise_equal(to_double(run(bf16{})), to_double(reference(bf16{}))));
}

TEST(KernelsEmbedding, TokenIndexAndTheIndexedGpuFormMatchTheHostForm) {
  // The training step groups a micro-batch's tokens by row on the host, where they come from
  // (token_grad_index), and GPUs sum through that index (embedding_backward_indexed); on
  // the CPU the indexed form runs on host threads and must equal the host form bit for bit in
  // double and float (both sum each element in token order), and the index must be the stable
  // grouping (rows ascending, positions in token order, tokens outside the slice left out).
  const auto tok = tokens();
  const int n = static_cast<int>(tok.size());
  std::vector<std::int32_t> index(static_cast<std::size_t>(k::token_grad_index_elems(n)), -5);
  k::token_grad_index(tok.data(), n, kVocabStart, kVocabLocal, index.data());
  // In the slice [10, 27): rows 0(10) 1(11) 2(12) 4(14) 5(15) 10(20) 15(25) 16(26).
  ASSERT_EQ(index[0], 8);
  const std::vector<std::int32_t> rows(index.begin() + 1, index.begin() + 9);
  EXPECT_EQ(rows, (std::vector<std::int32_t>{0, 1, 2, 4, 5, 10, 15, 16}));
  const std::int32_t* offsets = index.data() + 1 + n;
  const std::vector<std::int32_t> off(offsets, offsets + 9);
  EXPECT_EQ(off, (std::vector<std::int32_t>{0, 2, 4, 8, 9, 10, 11, 12, 15}));
  const std::int32_t* pos = index.data() + 2 + 2 * n;
  // token 12 (row 2) at positions 0, 3, 7, 15 in token order; 26 (row 16) at 2, 10, 20.
  EXPECT_EQ(std::vector<std::int32_t>(pos + 4, pos + 8), (std::vector<std::int32_t>{0, 3, 7, 15}));
  EXPECT_EQ(std::vector<std::int32_t>(pos + 12, pos + 15), (std::vector<std::int32_t>{2, 10, 20}));
  EXPECT_EQ(index.back(), -5) << "past the positions, the index is left as it was";

  auto dtok = to_device(tok);
  auto didx = to_device(index);
  const auto dwte0 = random_normal(static_cast<std::size_t>(kVocabLocal) * kC, 5);
  const auto w = random_normal(static_cast<std::size_t>(n) * kC, 6);
  auto run = [&](auto zero, bool indexed) {
    using T = decltype(zero);
    auto dw = upload<acc_t<T>>(dwte0);
    auto dout = upload<T>(w);
    if (indexed) k::embedding_backward_indexed(didx.data(), n, dout.data(), kVocabLocal, kC, dw.data());
    else k::embedding_backward(dtok.data(), n, dout.data(), kVocabStart, kVocabLocal, kC, dw.data());
    return download(dw);
  };
  EXPECT_TRUE(bitwise_equal(run(0.0, true), run(0.0, false)));
  EXPECT_TRUE(bitwise_equal(run(0.0f, true), run(0.0f, false)));
  // bf16: both forms add the bf16 rows into the fp32 gradient in token order: bit for bit too.
  EXPECT_TRUE(bitwise_equal(run(bf16(0.0f), true), run(bf16(0.0f), false)));
  // More tokens than rows in the slice, and none in it.
  std::vector<std::int32_t> none(7, 3);
  std::vector<std::int32_t> empty(static_cast<std::size_t>(k::token_grad_index_elems(7)), 0);
  k::token_grad_index(none.data(), 7, kVocabStart, kVocabLocal, empty.data());
  EXPECT_EQ(empty[0], 0);
  EXPECT_EQ(empty[1 + 7], 0);
}
