// Packed rows as cuDNN's variable-length attention (kernels/sdpa_ragged.hpp): a
// double-precision attention that reads q, k, v and writes out, the log-sum-exp statistics
// and dq, dk, dv ONLY through the ragged description -- each graph batch entry's seq_len and
// per-operand ragged offsets, the layout's strides and head offsets, and the rule the fused
// kernel applies (causal top-left: key j <= query i; padding: j < seq_len; rows past seq_len
// untouched) -- must reproduce the Kokkos document-masked path (itself tested against a
// direct reference and finite differences in test_kernels_attention) on the same buffers:
// random document boundaries with length-1 documents and a document filling its row, MHA,
// GQA and tensor-parallel head offsets. Also: the description itself (documents, the
// power-of-two graph batch with empty entries, offsets counting elements), its device image,
// and the refusals. selfcheck_paths (attention.cudnn_ragged) runs cuDNN itself on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernel_test_utils.hpp"
#include "kernels/attention.hpp"
#include "kernels/sdpa_layout.hpp"
#include "sdpa_reference.hpp"
#include "kernels/sdpa_ragged.hpp"

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

/// (B, T) document starts: row 0 one document filling it; row 1 a run of length-1
/// documents at its start and its end; the others random boundaries (about one in five
/// tokens starts a document).
std::vector<std::int32_t> random_docs(int B, int T, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::int32_t> d(static_cast<std::size_t>(B) * T);
  for (int b = 0; b < B; ++b) {
    int start = 0;
    for (int t = 0; t < T; ++t) {
      bool begins = t == 0;
      if (b == 1) begins = begins || t < 4 || t >= T - 3 || t == T / 2;
      if (b >= 2) begins = begins || rng() % 5 == 0;
      if (begins) start = t;
      d[static_cast<std::size_t>(b) * T + t] = start;
    }
  }
  return d;
}

/// The graph batch entries of a ragged description as the reference's sequences.
std::vector<test::SdpaSeq> ragged_sequences(const k::SdpaRagged& R) {
  std::vector<test::SdpaSeq> seqs;
  for (int e = 0; e < R.batch; ++e)
    seqs.push_back({R.seq_len[e], R.offset(k::kRaggedQ)[e], R.offset(k::kRaggedK)[e], R.offset(k::kRaggedV)[e],
                    R.offset(k::kRaggedO)[e], R.offset(k::kRaggedStats)[e]});
  return seqs;
}

const Case kCases[] = {
    {"mha", 3, 37, 3, 3, 16, 1, 0, 0},
    {"gqa", 4, 29, 4, 2, 16, 2, 0, 0},
    // tp=2 of 8 query / 4 kv heads, rank 1: split kv heads (kv_head_offset = rank * Hkv).
    {"gqa tp split kv", 3, 23, 4, 2, 8, 2, 4, 2},
    // tp=3 of 6 query / 2 kv heads, rank 1: replicated kv heads, local query heads 2, 3 read kv 0, 1.
    {"gqa tp replicated kv", 3, 19, 2, 2, 8, 3, 2, 0},
    // tp=4 of 8 query / 2 kv heads, rank 1: both local query heads read kv head 0 (kv 1 unread).
    {"gqa tp one group", 3, 31, 2, 2, 8, 4, 2, 0},
};

}  // namespace

TEST(SdpaRagged, DescribesTheDocumentsOfPackedRows) {
  // Rows of 6: [0..5] one document; [0,1][2][3..5]; [0][1][2][3][4][5].
  const std::vector<std::int32_t> docs = {0, 0, 0, 0, 0, 0, 0, 0, 2, 3, 3, 3, 0, 1, 2, 3, 4, 5};
  k::AttentionShape s = shape_of({"small", 3, 6, 2, 2, 8, 1, 0, 0});
  s.doc_start = docs.data();
  const int ld = 40, ldo = 24;
  const k::SdpaRaggedCall call = k::sdpa_ragged(s, docs.data(), ld, ld, ld, ldo);
  ASSERT_TRUE(call.layout.supported) << call.layout.why_not;
  const k::SdpaRagged& R = call.ragged;
  EXPECT_TRUE(call.layout.ragged);
  EXPECT_EQ(call.layout.ragged_tokens, 18);
  EXPECT_EQ(R.documents, 10);
  EXPECT_EQ(R.batch, 16);  // the next power of two; 6 empty entries
  const std::vector<std::int32_t> lens = {6, 2, 1, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(R.seq_len, lens);
  // Ragged offsets count elements: first token of each document times the operand's
  // per-token stride (ld for q/k/v, ldo for out, Hq for the token-major stats); the empty
  // entries and entry `batch` point at the end.
  const std::vector<std::int64_t> first = {0, 6, 8, 9, 12, 13, 14, 15, 16, 17, 18, 18, 18, 18, 18, 18, 18};
  for (std::size_t e = 0; e < first.size(); ++e) {
    EXPECT_EQ(R.offset(k::kRaggedQ)[e], first[e] * ld) << e;
    EXPECT_EQ(R.offset(k::kRaggedK)[e], first[e] * ld) << e;
    EXPECT_EQ(R.offset(k::kRaggedV)[e], first[e] * ld) << e;
    EXPECT_EQ(R.offset(k::kRaggedO)[e], first[e] * ldo) << e;
    EXPECT_EQ(R.offset(k::kRaggedStats)[e], first[e] * s.Hq) << e;
  }
  EXPECT_EQ(call.layout.q.dim[0], 16);
  EXPECT_EQ(call.layout.stats.dim[0], 16);
  // The device image: each operand's offsets, then seq_len as int32, every array 256-byte
  // aligned (32 int64 apart here: 17 entries rounded up).
  const std::vector<std::int64_t> block = R.index_block();
  const std::int64_t stride = k::sdpa_ragged_index_stride(R.batch);
  EXPECT_EQ(stride, 32);
  ASSERT_EQ(static_cast<std::int64_t>(block.size()), k::sdpa_ragged_index_elems(R.batch));
  for (int op = 0; op < k::kRaggedOperands; ++op)
    for (int e = 0; e <= R.batch; ++e)
      EXPECT_EQ(block[op * stride + e], R.offset(static_cast<k::SdpaOperand>(op))[e]) << op << " " << e;
  std::vector<std::int32_t> packed(lens.size());
  std::memcpy(packed.data(), block.data() + k::kRaggedOperands * stride, packed.size() * sizeof(std::int32_t));
  EXPECT_EQ(packed, lens);
  EXPECT_EQ(k::sdpa_ragged_index_stride(31), 32);
  EXPECT_EQ(k::sdpa_ragged_index_stride(32), 64);
  EXPECT_EQ(k::sdpa_ragged_batch(1), 1);
  EXPECT_EQ(k::sdpa_ragged_batch(2), 2);
  EXPECT_EQ(k::sdpa_ragged_batch(3), 4);
  EXPECT_EQ(k::sdpa_ragged_batch(1024), 1024);
  EXPECT_EQ(k::sdpa_ragged_batch(1025), 2048);
}

TEST(SdpaRagged, ReproducesTheKokkosDocumentMaskedPath) {
  bool empty_entries = false;
  for (const Case& c : kCases) {
    k::AttentionShape s = shape_of(c);
    const std::vector<std::int32_t> docs = random_docs(c.B, c.T, 7 + c.T);
    auto d_docs = to_device(docs);  // the Kokkos path reads the device copy
    s.doc_start = d_docs.data();
    const int ld = (c.Hq + 2 * c.Hkv) * c.hd + 8, ldo = c.Hq * c.hd + 8;
    const k::SdpaRaggedCall call = k::sdpa_ragged(s, docs.data(), ld, ld, ld, ldo);
    ASSERT_TRUE(call.layout.supported) << c.name << ": " << call.layout.why_not;
    const k::SdpaLayout& L = call.layout;
    const k::SdpaRagged& R = call.ragged;
    EXPECT_EQ(L.unread_kv_heads, std::string(c.name) == "gqa tp one group") << c.name;
    empty_entries = empty_entries || R.batch > R.documents;
    const std::size_t N = static_cast<std::size_t>(c.B) * c.T;
    const std::size_t q0 = 0, k0 = static_cast<std::size_t>(c.Hq) * c.hd, v0 = k0 + static_cast<std::size_t>(c.Hkv) * c.hd;
    const std::vector<double> qkv = random_vector(N * ld, 21), dout = random_vector(N * ldo, 22);

    // The Kokkos document-masked path in double on the same buffers.
    auto d = upload<double>(qkv);
    auto out = upload<double>(std::vector<double>(N * ldo, 0.0));
    const std::size_t n_stats = static_cast<std::size_t>(c.B) * c.Hq * c.T * 2;
    Buffer<double> stats(n_stats, MemCategory::Workspace);
    auto work = upload<double>(std::vector<double>(k::attention_workspace_elems(s), 0.0));
    k::attention_forward(s, d.data() + q0, ld, d.data() + k0, ld, d.data() + v0, ld, out.data(), ldo, stats.data(),
                         work.data());
    auto dO = upload<double>(dout);
    auto g = upload<double>(std::vector<double>(N * ld, 0.0));
    k::attention_backward(s, d.data() + q0, ld, d.data() + k0, ld, d.data() + v0, ld, out.data(), stats.data(),
                          dO.data(), ldo, g.data() + q0, g.data() + k0, g.data() + v0, work.data());
    const std::vector<double> kokkos_out = download(out), kokkos_stats = download(stats), kokkos_grad = download(g);

    // The description's reading of the same buffers; what it must not touch stays 0.
    std::vector<double> lay_out(N * ldo, 0.0), lay_stats(n_stats, 0.0), lay_grad(N * ld, 0.0);
    test::sdpa_reference(L, ragged_sequences(R), s.scale, qkv.data() + q0, qkv.data() + k0, qkv.data() + v0, lay_out.data(), lay_stats.data(),
                dout.data(), lay_grad.data() + q0, lay_grad.data() + k0, lay_grad.data() + v0);
    expect_close(lay_out, kokkos_out, 1e-12, "out", c.name);
    expect_close(lay_grad, kokkos_grad, 1e-12, "dq|dk|dv", c.name);
    // Statistics: the Kokkos path keeps (max, 1 / sum) per (b, h, t); the ragged layout the
    // log-sum-exp of token b*T + t and head h at (b*T + t) * Hq + h.
    std::vector<double> lse(n_stats, 0.0);
    for (int b = 0; b < c.B; ++b)
      for (int h = 0; h < c.Hq; ++h)
        for (int t = 0; t < c.T; ++t) {
          const std::size_t r = ((static_cast<std::size_t>(b) * c.Hq + h) * c.T + t) * 2;
          lse[(static_cast<std::size_t>(b) * c.T + t) * c.Hq + h] = kokkos_stats[r] - std::log(kokkos_stats[r + 1]);
        }
    expect_close(lay_stats, lse, 1e-12, "lse", c.name);
  }
  EXPECT_TRUE(empty_entries) << "no case had empty graph batch entries";
}

TEST(SdpaRagged, AnIgnoredBoundaryChangesTheResult) {
  // The twin honours the documents: describing the same rows as one document per row gives
  // a different output, so the comparison above can fail.
  const Case c = kCases[0];
  k::AttentionShape s = shape_of(c);
  const std::vector<std::int32_t> docs = random_docs(c.B, c.T, 7 + c.T);
  s.doc_start = docs.data();
  const int ld = (c.Hq + 2 * c.Hkv) * c.hd + 8, ldo = c.Hq * c.hd + 8;
  const k::SdpaRaggedCall packed = k::sdpa_ragged(s, docs.data(), ld, ld, ld, ldo);
  const std::size_t N = static_cast<std::size_t>(c.B) * c.T;
  const std::vector<double> qkv = random_vector(N * ld, 21);
  std::vector<double> a(N * ldo, 0.0), b(N * ldo, 0.0), st(N * c.Hq * 2, 0.0);
  test::sdpa_reference(packed.layout, ragged_sequences(packed.ragged), s.scale, qkv.data(), qkv.data() + c.Hq * c.hd,
              qkv.data() + (c.Hq + c.Hkv) * c.hd, a.data(), st.data(), nullptr, nullptr, nullptr, nullptr);
  // One document per row: every token's start is its row's first position.
  const std::vector<std::int32_t> per_row(docs.size(), 0);
  const k::SdpaRaggedCall one = k::sdpa_ragged(s, per_row.data(), ld, ld, ld, ldo);
  ASSERT_EQ(one.ragged.documents, c.B);
  test::sdpa_reference(one.layout, ragged_sequences(one.ragged), s.scale, qkv.data(), qkv.data() + c.Hq * c.hd,
              qkv.data() + (c.Hq + c.Hkv) * c.hd, b.data(), st.data(), nullptr, nullptr, nullptr, nullptr);
  double diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::abs(a[i] - b[i]));
  EXPECT_GT(diff, 1e-3);
}

TEST(SdpaRagged, RefusesWhatTheFusedKernelCannotExpress) {
  std::vector<std::int32_t> docs(8, 0);
  k::AttentionShape s = shape_of({"packed", 1, 8, 2, 2, 8, 1, 0, 0});
  s.doc_start = docs.data();
  // The dense description sends packed rows here.
  k::SdpaLayout L = k::sdpa_layout(s, 48, 48, 48, 16);
  EXPECT_FALSE(L.supported);
  EXPECT_NE(L.why_not.find("document"), std::string::npos) << L.why_not;
  // No host copy of the document starts.
  k::SdpaRaggedCall call = k::sdpa_ragged(s, nullptr, 48, 48, 48, 16);
  EXPECT_FALSE(call.layout.supported);
  EXPECT_NE(call.layout.why_not.find("host copy"), std::string::npos) << call.layout.why_not;
  // The dense rules hold for packed rows too: head dimension, row strides, head grouping.
  s = shape_of({"hd12", 1, 8, 2, 2, 12, 1, 0, 0});
  s.doc_start = docs.data();
  call = k::sdpa_ragged(s, docs.data(), 72, 72, 72, 24);
  EXPECT_FALSE(call.layout.supported);
  EXPECT_NE(call.layout.why_not.find("head dimension 12"), std::string::npos) << call.layout.why_not;
  s = shape_of({"ld", 1, 8, 2, 2, 8, 1, 0, 0});
  s.doc_start = docs.data();
  call = k::sdpa_ragged(s, docs.data(), 50, 50, 50, 16);
  EXPECT_FALSE(call.layout.supported);
  EXPECT_NE(call.layout.why_not.find("row stride 50"), std::string::npos) << call.layout.why_not;
  s = shape_of({"straddle", 1, 8, 3, 3, 8, 2, 0, 0});
  s.doc_start = docs.data();
  call = k::sdpa_ragged(s, docs.data(), 64, 64, 64, 24);
  EXPECT_FALSE(call.layout.supported);
  EXPECT_NE(call.layout.why_not.find("query heads"), std::string::npos) << call.layout.why_not;
  EXPECT_TRUE(call.ragged.seq_len.empty());
}

TEST(SdpaRagged, DeviceIndexIsTheHostIndexBitForBit) {
  // The device index (kernels::sdpa_ragged_index, from the device document starts) against
  // the host description's index_block(), every int64 of the block compared: one document
  // per row (the batch fits exactly), length-1 documents everywhere (the most documents a
  // batch can have), the random boundaries of the other tests (row 0 one document filling
  // it, row 1 length-1 documents at both ends), a count just past a power of two (unused
  // entries), and B = 1.
  struct Layout {
    int B, T, Hq, ld, ldo;
  };
  std::vector<std::pair<Layout, std::vector<std::int32_t>>> inputs;
  {
    const Layout l{4, 16, 2, 48, 16};
    inputs.push_back({l, std::vector<std::int32_t>(64, 0)});  // every row one document
    std::vector<std::int32_t> ones(64);
    for (int i = 0; i < 64; ++i) ones[static_cast<std::size_t>(i)] = i % 16;
    inputs.push_back({l, ones});                              // 64 length-1 documents
    std::vector<std::int32_t> five = ones;                    // 5 documents: 4 rows, row 2 split in two
    for (int i = 0; i < 64; ++i) five[static_cast<std::size_t>(i)] = (i / 16 == 2 && i % 16 >= 7) ? 7 : 0;
    inputs.push_back({l, five});
  }
  for (unsigned seed : {1u, 2u, 3u}) {
    const Layout l{5, 37, 3, 72, 24};
    inputs.push_back({l, random_docs(l.B, l.T, seed)});
  }
  inputs.push_back({Layout{1, 29, 4, 64, 32}, random_docs(1, 29, 9)});
  for (const auto& [l, docs] : inputs) {
    k::AttentionShape s = shape_of({"index", l.B, l.T, l.Hq, l.Hq, 8, 1, 0, 0});
    Buffer<std::int32_t> d_docs = to_device(docs);
    s.doc_start = d_docs.data();
    const k::SdpaRaggedCall call = k::sdpa_ragged(s, docs.data(), l.ld, l.ld, l.ld, l.ldo);
    ASSERT_TRUE(call.layout.supported) << call.layout.why_not;
    const std::vector<std::int64_t> host = call.ragged.index_block();
    const int batch = call.ragged.batch;
    // Poisoned output and scratch: every element must be written.
    Buffer<std::int64_t> block = to_device(std::vector<std::int64_t>(host.size(), -7));
    Buffer<std::int64_t> first = to_device(std::vector<std::int64_t>(static_cast<std::size_t>(batch) + 1, -7));
    const auto strides = k::sdpa_ragged_token_strides(s, l.ld, l.ld, l.ld, l.ldo);
    EXPECT_EQ(strides[k::kRaggedStats], l.Hq);
    k::sdpa_ragged_index(s.doc_start, l.B, l.T, strides.data(), batch, block.data(), first.data());
    const std::vector<std::int64_t> dev = to_host(block);
    ASSERT_EQ(dev.size(), host.size());
    for (std::size_t j = 0; j < host.size(); ++j)
      ASSERT_EQ(dev[j], host[j]) << "B " << l.B << " T " << l.T << ": element " << j << " of the index ("
                                 << call.ragged.documents << " documents, batch " << batch << ")";
    EXPECT_EQ(to_host(first)[static_cast<std::size_t>(batch)], call.ragged.documents);
  }
}

TEST(SdpaRagged, AFixedGraphBatchOnlyAddsEmptyEntries) {
  // A step replayed from a CUDA graph fixes the graph batch of all its micro-steps
  // (AttentionShape::ragged_batch, train/step_graph.hpp): larger than a micro-batch's own, the
  // description gains empty entries only, and reads and writes the same values.
  const Case c = kCases[1];
  k::AttentionShape s = shape_of(c);
  const std::vector<std::int32_t> docs = random_docs(c.B, c.T, 5);
  s.doc_start = docs.data();
  const int ld = (c.Hq + 2 * c.Hkv) * c.hd, ldo = c.Hq * c.hd;
  const k::SdpaRaggedCall own = k::sdpa_ragged(s, docs.data(), ld, ld, ld, ldo);
  ASSERT_TRUE(own.layout.supported) << own.layout.why_not;
  EXPECT_EQ(k::sdpa_ragged_documents(docs.data(), c.B, c.T), own.ragged.documents);
  s.ragged_batch = 4 * own.ragged.batch;
  const k::SdpaRaggedCall fixed = k::sdpa_ragged(s, docs.data(), ld, ld, ld, ldo);
  ASSERT_TRUE(fixed.layout.supported) << fixed.layout.why_not;
  const k::SdpaRagged &A = own.ragged, &F = fixed.ragged;
  EXPECT_EQ(F.documents, A.documents);
  EXPECT_EQ(F.batch, s.ragged_batch);
  EXPECT_EQ(fixed.layout.q.dim[0], s.ragged_batch);
  EXPECT_EQ(fixed.layout.stats.dim[0], s.ragged_batch);
  const std::int64_t N = static_cast<std::int64_t>(c.B) * c.T;
  for (int e = 0; e < F.batch; ++e) {
    EXPECT_EQ(F.seq_len[e], e < A.batch ? A.seq_len[e] : 0) << e;
    for (int op = 0; op < k::kRaggedOperands; ++op) {
      const auto o = static_cast<k::SdpaOperand>(op);
      const std::int64_t stride = k::sdpa_ragged_token_strides(s, ld, ld, ld, ldo)[op];
      EXPECT_EQ(F.offset(o)[e], e < A.documents ? A.offset(o)[e] : N * stride) << op << " " << e;
    }
  }
  const std::size_t n = static_cast<std::size_t>(N);
  const std::vector<double> qkv = random_vector(n * ld, 31), dout = random_vector(n * ldo, 32);
  const auto run = [&](const k::SdpaRaggedCall& call) {
    std::vector<double> out(n * ldo, 0.0), st(n * c.Hq, 0.0), grad(n * ld, 0.0);
    const std::size_t k0 = static_cast<std::size_t>(c.Hq) * c.hd, v0 = k0 + static_cast<std::size_t>(c.Hkv) * c.hd;
    test::sdpa_reference(call.layout, ragged_sequences(call.ragged), s.scale, qkv.data(), qkv.data() + k0,
                         qkv.data() + v0, out.data(), st.data(), dout.data(), grad.data(), grad.data() + k0,
                         grad.data() + v0);
    out.insert(out.end(), st.begin(), st.end());
    out.insert(out.end(), grad.begin(), grad.end());
    return out;
  };
  EXPECT_EQ(run(own), run(fixed));  // bit for bit: the empty entries read and write nothing
  // The device index for the fixed batch is its host image too.
  Buffer<std::int32_t> d_docs = to_device(docs);
  const std::vector<std::int64_t> host = F.index_block();
  Buffer<std::int64_t> block = to_device(std::vector<std::int64_t>(host.size(), -7));
  Buffer<std::int64_t> first = to_device(std::vector<std::int64_t>(static_cast<std::size_t>(F.batch) + 1, -7));
  const auto strides = k::sdpa_ragged_token_strides(s, ld, ld, ld, ldo);
  k::sdpa_ragged_index(d_docs.data(), c.B, c.T, strides.data(), F.batch, block.data(), first.data());
  EXPECT_EQ(to_host(block), host);
}
