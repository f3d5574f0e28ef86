// selfcheck_paths: every fused path of issue 33 run on this build's execution space (the GPU
// on a CUDA build, host threads otherwise) against the path it replaces and against an
// independent double-precision reference computed here on the host, on random inputs. One
// line per path, "PASS <path> ..." or "FAIL <path>: ...", continuing after a failure; the
// exit status is 1 when any path failed. perf/gpu/validate.sh runs it first on the device
// (its step (a)) and reads the lines into results.json's "paths".
//
// usage: selfcheck_paths [--json FILE] [--only PATH]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <mpi.h>

#include "core/bf16.hpp"
#include "core/memory.hpp"
#include "kernels/adamw.hpp"
#include "kernels/attention.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/cross_entropy_online.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/embedding.hpp"
#include "kernels/norms.hpp"
#include "kernels/residual_norms.hpp"
#include "kernels/rope.hpp"
#include "kernels/sdpa_ragged.hpp"
#include "linalg/gemm_epilogue.hpp"
#include "runtime/runtime.hpp"
#include "app/run_spec_resolve.hpp"
#include "config/config.hpp"
#include "train/session.hpp"
#include "train/step.hpp"

#include "../kernels/gemm_epilogue_reference.hpp"
#include "../../src/kernels/cross_entropy_rows.hpp"  // ce_rows_packable: which form ran
#include "../../src/kernels/rope_rows.hpp"            // rope_rows_packable
#include "../../src/kernels/swiglu_rows.hpp"          // swiglu_rows_packable

namespace k = meshtrain::kernels;
using meshtrain::bf16;
using meshtrain::Buffer;
using meshtrain::MemCategory;

namespace {

// ---- small host/device helpers (no test framework: this also runs on the GPU machine) ----
template <class T>
Buffer<T> up(const std::vector<T>& h) {
  Buffer<T> b(h.size(), MemCategory::Workspace);
  if (!h.empty()) Kokkos::deep_copy(b.view(), meshtrain::UView<const T, meshtrain::HostMem>(h.data(), h.size()));
  return b;
}
template <class T>
std::vector<T> down(const Buffer<T>& b) {
  std::vector<T> h(b.size());
  if (!h.empty()) Kokkos::deep_copy(meshtrain::UView<T, meshtrain::HostMem>(h.data(), h.size()), b.view());
  return h;
}
std::vector<float> randn(std::size_t n, std::uint64_t seed, double sd = 1.0) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> d(0.0, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(d(g));
  return v;
}

/// A failed check: what differs, where, by how much.
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// A path this build does not contain (e.g. cuDNN attention in a host build): reported as
/// SKIP with the reason, never as PASS; validate.sh fails a device run with a SKIP.
struct NotBuilt : std::runtime_error {
  using std::runtime_error::runtime_error;
};
void require(bool ok, const std::string& what) {
  if (!ok) throw Failure(what);
}
/// Largest |a - b| / max(|b|, floor) over the elements; fails above rtol.
template <class A, class B>
double check_close(const char* what, const std::vector<A>& a, const std::vector<B>& b, double rtol, double floor) {
  require(a.size() == b.size(), std::string(what) + ": sizes differ");
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = static_cast<double>(a[i]), y = static_cast<double>(b[i]);
    const double e = std::fabs(x - y) / std::max(std::fabs(y), floor);
    if (!(e <= worst)) {  // also catches NaN
      worst = std::isnan(e) ? INFINITY : e;
      at = i;
    }
  }
  char msg[256];
  std::snprintf(msg, sizeof msg, "%s: worst relative error %.3g at %zu (%.9g vs %.9g), limit %.3g", what, worst, at,
                a.empty() ? 0.0 : static_cast<double>(a[at]), b.empty() ? 0.0 : static_cast<double>(b[at]), rtol);
  require(worst <= rtol, msg);
  return worst;
}
template <class A>
void check_bitwise(const char* what, const std::vector<A>& a, const std::vector<A>& b) {
  require(a.size() == b.size(), std::string(what) + ": sizes differ");
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(A)) != 0) {
      char msg[200];
      std::snprintf(msg, sizeof msg, "%s: element %zu differs (%.9g vs %.9g), expected bitwise equal", what, i,
                    static_cast<double>(a[i]), static_cast<double>(b[i]));
      throw Failure(msg);
    }
}

// ---- fused optimizer -------------------------------------------------------------------
std::vector<k::FlatSegment> segments(std::size_t& flat, std::uint64_t seed) {
  // ~40 parameters of random sizes with gaps (padding / frozen) between them, like one unit.
  std::mt19937_64 g(seed);
  std::vector<k::FlatSegment> s;
  std::int64_t at = 0, first = 0;
  for (int i = 0; i < 40; ++i) {
    at += static_cast<std::int64_t>(g() % 5);
    const std::int64_t n = 1 + static_cast<std::int64_t>(g() % (i % 3 == 0 ? 20000 : 700));
    s.push_back({at, n, first, static_cast<int>(g() % 2)});
    at += n;
    first += n;
  }
  flat = static_cast<std::size_t>(at + 3);
  return s;
}

/// AdamW in double, torch.optim.AdamW's single-tensor formula.
void adamw_ref(double& p, double g, double& m, double& v, const k::AdamWParams& hp, double wd, double gs) {
  const double lr = hp.lr, b1 = hp.beta1, b2 = hp.beta2;
  g *= gs;
  p *= 1 - lr * wd;
  m += (1 - b1) * (g - m);
  v = v * b2 + (1 - b2) * g * g;
  p -= lr / (1 - std::pow(b1, hp.step)) * m / (std::sqrt(v) / std::sqrt(1 - std::pow(b2, hp.step)) + hp.eps);
}

std::string path_adamw_multi() {
  std::size_t flat = 0;
  const auto segs = segments(flat, 1);
  const std::int64_t total = segs.back().first + segs.back().numel;
  const auto p0 = randn(flat, 2), g = randn(flat, 3, 0.3), m0 = randn(flat, 4, 0.05);
  std::vector<float> v0(flat);
  for (std::size_t i = 0; i < flat; ++i) v0[i] = 0.01f + 0.001f * static_cast<float>(i % 7);
  k::AdamWParams hp;
  hp.lr = 1e-3f;
  hp.weight_decay = 0.1f;
  hp.step = 5;
  const double clip = 0.4;
  auto dsegs = up(segs);
  auto nc = up(std::vector<double>{1.5, clip});
  auto P = up(p0), G = up(g), M = up(m0), V = up(v0);
  Buffer<bf16> Cc(flat, MemCategory::Workspace);
  k::adamw_multi(P.data(), G.data(), M.data(), V.data(), dsegs.data(), static_cast<int>(segs.size()), total, hp,
                 nc.data(), Cc.data(), k::SegmentLaunch::Single);
  // The path it replaces: one adamw_step per parameter.
  auto P2 = up(p0), M2 = up(m0), V2 = up(v0);
  for (const auto& s : segs) {
    k::AdamWParams h = hp;
    h.weight_decay = s.decay ? hp.weight_decay : 0.0f;
    h.grad_scale = static_cast<float>(clip);
    k::adamw_step(P2.data() + s.offset, G.data() + s.offset, M2.data() + s.offset, V2.data() + s.offset,
                  static_cast<std::size_t>(s.numel), h);
  }
  const auto p = down(P), m = down(M), v = down(V), p2 = down(P2);
  const auto c = down(Cc);
  check_bitwise("param vs per-parameter adamw_step", p, p2);
  check_bitwise("exp_avg vs per-parameter adamw_step", m, down(M2));
  check_bitwise("exp_avg_sq vs per-parameter adamw_step", v, down(V2));
  std::vector<double> pr(p0.begin(), p0.end()), mr(m0.begin(), m0.end()), vr(v0.begin(), v0.end());
  std::vector<float> p_in, c_in, c_want;
  std::vector<double> pr_in;
  for (const auto& s : segs)
    for (std::int64_t i = s.offset; i < s.offset + s.numel; ++i) {
      const auto j = static_cast<std::size_t>(i);
      adamw_ref(pr[j], g[j], mr[j], vr[j], hp, s.decay ? hp.weight_decay : 0.0, clip);
      p_in.push_back(p[j]);
      pr_in.push_back(pr[j]);
      c_in.push_back(static_cast<float>(c[j]));
      c_want.push_back(static_cast<float>(bf16(p[j])));
    }
  check_bitwise("bf16 compute copy vs the rounded parameter", c_in, c_want);
  // Parameters are O(1): fp32 holds them to ~6e-8, a few roundings per update (floor 1).
  const double err = check_close("param vs double reference", p_in, pr_in, 1e-6, 1.0);
  // A non-finite norm: nothing changes.
  auto bad = up(std::vector<double>{NAN, 1.0});
  k::adamw_multi(P.data(), G.data(), M.data(), V.data(), dsegs.data(), static_cast<int>(segs.size()), total, hp,
                 bad.data(), Cc.data(), k::SegmentLaunch::Single);
  check_bitwise("param after a NaN norm (step must be skipped)", down(P), p);
  check_bitwise("exp_avg after a NaN norm", down(M), m);
  char out[160];
  std::snprintf(out, sizeof out, "%lld elements in %zu segments: bitwise = per-parameter AdamW, %.2g vs double, NaN norm skips",
                static_cast<long long>(total), segs.size(), err);
  return out;
}

std::string path_grad_norm() {
  std::size_t flat = 0;
  const auto segs = segments(flat, 11);
  const std::int64_t total = segs.back().first + segs.back().numel;
  const auto x = randn(flat, 12, 2e-3);
  double ref = 0;
  for (const auto& s : segs)
    for (std::int64_t i = s.offset; i < s.offset + s.numel; ++i) ref += static_cast<double>(x[static_cast<std::size_t>(i)]) * x[static_cast<std::size_t>(i)];
  auto dsegs = up(segs);
  auto X = up(x);
  // Two "units" over the same data, their partials summed in order, then the norm and clip.
  Buffer<double> partial(2, MemCategory::Workspace), nc(2, MemCategory::Workspace);
  k::sum_squares_segments(X.data(), dsegs.data(), static_cast<int>(segs.size()), total, partial.data(),
                          k::SegmentLaunch::Single);
  k::sum_squares_segments(X.data(), dsegs.data(), static_cast<int>(segs.size()), total, partial.data() + 1,
                          k::SegmentLaunch::Single);
  k::sum_in_order(partial.data(), 2, nc.data());
  const double max_norm = 0.05;
  k::grad_norm_clip(nc.data(), max_norm);
  const auto r = down(nc);
  const double norm = std::sqrt(2 * ref), clip = std::min(1.0, max_norm / (norm + 1e-6));
  check_close("norm vs double reference", std::vector<double>{r[0]}, std::vector<double>{norm}, 1e-12, 1e-300);
  check_close("clip coefficient vs the host formula", std::vector<double>{r[1]}, std::vector<double>{clip}, 1e-12, 1e-300);
  char out[160];
  std::snprintf(out, sizeof out, "%lld elements: norm %.9g (reference %.9g), clip %.6g", static_cast<long long>(total), r[0],
                norm, r[1]);
  return out;
}

// ---- packed position-embedding backward ------------------------------------------------
std::string path_position_backward_docs() {
  const int B = 6, T = 512, C = 96;
  std::mt19937_64 gen(21);
  std::vector<std::int32_t> docs(static_cast<std::size_t>(B) * T);
  for (int b = 0; b < B; ++b) {
    int start = 0;
    for (int t = 0; t < T; ++t) {
      // Sequence 0: one document; 1: one-token documents; others: random lengths.
      if (t > 0 && (b == 1 || (b > 1 && gen() % static_cast<unsigned>(b == 2 ? 4 : 60) == 0))) start = t;
      docs[static_cast<std::size_t>(b) * T + t] = start;
    }
  }
  const auto dx = randn(static_cast<std::size_t>(B) * T * C, 22);
  const auto w0 = randn(static_cast<std::size_t>(T) * C, 23);
  auto D = up(docs);
  auto DX = up(dx);
  auto W = up(w0);
  k::position_embedding_backward(DX.data(), W.data(), B, T, C, D.data());
  std::vector<float> ref = w0;  // serial token order: what the kernel promises bit for bit
  std::vector<double> dref(w0.begin(), w0.end());
  for (int r = 0; r < B * T; ++r) {
    const int p = r % T - docs[static_cast<std::size_t>(r)];
    for (int c = 0; c < C; ++c) {
      ref[static_cast<std::size_t>(p) * C + c] += dx[static_cast<std::size_t>(r) * C + c];
      dref[static_cast<std::size_t>(p) * C + c] += dx[static_cast<std::size_t>(r) * C + c];
    }
  }
  const auto w = down(W);
  check_bitwise("dwpe vs the serial token-order sum", w, ref);
  const double err = check_close("dwpe vs double reference", w, dref, 1e-4, 1.0);
  char out[160];
  std::snprintf(out, sizeof out, "B %d, T %d, C %d: bitwise the token-order sum, %.2g vs double", B, T, C, err);
  return out;
}

// ---- document-masked attention -----------------------------------------------------------
std::string path_attention_document_mask() {
  const int B = 3, T = 160, H = 4, Hkv = 2, hd = 32;
  const int ldq = H * hd, ldk = Hkv * hd;
  std::mt19937_64 gen(31);
  std::vector<std::int32_t> docs(static_cast<std::size_t>(B) * T);
  for (int b = 0; b < B; ++b) {
    int start = 0;
    for (int t = 0; t < T; ++t) {
      if (t > 0 && b > 0 && gen() % 37 == 0) start = t;
      docs[static_cast<std::size_t>(b) * T + t] = start;
    }
  }
  const auto q = randn(static_cast<std::size_t>(B) * T * ldq, 32), kk = randn(static_cast<std::size_t>(B) * T * ldk, 33),
             v = randn(static_cast<std::size_t>(B) * T * ldk, 34), dout = randn(static_cast<std::size_t>(B) * T * ldq, 35);
  k::AttentionShape s;
  s.B = B;
  s.T = T;
  s.Hq = H;
  s.Hkv = Hkv;
  s.hd = hd;
  s.group = H / Hkv;
  s.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  auto D = up(docs);
  s.doc_start = D.data();
  auto Q = up(q), K = up(kk), V = up(v), DO = up(dout);
  Buffer<float> O(q.size(), MemCategory::Workspace), st(static_cast<std::size_t>(B) * H * T * 2, MemCategory::Workspace),
      ws(static_cast<std::size_t>(k::attention_workspace_elems(s)), MemCategory::Workspace),
      DQ(q.size(), MemCategory::Workspace), DK(kk.size(), MemCategory::Workspace), DV(v.size(), MemCategory::Workspace);
  k::attention_forward(s, Q.data(), ldq, K.data(), ldk, V.data(), ldk, O.data(), ldq, st.data(), ws.data());
  k::attention_backward(s, Q.data(), ldq, K.data(), ldk, V.data(), ldk, O.data(), st.data(), DO.data(), ldq, DQ.data(), DK.data(),
                        DV.data(), ws.data());
  // Reference in double: per (b, h, i) the softmax over keys [doc_start(i), i], and its backward.
  std::vector<double> o(q.size(), 0.0), dq(q.size(), 0.0), dk(kk.size(), 0.0), dv(v.size(), 0.0);
  std::vector<double> pr(T), dp(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const int j = h / s.group;
      for (int i = 0; i < T; ++i) {
        const int lo = docs[static_cast<std::size_t>(b) * T + i];
        auto qa = [&](int t, int d) { return static_cast<double>(q[(static_cast<std::size_t>(b) * T + t) * ldq + h * hd + d]); };
        auto ka = [&](int t, int d) { return static_cast<double>(kk[(static_cast<std::size_t>(b) * T + t) * ldk + j * hd + d]); };
        auto va = [&](int t, int d) { return static_cast<double>(v[(static_cast<std::size_t>(b) * T + t) * ldk + j * hd + d]); };
        double mx = -INFINITY;
        for (int t = lo; t <= i; ++t) {
          double sc = 0;
          for (int d = 0; d < hd; ++d) sc += qa(i, d) * ka(t, d);
          pr[t] = sc * s.scale;
          mx = std::max(mx, pr[t]);
        }
        double sum = 0;
        for (int t = lo; t <= i; ++t) sum += (pr[t] = std::exp(pr[t] - mx));
        for (int t = lo; t <= i; ++t) pr[t] /= sum;
        const std::size_t orow = (static_cast<std::size_t>(b) * T + i) * ldq + h * hd;
        for (int d = 0; d < hd; ++d) {
          double acc = 0;
          for (int t = lo; t <= i; ++t) acc += pr[t] * va(t, d);
          o[orow + d] = acc;
        }
        double dot = 0;
        for (int t = lo; t <= i; ++t) {
          double a = 0;
          for (int d = 0; d < hd; ++d) a += dout[orow + d] * va(t, d);
          dp[t] = a;
          dot += pr[t] * a;
        }
        for (int t = lo; t <= i; ++t) {
          const double ds = pr[t] * (dp[t] - dot) * s.scale;
          const std::size_t krow = (static_cast<std::size_t>(b) * T + t) * ldk + j * hd;
          for (int d = 0; d < hd; ++d) {
            dq[orow + d] += ds * ka(t, d);
            dk[krow + d] += ds * qa(i, d);
            dv[krow + d] += pr[t] * dout[orow + d];
          }
        }
      }
    }
  // fp32 kernels vs double: scores of |q.k| ~ sqrt(hd) carry ~1e-6 relative error; floors at
  // the typical output magnitude keep cancellation out of the relative measure.
  const double e_o = check_close("out vs double reference", down(O), o, 2e-4, 0.05);
  const double e_q = check_close("dq vs double reference", down(DQ), dq, 2e-4, 0.05);
  const double e_k = check_close("dk vs double reference", down(DK), dk, 2e-4, 0.05);
  const double e_v = check_close("dv vs double reference", down(DV), dv, 2e-4, 0.05);
  char out[200];
  std::snprintf(out, sizeof out, "B %d, T %d, %d/%d heads, GQA, random documents: out %.2g, dq %.2g, dk %.2g, dv %.2g vs double",
                B, T, H, Hkv, e_o, e_q, e_k, e_v);
  return out;
}

// ---- cuDNN flash attention (gpu.attention=cudnn) ------------------------------------------
/// Causal attention in double on bf16-rounded inputs, out and (dq, dk, dv) for dout, with
/// GQA (query head h reads kv head h / group); q, dout: (N, H*hd), k, v: (N, Hkv*hd), packed.
/// With `docs` ((B, T) document starts) query i sees keys [docs(b, i), i] only.
void attention_ref_double(int B, int T, int H, int Hkv, int hd, double scale, const std::vector<float>& q,
                          const std::vector<float>& kk, const std::vector<float>& v, const std::vector<float>& dout,
                          std::vector<double>& o, std::vector<double>& dq, std::vector<double>& dk,
                          std::vector<double>& dv, const std::vector<std::int32_t>* docs = nullptr) {
  const int ldq = H * hd, ldk = Hkv * hd, group = H / Hkv;
  o.assign(q.size(), 0.0), dq.assign(q.size(), 0.0), dk.assign(kk.size(), 0.0), dv.assign(v.size(), 0.0);
  std::vector<double> pr(T), dp(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const int j = h / group;
      for (int i = 0; i < T; ++i) {
        const int lo = docs ? (*docs)[static_cast<std::size_t>(b) * T + i] : 0;
        const std::size_t orow = (static_cast<std::size_t>(b) * T + i) * ldq + h * hd;
        auto krow = [&](int t) { return (static_cast<std::size_t>(b) * T + t) * ldk + j * hd; };
        double mx = -INFINITY;
        for (int t = lo; t <= i; ++t) {
          double sc = 0;
          for (int d = 0; d < hd; ++d) sc += static_cast<double>(q[orow + d]) * kk[krow(t) + d];
          pr[t] = sc * scale;
          mx = std::max(mx, pr[t]);
        }
        double sum = 0;
        for (int t = lo; t <= i; ++t) sum += (pr[t] = std::exp(pr[t] - mx));
        for (int t = lo; t <= i; ++t) pr[t] /= sum;
        for (int d = 0; d < hd; ++d) {
          double acc = 0;
          for (int t = lo; t <= i; ++t) acc += pr[t] * v[krow(t) + d];
          o[orow + d] = acc;
        }
        double dot = 0;
        for (int t = lo; t <= i; ++t) {
          double a = 0;
          for (int d = 0; d < hd; ++d) a += static_cast<double>(dout[orow + d]) * v[krow(t) + d];
          dp[t] = a;
          dot += pr[t] * a;
        }
        for (int t = lo; t <= i; ++t) {
          const double ds = pr[t] * (dp[t] - dot) * scale;
          for (int d = 0; d < hd; ++d) {
            dq[orow + d] += ds * kk[krow(t) + d];
            dk[krow(t) + d] += ds * q[orow + d];
            dv[krow(t) + d] += pr[t] * dout[orow + d];
          }
        }
      }
    }
}

std::vector<bf16> to_bf16(const std::vector<float>& x) {
  std::vector<bf16> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = bf16(x[i]);
  return y;
}
std::vector<float> to_float(const std::vector<bf16>& x) {
  std::vector<float> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = static_cast<float>(x[i]);
  return y;
}

/// cuDNN's fused forward and backward against the Kokkos path it replaces and a double
/// reference, in bf16 (GPT-2 124M's head shape, GQA as Llama/SmolLM2 use it).
std::string path_attention_cudnn() {
  if (k::fused_attention_version().empty()) throw NotBuilt("this build has no cuDNN attention (host build, or CUDA without cuDNN)");
  const int B = 2, T = 256, H = 8, Hkv = 2, hd = 64;
  const int ldq = H * hd, ldk = Hkv * hd;
  // Inputs rounded to bf16 once: the reference sees exactly what the kernels see.
  const auto qb = to_bf16(randn(static_cast<std::size_t>(B) * T * ldq, 41)), kb = to_bf16(randn(static_cast<std::size_t>(B) * T * ldk, 42)),
             vb = to_bf16(randn(static_cast<std::size_t>(B) * T * ldk, 43)), db = to_bf16(randn(static_cast<std::size_t>(B) * T * ldq, 44));
  std::vector<double> o, dq, dk, dv;
  attention_ref_double(B, T, H, Hkv, hd, 1.0 / std::sqrt(static_cast<double>(hd)), to_float(qb), to_float(kb), to_float(vb),
                       to_float(db), o, dq, dk, dv);
  k::AttentionShape s;
  s.B = B;
  s.T = T;
  s.Hq = H;
  s.Hkv = Hkv;
  s.hd = hd;
  s.group = H / Hkv;
  s.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  auto run = [&](k::AttentionPath path, std::vector<float>* out) {
    s.path = path;
    auto Q = up(qb), K = up(kb), V = up(vb), DO = up(db);
    Buffer<bf16> O(qb.size(), MemCategory::Workspace), DQ(qb.size(), MemCategory::Workspace),
        DK(kb.size(), MemCategory::Workspace), DV(vb.size(), MemCategory::Workspace),
        ws(static_cast<std::size_t>(k::attention_workspace_elems(s)), MemCategory::Workspace);
    Buffer<float> st(static_cast<std::size_t>(B) * H * T * 2, MemCategory::Workspace);
    k::attention_forward(s, Q.data(), ldq, K.data(), ldk, V.data(), ldk, O.data(), ldq, st.data(), ws.data());
    k::attention_backward(s, Q.data(), ldq, K.data(), ldk, V.data(), ldk, O.data(), st.data(), DO.data(), ldq, DQ.data(),
                          DK.data(), DV.data(), ws.data());
    out[0] = to_float(down(O)), out[1] = to_float(down(DQ)), out[2] = to_float(down(DK)), out[3] = to_float(down(DV));
  };
  std::vector<float> fused[4], kokkos[4];
  run(k::AttentionPath::Cudnn, fused);
  run(k::AttentionPath::Kokkos, kokkos);
  // bf16 outputs carry 2^-8 relative rounding; floors at the typical magnitudes.
  const char* names[4] = {"out", "dq", "dk", "dv"};
  const std::vector<double>* ref[4] = {&o, &dq, &dk, &dv};
  double worst_ref = 0, worst_kokkos = 0;
  for (int i = 0; i < 4; ++i) {
    worst_ref = std::max(worst_ref, check_close((std::string(names[i]) + " vs double reference").c_str(), fused[i], *ref[i], 2e-2, 0.05));
    worst_kokkos = std::max(worst_kokkos, check_close((std::string(names[i]) + " vs the Kokkos path").c_str(), fused[i], kokkos[i], 3e-2, 0.05));
  }
  // Deterministic backward: a second run gives the same bits.
  std::vector<float> again[4];
  run(k::AttentionPath::Cudnn, again);
  for (int i = 0; i < 4; ++i) check_bitwise((std::string(names[i]) + " run to run").c_str(), fused[i], again[i]);
  char out[240];
  std::snprintf(out, sizeof out, "%s, B %d, T %d, %d/%d heads of %d, bf16: worst %.2g vs double, %.2g vs Kokkos, bitwise run to run",
                k::fused_attention_version().c_str(), B, T, H, Hkv, hd, worst_ref, worst_kokkos);
  return out;
}

/// Packed rows through cuDNN's variable-length attention (kernels/sdpa_ragged.hpp): each
/// document one sequence of a power-of-two graph batch, against the Kokkos document-masked
/// path and a double reference with the same document masks. The documents: row 0 one
/// filling it, row 1 length-1 documents at both ends and random ones between, row 2 random;
/// between 17 and 31 documents, so the graph batch of 32 has empty entries (their key rows
/// must not alias, and their writes must not reach, real tokens: every output starts as NaN
/// and every token's values are compared).
std::string path_attention_cudnn_ragged() {
  if (k::fused_attention_version().empty()) throw NotBuilt("this build has no cuDNN attention (host build, or CUDA without cuDNN)");
  const int B = 3, T = 256, H = 8, Hkv = 2, hd = 64;
  const int ldq = H * hd, ldk = Hkv * hd;
  std::vector<std::int32_t> docs(static_cast<std::size_t>(B) * T, 0);
  int count = 1;  // row 0: one document
  {
    std::mt19937_64 gen(51);
    for (int b = 1; b < B; ++b) {
      int start = 0;
      ++count;
      for (int t = 1; t < T; ++t) {
        const bool begins = (b == 1 && (t < 3 || t >= T - 2)) || (count < 24 && gen() % 30 == 0);
        if (begins) start = t, ++count;
        docs[static_cast<std::size_t>(b) * T + t] = start;
      }
    }
  }
  require(count > 16 && count < 32, "selfcheck: the packed batch should leave empty graph batch entries");
  const auto qb = to_bf16(randn(static_cast<std::size_t>(B) * T * ldq, 61)), kb = to_bf16(randn(static_cast<std::size_t>(B) * T * ldk, 62)),
             vb = to_bf16(randn(static_cast<std::size_t>(B) * T * ldk, 63)), db = to_bf16(randn(static_cast<std::size_t>(B) * T * ldq, 64));
  std::vector<double> o, dq, dk, dv;
  attention_ref_double(B, T, H, Hkv, hd, 1.0 / std::sqrt(static_cast<double>(hd)), to_float(qb), to_float(kb), to_float(vb),
                       to_float(db), o, dq, dk, dv, &docs);
  k::AttentionShape s;
  s.B = B;
  s.T = T;
  s.Hq = H;
  s.Hkv = Hkv;
  s.hd = hd;
  s.group = H / Hkv;
  s.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  auto D = up(docs);
  s.doc_start = D.data();
  s.doc_start_host = docs.data();
  // The shape must take the fused path, else this would compare the Kokkos path with itself.
  const k::SdpaRaggedCall call = k::sdpa_ragged(s, docs.data(), ldq, ldk, ldk, ldq);
  require(call.layout.supported, "sdpa_ragged refuses the selfcheck's shape: " + call.layout.why_not);
  require(call.ragged.documents == count && call.ragged.batch == 32, "sdpa_ragged counts the documents wrongly");
  auto run = [&](k::AttentionPath path, std::vector<float>* out) {
    s.path = path;
    auto Q = up(qb), K = up(kb), V = up(vb), DO = up(db);
    // Outputs start as NaN: a token no document entry writes shows up in the comparisons.
    const std::vector<bf16> nan_q(qb.size(), bf16(NAN)), nan_k(kb.size(), bf16(NAN));
    auto O = up(nan_q), DQ = up(nan_q), DK = up(nan_k), DV = up(nan_k);
    Buffer<bf16> ws(static_cast<std::size_t>(k::attention_workspace_elems(s)), MemCategory::Workspace);
    Buffer<float> st(static_cast<std::size_t>(B) * H * T * 2, MemCategory::Workspace);
    k::attention_forward(s, Q.data(), ldq, K.data(), ldk, V.data(), ldk, O.data(), ldq, st.data(), ws.data());
    k::attention_backward(s, Q.data(), ldq, K.data(), ldk, V.data(), ldk, O.data(), st.data(), DO.data(), ldq, DQ.data(),
                          DK.data(), DV.data(), ws.data());
    out[0] = to_float(down(O)), out[1] = to_float(down(DQ)), out[2] = to_float(down(DK)), out[3] = to_float(down(DV));
  };
  std::vector<float> fused[4], kokkos[4];
  run(k::AttentionPath::Cudnn, fused);
  run(k::AttentionPath::Kokkos, kokkos);
  const char* names[4] = {"out", "dq", "dk", "dv"};
  const std::vector<double>* ref[4] = {&o, &dq, &dk, &dv};
  double worst_ref = 0, worst_kokkos = 0;
  bool differs = false;  // two bf16 kernels of different design never agree on every bit
  for (int i = 0; i < 4; ++i) {
    worst_ref = std::max(worst_ref, check_close((std::string(names[i]) + " vs double reference").c_str(), fused[i], *ref[i], 2e-2, 0.05));
    worst_kokkos = std::max(worst_kokkos, check_close((std::string(names[i]) + " vs the Kokkos path").c_str(), fused[i], kokkos[i], 3e-2, 0.05));
    differs = differs || std::memcmp(fused[i].data(), kokkos[i].data(), fused[i].size() * sizeof(float)) != 0;
  }
  require(differs, "gpu.attention=cudnn gave the Kokkos path's bits on packed rows: it fell back instead of running cuDNN");
  std::vector<float> again[4];
  run(k::AttentionPath::Cudnn, again);
  for (int i = 0; i < 4; ++i) check_bitwise((std::string(names[i]) + " run to run").c_str(), fused[i], again[i]);
  char out[300];
  std::snprintf(out, sizeof out,
                "%s, B %d, T %d, %d documents in a graph batch of %d, %d/%d heads of %d, bf16: worst %.2g vs double, "
                "%.2g vs Kokkos, bitwise run to run",
                k::fused_attention_version().c_str(), B, T, call.ragged.documents, call.ragged.batch, H, Hkv, hd, worst_ref,
                worst_kokkos);
  return out;
}

// ---- fused LM-head loss ------------------------------------------------------------------
/// GPT-2's padded vocabulary (50304 columns, 50257 real), 48 rows, every 5th row masked.
struct LossCase {
  int n = 48, v = 50304;
  std::int64_t valid = 50257;
  std::vector<float> logits;
  std::vector<std::int32_t> targets;
};
LossCase loss_case(std::uint64_t seed) {
  LossCase c;
  c.logits = randn(static_cast<std::size_t>(c.n) * c.v, seed, 2.0);
  std::mt19937_64 g(seed + 1);
  for (int r = 0; r < c.n; ++r) {
    c.targets.push_back(r % 5 == 3 ? -1 : static_cast<std::int32_t>(g() % static_cast<std::uint64_t>(c.valid)));
    // A few large logits per row, late in the row, so the running max moves.
    for (int j = 0; j < 3; ++j) c.logits[static_cast<std::size_t>(r) * c.v + 40000 + 3000 * j + r] = 6.0f + j;
    for (int col = static_cast<int>(c.valid); col < c.v; ++col) c.logits[static_cast<std::size_t>(r) * c.v + col] = 80.0f;
  }
  return c;
}
/// Double reference: the summed loss and dlogits * grad_scale.
double loss_ref(const LossCase& c, double gs, std::vector<double>& grad) {
  grad.assign(c.logits.size(), 0.0);
  double loss = 0;
  for (int r = 0; r < c.n; ++r) {
    if (c.targets[r] < 0) continue;
    const float* l = &c.logits[static_cast<std::size_t>(r) * c.v];
    double mx = -INFINITY, sum = 0;
    for (int col = 0; col < c.valid; ++col) mx = std::max(mx, static_cast<double>(l[col]));
    for (int col = 0; col < c.valid; ++col) sum += std::exp(l[col] - mx);
    loss += std::log(sum) + mx - l[c.targets[r]];
    for (int col = 0; col < c.valid; ++col)
      grad[static_cast<std::size_t>(r) * c.v + col] = gs * (std::exp(l[col] - mx) / sum - (col == c.targets[r] ? 1.0 : 0.0));
  }
  return loss;
}

std::string path_fused_cross_entropy() {
  const LossCase c = loss_case(41);
  const float gs = 1.0f / 37;
  std::vector<double> gref;
  const double ref = loss_ref(c, gs, gref);
  auto T = up(c.targets);
  // The fused path: one launch, the loss in a device scalar.
  auto L1 = up(c.logits);
  Buffer<double> dl(1, MemCategory::Workspace);
  k::cross_entropy_fused(L1.data(), c.v, c.n, c.v, c.valid, T.data(), gs, nullptr, dl.data());
  const double fused = down(dl)[0];
  // The path it replaces: row_max, row_sums, finish.
  auto L3 = up(c.logits);
  Buffer<float> mx(c.n, MemCategory::Workspace), st(2 * c.n, MemCategory::Workspace);
  k::cross_entropy_row_max(L3.data(), c.v, c.n, c.v, 0, c.valid, mx.data());
  k::cross_entropy_row_sums(L3.data(), c.v, c.n, c.v, 0, c.valid, T.data(), mx.data(), st.data());
  const double three = k::cross_entropy_finish(L3.data(), c.v, c.n, c.v, 0, c.valid, T.data(), mx.data(), st.data(), gs);
  const auto g1 = down(L1), g3 = down(L3);
  // fp32 sums of 50k terms: loss to 1e-5 relative; probabilities ~1e-5 relative with a floor
  // of 1e-9 (gs / V: the typical magnitude of a dlogit).
  const double e_loss = check_close("loss vs double reference", std::vector<double>{fused}, std::vector<double>{ref}, 1e-5, 1e-30);
  check_close("loss vs three-pass", std::vector<double>{fused}, std::vector<double>{three}, 1e-5, 1e-30);
  const double e_g = check_close("dlogits vs double reference", g1, gref, 1e-4, 1e-9);
  check_close("dlogits vs three-pass", g1, g3, 1e-4, 1e-9);
  // bf16 logits, fp32 statistics: against the three-pass bf16 path (both round the gradient).
  std::vector<bf16> lb(c.logits.size());
  for (std::size_t i = 0; i < lb.size(); ++i) lb[i] = bf16(c.logits[i]);
  auto B1 = up(lb), B3 = up(lb);
  k::cross_entropy_fused(B1.data(), c.v, c.n, c.v, c.valid, T.data(), gs, nullptr, dl.data());
  const double bfused = down(dl)[0];
  k::cross_entropy_row_max(B3.data(), c.v, c.n, c.v, 0, c.valid, mx.data());
  k::cross_entropy_row_sums(B3.data(), c.v, c.n, c.v, 0, c.valid, T.data(), mx.data(), st.data());
  const double bthree = k::cross_entropy_finish(B3.data(), c.v, c.n, c.v, 0, c.valid, T.data(), mx.data(), st.data(), gs);
  check_close("bf16 loss vs three-pass", std::vector<double>{bfused}, std::vector<double>{bthree}, 1e-5, 1e-30);
  const auto b1 = down(B1), b3 = down(B3);
  std::vector<float> f1(b1.size()), f3(b3.size());
  for (std::size_t i = 0; i < b1.size(); ++i) {
    f1[i] = static_cast<float>(b1[i]);
    f3[i] = static_cast<float>(b3[i]);
  }
  // bf16 keeps 8 bits: the two roundings of one value differ by at most 2 ulp (2^-7).
  check_close("bf16 dlogits vs three-pass", f1, f3, 8e-3, 1e-9);
  char out[240];
  std::snprintf(out, sizeof out, "%d rows x %d (valid %lld, masked rows): loss %.2g, dlogits %.2g vs double; fp32 and bf16 = three-pass%s",
                c.n, c.v, static_cast<long long>(c.valid), e_loss, e_g,
                k::detail::ce_rows_packable(B1.data(), c.v, c.v) ? "; rows in 16-byte packs" : "");
  return out;
}

std::string path_fused_cross_entropy_tp() {
  const LossCase c = loss_case(43);
  const float gs = 0.5f;
  std::vector<double> gref;
  const double ref = loss_ref(c, gs, gref);
  auto T = up(c.targets);
  auto L = up(c.logits);
  // Two tp slices of the vocabulary: [0, 25152) and [25152, 50304) (padding in the second).
  const int h = c.v / 2;
  const int bounds[3] = {0, h, c.v};
  std::vector<float> row_max(c.n, -INFINITY), sums(2 * c.n, 0.0f);
  std::vector<std::vector<float>> lmax(2), lst(2);
  Buffer<float> dl(c.n, MemCategory::Workspace), dm(c.n, MemCategory::Workspace), ds(2 * c.n, MemCategory::Workspace);
  for (int s = 0; s < 2; ++s) {
    k::cross_entropy_online_stats(L.data() + bounds[s], c.v, c.n, bounds[s + 1] - bounds[s], bounds[s], c.valid,
                                  T.data(), dl.data(), dm.data(), ds.data());
    lmax[s] = down(dl);
    lst[s] = down(ds);
    for (int r = 0; r < c.n; ++r) row_max[r] = std::max(row_max[r], lmax[s][r]);
  }
  auto GM = up(row_max);
  for (int s = 0; s < 2; ++s) {  // each rank's rescale, then the SUM all-reduce
    auto LM = up(lmax[s]);
    auto ST = up(lst[s]);
    k::cross_entropy_rescale_sums(c.n, LM.data(), GM.data(), ST.data());
    const auto v = down(ST);
    for (int i = 0; i < 2 * c.n; ++i) sums[i] += v[i];
  }
  auto GS = up(sums);
  Buffer<double> loss(1, MemCategory::Workspace);
  double first = 0;
  for (int s = 0; s < 2; ++s) {
    k::cross_entropy_finish_into(L.data() + bounds[s], c.v, c.n, bounds[s + 1] - bounds[s], bounds[s], c.valid, T.data(),
                                 GM.data(), GS.data(), gs, nullptr, loss.data());
    const double l = down(loss)[0];
    if (s == 0) first = l;
    require(l == first, "the two slices' losses differ (they come from the same merged statistics)");
  }
  const double e_loss = check_close("merged loss vs double reference", std::vector<double>{first}, std::vector<double>{ref}, 1e-5, 1e-30);
  const double e_g = check_close("merged dlogits vs double reference", down(L), gref, 1e-4, 1e-9);
  char out[200];
  std::snprintf(out, sizeof out, "2 vocab slices merged (max, rescaled sums): loss %.2g, dlogits %.2g vs double", e_loss, e_g);
  return out;
}

// ---- kernel times against the device's memory limit ---------------------------------------
// The row kernels are memory-bound: each time printed on a GPU comes with its bytes over the
// time as a share of a device-to-device copy's rate, measured here (the practical limit of
// the device's memory; the nominal peak is higher). Printed, never judged.

/// Best of 10 runs of f, microseconds (the device fenced around each).
double best_us(const std::function<void()>& f) {
  double t = 1e30;
  for (int i = 0; i < 10; ++i) {
    Kokkos::fence();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    Kokkos::fence();
    t = std::min(t, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return t * 1e6;
}

/// GB/s of a device-to-device copy of 256 MiB, bytes read plus bytes written; measured once.
double device_copy_gbps() {
  static double gbps = 0;
  if (gbps == 0) {
    const std::size_t n = std::size_t{1} << 26;  // floats: 256 MiB, well past any L2
    Buffer<float> a(n, MemCategory::Workspace), b(n, MemCategory::Workspace);
    k::fill(a.data(), n, 1.0);
    const double us = best_us([&] { Kokkos::deep_copy(b.view(), a.view()); });
    gbps = 2.0 * static_cast<double>(n * sizeof(float)) / (us * 1e3);
  }
  return gbps;
}

/// "<us> us <pct>%": a kernel's time and its bytes moved per second as a share of the copy's.
std::string us_and_share(double us, double bytes) {
  char s[48];
  std::snprintf(s, sizeof s, "%.0f us %.0f%%", us, 100.0 * bytes / (us * 1e3) / device_copy_gbps());
  return s;
}

// ---- fused residual add + norm -------------------------------------------------------------
/// On GPUs, each norm form's time (best of 10, fenced) at GPT-2 124M's micro-batch of
/// 16 x 1024 rows in bf16: the fused forward and backward, and the unfused backward (the
/// blocks' first norm); the Warps form twice: in 16-byte packs (rows of 1536 bytes), and
/// element by element (the same rows one element past the boundary). Each with its share of
/// the copy's rate (above), counting the N x C tensors it reads and writes once each: the
/// forward reads h and x and writes h and y, a backward reads dy and h and writes dx.
/// Printed beside the check, never compared against a limit; host builds print none.
std::string norm_form_times(bool layernorm) {
  if (meshtrain::kDeviceIsHost) return "";
  const int N = 16384, C = 768;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  // One spare element: the element-by-element variant starts every tensor at element 1.
  Buffer<bf16> h(NC + 1, MemCategory::Workspace), x(NC + 1, MemCategory::Workspace), y(NC + 1, MemCategory::Workspace),
      dy(NC + 1, MemCategory::Workspace), dx(NC + 1, MemCategory::Workspace), w(C + 1, MemCategory::Workspace),
      b(C + 1, MemCategory::Workspace);
  Buffer<float> mean(N, MemCategory::Workspace), rstd(N, MemCategory::Workspace), dw(C, MemCategory::Workspace),
      db(C, MemCategory::Workspace), dbias(C, MemCategory::Workspace);
  k::fill_uniform(h.data(), NC + 1, -1.0, 1.0, 1);
  k::fill_uniform(x.data(), NC + 1, -1.0, 1.0, 2);
  k::fill_uniform(dy.data(), NC + 1, -1.0, 1.0, 3);
  k::fill_uniform(w.data(), C + 1, 0.5, 1.5, 4);
  k::fill_uniform(b.data(), C + 1, -0.1, 0.1, 5);
  k::fill(dx.data(), NC + 1, 0.0);
  const double nc_bytes = static_cast<double>(NC) * sizeof(bf16);
  char copy[96];
  std::snprintf(copy, sizeof copy, "; bf16 16384 x 768 (device copy %.0f GB/s), fused fwd / fused bwd / unfused bwd:",
                device_copy_gbps());
  std::string out = copy;
  struct Variant {
    const char* name;
    k::NormForm form;
    int offset;  // elements past the 16-byte boundary
  };
  for (const Variant v : {Variant{"warps16", k::NormForm::Warps, 0}, Variant{"warps", k::NormForm::Warps, 1},
                          Variant{"rows", k::NormForm::Rows, 0}}) {
    const int o = v.offset;
    const k::NormForm form = v.form;
    double f = 0, g = 0, u = 0;
    if (layernorm) {
      // The forward adds x into h again on each call; uniform values stay far from overflow.
      f = best_us([&] {
        k::residual_layernorm_forward(h.data() + o, x.data() + o, b.data() + o, w.data() + o, b.data() + o, 1e-5, N, C,
                                      y.data() + o, mean.data(), rstd.data(), form);
      });
      g = best_us([&] {
        k::residual_layernorm_backward(dy.data() + o, h.data() + o, w.data() + o, mean.data(), rstd.data(), N, C,
                                       dx.data() + o, dw.data(), db.data(), dbias.data(), form);
      });
      u = best_us([&] { k::layernorm_backward(dy.data() + o, h.data() + o, w.data() + o, mean.data(), rstd.data(), N, C,
                                           dx.data() + o, dw.data(), db.data(), form); });
    } else {
      f = best_us([&] { k::residual_rmsnorm_forward(h.data() + o, x.data() + o, w.data() + o, 1e-5, N, C, y.data() + o,
                                                 rstd.data(), form); });
      g = best_us([&] { k::residual_rmsnorm_backward(dy.data() + o, h.data() + o, w.data() + o, rstd.data(), N, C,
                                                  dx.data() + o, dw.data(), form); });
      u = best_us([&] { k::rmsnorm_backward(dy.data() + o, h.data() + o, w.data() + o, rstd.data(), N, C, dx.data() + o,
                                         dw.data(), form); });
    }
    out += std::string(v.offset == 0 && v.form == k::NormForm::Warps ? " " : ", ") + v.name + " " +  // warps16 first
           us_and_share(f, 4 * nc_bytes) +
           " / " + us_and_share(g, 3 * nc_bytes) + " / " + us_and_share(u, 3 * nc_bytes);
  }
  return out + " of the copy's rate";
}

/// Storage values of T from floats (bf16: rounded to nearest even), and back.
template <class T>
std::vector<T> stored(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = T(v[i]);
  return out;
}
template <class T>
std::vector<float> as_float(const std::vector<T>& v) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<float>(v[i]);
  return out;
}

// ---- elementwise row kernels in 16-byte packs (gpu.row_packs) ----------------------------
// SwiGLU and RoPE on Llama's shapes: the build's form (on GPUs one thread per 16-byte pack)
// against the element-by-element form (row_packs false) and a double reference. Both forms
// compute each element with the same functions (swiglu_rows.hpp, rope_rows.hpp): fp32 within
// 1e-5 of double (relative, with a floor of 0.1: inputs are O(1), and a difference of
// products near 0 keeps the products' absolute rounding), bf16 the two forms within one bf16 rounding of each other (the line
// says when they are bitwise equal), and times the two forms in bf16. SKIP on host builds.

/// bf16 results of the two forms: within one bf16 rounding (2^-8 relative, floor 1e-2);
/// "bitwise" or "within 1 ulp" for the line.
std::string same_up_to_rounding(const char* what, const std::vector<bf16>& a, const std::vector<bf16>& b) {
  check_close(what, as_float(a), as_float(b), 1.0 / 256, 1e-2);
  const bool bitwise = a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(bf16)) == 0;
  return bitwise ? "bitwise" : "within 1 ulp";
}

/// Host builds have no packed form (their row loops vectorize as they are): the path is
/// SKIP there, its line carrying what the host checks found; test_kernels_elementwise and
/// test_kernels_rope run the packed bodies pack by pack on the host.
const std::string kPacksOnGpusOnly = "the packed form runs on GPUs only; host build, the row form: ";

std::string path_row_packs_swiglu() {
  const int rows = 64, F = 1536, ld_in = 2 * F, ld_out = F;  // SmolLM2's MLP width
  const std::size_t n_in = static_cast<std::size_t>(rows) * ld_in, n_out = static_cast<std::size_t>(rows) * ld_out;
  const auto gu = randn(n_in, 51, 2.0), dz = randn(n_out, 52);
  std::vector<double> ref_out(n_out), ref_dgu(n_in);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < F; ++c) {
      const double g = gu[static_cast<std::size_t>(r) * ld_in + c], u = gu[static_cast<std::size_t>(r) * ld_in + F + c];
      const double d = dz[static_cast<std::size_t>(r) * ld_out + c];
      const double sig = 1.0 / (1.0 + std::exp(-g));
      ref_out[static_cast<std::size_t>(r) * ld_out + c] = g * sig * u;
      ref_dgu[static_cast<std::size_t>(r) * ld_in + c] = d * u * sig * (1.0 + g * (1.0 - sig));
      ref_dgu[static_cast<std::size_t>(r) * ld_in + F + c] = d * g * sig;
    }
  bool packed = false;
  auto run = [&](auto tag, bool packs) {
    using T = decltype(tag);
    auto in = up(stored<T>(gu)), d = up(stored<T>(dz));
    Buffer<T> out(n_out, MemCategory::Workspace), dgu(n_in, MemCategory::Workspace);
    k::swiglu_forward(in.data(), in.data() + F, ld_in, out.data(), ld_out, rows, F, packs);
    k::swiglu_backward(in.data(), in.data() + F, ld_in, d.data(), ld_out, dgu.data(), dgu.data() + F, rows, F, packs);
    if (packs) packed = k::detail::swiglu_rows_packable<T>(F, ld_in, ld_out, {in.data(), out.data(), dgu.data(), d.data()});
    return std::make_pair(down(out), down(dgu));
  };
  const auto f1 = run(float{}, true), f0 = run(float{}, false);
  const double e_out = check_close("fp32 forward vs double", f1.first, ref_out, 1e-5, 0.1);
  const double e_dgu = check_close("fp32 backward vs double", f1.second, ref_dgu, 1e-5, 0.1);
  check_close("fp32 element form vs double", f0.second, ref_dgu, 1e-5, 0.1);
  const auto b1 = run(bf16{}, true), b0 = run(bf16{}, false);
  const std::string fwd = same_up_to_rounding("bf16 forward, packs vs elements", b1.first, b0.first);
  const std::string bwd = same_up_to_rounding("bf16 backward, packs vs elements", b1.second, b0.second);
  char out[300];
  std::snprintf(out, sizeof out, "%d x %d: fp32 %.2g / %.2g vs double; bf16 packs vs elements %s / %s", rows, F, e_out,
                e_dgu, fwd.c_str(), bwd.c_str());
  std::string line = out;
  if (meshtrain::kDeviceIsHost) throw NotBuilt(kPacksOnGpusOnly + line);
  require(packed, "SmolLM2's MLP rows did not run in 16-byte packs");
  line += "; rows in 16-byte packs";
  {
    const int N = 16384;
    Buffer<bf16> a(static_cast<std::size_t>(N) * ld_in, MemCategory::Workspace),
        o(static_cast<std::size_t>(N) * F, MemCategory::Workspace), g(static_cast<std::size_t>(N) * ld_in, MemCategory::Workspace);
    k::fill_uniform(a.data(), a.size(), -2.0, 2.0, 53);
    k::fill_uniform(o.data(), o.size(), -1.0, 1.0, 54);
    // Bytes: forward reads gate and up and writes out (3 N x F); backward reads gate, up and
    // dout and writes dgate and dup (5 N x F).
    const double nf_bytes = static_cast<double>(N) * F * sizeof(bf16);
    line += "; bf16 16384 x 1536, fwd / bwd:";
    for (const bool packs : {true, false})
      line += std::string(packs ? " packs " : ", elements ") +
              us_and_share(best_us([&] { k::swiglu_forward(a.data(), a.data() + F, ld_in, o.data(), F, N, F, packs); }),
                           3 * nf_bytes) +
              " / " +
              us_and_share(best_us([&] {
                             k::swiglu_backward(a.data(), a.data() + F, ld_in, o.data(), F, g.data(), g.data() + F, N, F,
                                                packs);
                           }),
                           5 * nf_bytes);
    line += " of the copy's rate";
  }
  return line;
}

std::string path_row_packs_rope() {
  // SmolLM2's qkv rows: 9 q heads and 3 k heads of 64 rotated in one call (then 3 v heads);
  // packed documents restart positions at 0, 40 and 100 of each 128-token sequence.
  const int B = 2, Tq = 128, H = 12, hd = 64, half = hd / 2, ld = 15 * hd, rows = B * Tq;
  const std::size_t n = static_cast<std::size_t>(rows) * ld;
  Buffer<float> cs(static_cast<std::size_t>(Tq) * half, MemCategory::Workspace), sn(static_cast<std::size_t>(Tq) * half, MemCategory::Workspace);
  k::rope_tables(10000.0, hd, Tq, cs.data(), sn.data());
  const auto hc = down(cs), hs = down(sn);
  std::vector<std::int32_t> doc(rows);
  for (int r = 0; r < rows; ++r) {
    const int t = r % Tq;
    doc[r] = t >= 100 ? 100 : t >= 40 ? 40 : 0;
  }
  auto ddoc = up(doc);
  const auto x = randn(n, 55);
  bool packed = false;
  std::string verdicts;
  double worst = 0;
  for (const bool forward : {true, false}) {
    std::vector<double> ref(x.begin(), x.end());
    for (int r = 0; r < rows; ++r) {
      const int pos = r % Tq - doc[r];
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < half; ++i) {
          const std::size_t p = static_cast<std::size_t>(r) * ld + h * hd + i;
          const double c = hc[pos * half + i], s = forward ? hs[pos * half + i] : -hs[pos * half + i];
          ref[p] = x[p] * c - x[p + half] * s;
          ref[p + half] = x[p + half] * c + x[p] * s;
        }
    }
    auto run = [&](auto tag, bool packs) {
      using T = decltype(tag);
      auto b = up(stored<T>(x));
      if (forward) k::rope_forward(b.data(), ld, B, Tq, H, hd, cs.data(), sn.data(), ddoc.data(), packs);
      else k::rope_backward(b.data(), ld, B, Tq, H, hd, cs.data(), sn.data(), ddoc.data(), packs);
      if (packs) packed = k::detail::rope_rows_packable(b.data(), ld, hd, cs.data(), sn.data());
      return down(b);
    };
    worst = std::max(worst, check_close(forward ? "fp32 forward vs double" : "fp32 backward vs double",
                                        run(float{}, true), ref, 1e-5, 0.1));
    check_close("fp32 element form vs double", run(float{}, false), ref, 1e-5, 0.1);
    verdicts += std::string(forward ? "" : " / ") +
                same_up_to_rounding(forward ? "bf16 forward, packs vs elements" : "bf16 backward, packs vs elements",
                                    run(bf16{}, true), run(bf16{}, false));
  }
  char out[300];
  std::snprintf(out, sizeof out, "%d rows x %d heads of %d, packed documents: fp32 %.2g vs double; bf16 packs vs elements %s",
                rows, H, hd, worst, verdicts.c_str());
  std::string line = out;
  if (meshtrain::kDeviceIsHost) throw NotBuilt(kPacksOnGpusOnly + line);
  require(packed, "SmolLM2's qkv rows did not run in 16-byte packs");
  line += "; rows in 16-byte packs";
  {
    const int Bt = 16, Tt = 1024;
    Buffer<bf16> q(static_cast<std::size_t>(Bt) * Tt * ld, MemCategory::Workspace);
    Buffer<float> ct(static_cast<std::size_t>(Tt) * half, MemCategory::Workspace), st(static_cast<std::size_t>(Tt) * half, MemCategory::Workspace);
    k::rope_tables(10000.0, hd, Tt, ct.data(), st.data());
    k::fill_uniform(q.data(), q.size(), -1.0, 1.0, 56);
    // Bytes: the 12 heads read and written in place (the tables, 256 KiB, stay in cache).
    const double heads_bytes = 2.0 * Bt * Tt * H * hd * sizeof(bf16);
    line += "; bf16 16 x 1024 rows x 12 heads:";
    for (const bool packs : {true, false})
      line += std::string(packs ? " packs " : ", elements ") +
              us_and_share(
                  best_us([&] { k::rope_forward(q.data(), ld, Bt, Tt, H, hd, ct.data(), st.data(), nullptr, packs); }),
                  heads_bytes);
    line += " of the copy's rate";
  }
  return line;
}

/// 1000 rows (15 full blocks of the Rows form's backward partials and a tail; 125 units of
/// the Warps form's, in 4 chunks) of C columns in T (fp32, or bf16 as training runs them;
/// the parameter gradients are fp32 either way): the build's form (kernels::NormForm: Warps
/// on GPUs) vs the other form, vs unfused (add_bias, add_inplace, the norm; its backward,
/// bias_backward) and vs a double reference of the whole operation from the same (rounded)
/// inputs, and the fused backward bitwise run to run. bf16 tolerances: its outputs are
/// rounded to 8 bits, so two forms differ by up to one bf16 rounding (2^-8 of a value, with
/// a floor of 1 for values near 0 that are differences of O(1) terms), and the reference
/// differs by the roundings of h (two) and of the outputs.
template <class T>
std::string residual_norm_check(bool layernorm, int C) {
  constexpr bool kBf16 = std::is_same_v<T, bf16>;
  const int N = 1000;
  const double eps = 1e-5;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  const auto rounded = [](const std::vector<float>& v) { return as_float(stored<T>(v)); };
  const auto a = rounded(randn(NC, 51)), x = rounded(randn(NC, 52)), bias = rounded(randn(C, 53, 0.1)),
             w = rounded(randn(C, 54)), b = rounded(randn(C, 55, 0.1)), dy = rounded(randn(NC, 56)),
             dres = rounded(randn(NC, 57));
  const bool with_bias = layernorm;  // GPT-2 adds c_proj's bias here; Llama has none
  struct Run {
    std::vector<float> h, y, dx, dw, db, dbias;
  };
  auto run = [&](bool fused, k::NormForm form = k::default_norm_form()) {
    auto H = up(stored<T>(a)), X = up(stored<T>(x)), Bi = up(stored<T>(bias)), W = up(stored<T>(w)),
         Bn = up(stored<T>(b)), DY = up(stored<T>(dy)), DX = up(stored<T>(dres));
    Buffer<T> Y(NC, MemCategory::Workspace);
    Buffer<float> M(N, MemCategory::Workspace), R(N, MemCategory::Workspace);
    const std::vector<float> zero(C, 0.0f);
    auto DW = up(zero), DB = up(zero), DBI = up(zero);
    if (fused) {
      if (layernorm) {
        k::residual_layernorm_forward(H.data(), X.data(), Bi.data(), W.data(), Bn.data(), eps, N, C, Y.data(), M.data(),
                                      R.data(), form);
        k::residual_layernorm_backward(DY.data(), H.data(), W.data(), M.data(), R.data(), N, C, DX.data(), DW.data(),
                                       DB.data(), DBI.data(), form);
      } else {
        k::residual_rmsnorm_forward(H.data(), X.data(), W.data(), eps, N, C, Y.data(), R.data(), form);
        k::residual_rmsnorm_backward(DY.data(), H.data(), W.data(), R.data(), N, C, DX.data(), DW.data(), form);
      }
    } else {
      if (with_bias) k::add_bias(H.data(), Bi.data(), N, C, C);
      k::add_inplace(H.data(), X.data(), NC);
      if (layernorm) {
        k::layernorm_forward(H.data(), W.data(), Bn.data(), eps, N, C, Y.data(), M.data(), R.data());
        k::layernorm_backward(DY.data(), H.data(), W.data(), M.data(), R.data(), N, C, DX.data(), DW.data(), DB.data());
        k::bias_backward(DX.data(), DBI.data(), N, C, C);
      } else {
        k::rmsnorm_forward(H.data(), W.data(), eps, N, C, Y.data(), R.data());
        k::rmsnorm_backward(DY.data(), H.data(), W.data(), R.data(), N, C, DX.data(), DW.data());
      }
    }
    return Run{as_float(down(H)), as_float(down(Y)), as_float(down(DX)), down(DW), down(DB), down(DBI)};
  };
  // The build's form (Warps on GPUs), again, the other form, and the unfused path.
  const k::NormForm form = k::default_norm_form();
  const k::NormForm other = form == k::NormForm::Warps ? k::NormForm::Rows : k::NormForm::Warps;
  const Run f = run(true), f2 = run(true), fo = run(true, other), u = run(false);
  // Double reference: h, y, dx = dres + norm backward, dw, db, dbias.
  std::vector<double> h(NC), y(NC), dx(NC), dw(C, 0.0), db(C, 0.0), dbi(C, 0.0);
  for (int i = 0; i < N; ++i) {
    const std::size_t r = static_cast<std::size_t>(i) * C;
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) {
      h[r + c] = static_cast<double>(a[r + c]) + (with_bias ? bias[c] : 0.0) + x[r + c];
      m += h[r + c];
    }
    m = layernorm ? m / C : 0.0;
    for (int c = 0; c < C; ++c) v += (h[r + c] - m) * (h[r + c] - m);
    const double rs = 1.0 / std::sqrt(v / C + eps);
    double mg = 0, mgx = 0;
    for (int c = 0; c < C; ++c) {
      const double xh = (h[r + c] - m) * rs;
      y[r + c] = xh * w[c] + (layernorm ? b[c] : 0.0);
      mg += static_cast<double>(dy[r + c]) * w[c];
      mgx += static_cast<double>(dy[r + c]) * w[c] * xh;
    }
    mg = layernorm ? mg / C : 0.0;
    mgx /= C;
    for (int c = 0; c < C; ++c) {
      const double xh = (h[r + c] - m) * rs;
      dx[r + c] = dres[r + c] + rs * (static_cast<double>(dy[r + c]) * w[c] - mg - xh * mgx);
      dw[c] += static_cast<double>(dy[r + c]) * xh;
      db[c] += dy[r + c];
      dbi[c] += dx[r + c];
    }
  }
  // Rows outputs (y, dx: O(1), near 0 differences of O(1) terms, so a floor of 1): fp32 within
  // 1e-5 of each other; bf16 within one rounding (2^-8 = 3.9e-3: 1e-2). Column sums of 1000
  // O(1) terms in another association: 1e-4 (fp32 sums in both types, of bf16 terms for
  // bf16). Against the double reference: fp32 1e-6 (h), 1e-5, 1e-4; bf16 5e-2 (h rounded
  // twice, up to 2^-8 of |a + bias| + |x| ~ 5, and each output once: 0.011 and 0.016 seen on
  // the host), and the column sums, whose every term carries the roundings of h (~2^-8 of a
  // term, random in sign: ~0.1 over 1000 terms, 0.2 seen at worst), 5e-2 of the sums'
  // typical size, sqrt(1000) ~ 32 (the floor).
  const double rows_tol = kBf16 ? 1e-2 : 1e-5, ref_h = kBf16 ? 5e-2 : 1e-6, ref_rows = kBf16 ? 5e-2 : 1e-5,
               ref_cols = kBf16 ? 5e-2 : 1e-4, cols_floor = kBf16 ? 32.0 : 1.0;
  // dbias sums dx after its rounding to T: between forms (or fused and unfused), where a dx
  // rounds to the neighbouring bf16 (one in a few hundred, 2^-8 of a value each), the sums
  // differ by those steps: 1e-2 of the sums' typical size for bf16.
  const double dbias_tol = kBf16 ? 1e-2 : 1e-4;
  check_bitwise("h vs unfused (the same two roundings)", f.h, u.h);
  check_close("y vs unfused", f.y, u.y, rows_tol, 1.0);
  check_close("dx vs unfused", f.dx, u.dx, rows_tol, 1.0);
  check_close("dw vs unfused", f.dw, u.dw, 1e-4, 1.0);
  const double e_h = check_close("h vs double reference", f.h, h, ref_h, 1.0);
  const double e_y = check_close("y vs double reference", f.y, y, ref_rows, 1.0);
  const double e_dx = check_close("dx vs double reference", f.dx, dx, ref_rows, 1.0);
  const double e_dw = check_close("dw vs double reference", f.dw, dw, ref_cols, cols_floor);
  if (layernorm) {
    check_close("db vs unfused", f.db, u.db, 1e-4, 1.0);
    check_close("dbias vs unfused", f.dbias, u.dbias, dbias_tol, cols_floor);
    check_close("db vs double reference", f.db, db, ref_cols, cols_floor);
    check_close("dbias vs double reference", f.dbias, dbi, ref_cols, cols_floor);
  }
  check_bitwise("h vs the other form", f.h, fo.h);
  check_close("y vs the other form", f.y, fo.y, rows_tol, 1.0);
  check_close("dx vs the other form", f.dx, fo.dx, rows_tol, 1.0);
  check_close("dw vs the other form", f.dw, fo.dw, 1e-4, 1.0);
  if (layernorm) check_close("dbias vs the other form", f.dbias, fo.dbias, dbias_tol, cols_floor);
  check_bitwise("dx run to run", f.dx, f2.dx);
  check_bitwise("dw run to run (block partials in block order)", f.dw, f2.dw);
  if (layernorm) check_bitwise("dbias run to run", f.dbias, f2.dbias);
  char out[220];
  std::snprintf(out, sizeof out, "%s C %d (%s): vs double h %.2g, y %.2g, dx %.2g, dw %.2g", kBf16 ? "bf16" : "fp32", C,
                form == k::NormForm::Rows                          ? "Rows form"
                : k::norm_rows_packable(C, sizeof(T), {})          ? "Warps form in 16-byte packs"
                                                                   : "Warps form element by element",
                e_h, e_y, e_dx, e_dw);
  return out;
}

/// GPT-2 124M's width in fp32 (rows of 3072 bytes: the Warps form moves them in 16-byte
/// packs of 4) and in bf16 (1536 bytes: packs of 8, with fp32 partials of 32 bytes per pack),
/// and 770 fp32 columns (3080 bytes: element by element); then the timings.
std::string residual_norm_path(bool layernorm) {
  const std::string other = k::default_norm_form() == k::NormForm::Warps ? "Rows" : "Warps";
  return "h bitwise = unfused = the " + other + " form, y/dx/dw close, bitwise run to run; " +
         residual_norm_check<float>(layernorm, 768) + "; " + residual_norm_check<bf16>(layernorm, 768) + "; " +
         residual_norm_check<float>(layernorm, 770) + norm_form_times(layernorm);
}
std::string path_residual_layernorm() { return residual_norm_path(true); }
std::string path_residual_rmsnorm() { return residual_norm_path(false); }

// ---- CUDA graphs (gpu.graphs) ----------------------------------------------------------
/// What the steps of run_steps train on. Plain: every target counts. Masked: a loss mask whose
/// counted targets change every step (instruction data): the gradient scale and the loss's
/// divisor reach the replayed graph through the step's scalars. Packed: rows of several
/// documents (a loss mask on each document's last token) whose count changes every step and
/// crosses powers of two, so that cuDNN's variable-length attention needs graph batches 4 and 8
/// (kernels/sdpa_ragged.hpp): one graph is captured per batch and replayed by the later steps
/// with that batch, each with its own document boundaries. Dpo and Simpo: preference pairs
/// (rows 2j chosen, 2j + 1 rejected) with a masked prompt, LoRA adapters of rank 4 (DPO's
/// reference is the base with them off); the pairs' log-probabilities, loss, rewards and
/// gradient coefficients stay on the device (kernels/preference.hpp).
enum class StepData { Plain, Masked, Packed, Dpo, Simpo };

/// Packed: documents per row of step `step`'s micro-step 0 (micro-step 1 has one fewer, so a
/// step's graph batch is micro-step 0's); with 2 rows the graph batches are 4 4 8 4 8 4 8 8.
constexpr int kPackedDocs[8] = {2, 2, 3, 2, 4, 2, 3, 4};

/// Packed: where the document of token t of row `row` starts (rows of 64 tokens): n
/// documents of about 64 / n tokens, the boundaries shifted by the step and the row.
int packed_doc_start(int step, int micro, int row, int t) {
  const int n = kPackedDocs[step] - micro, len = 64 / n, shift = (step + row) % 5;
  int start = 0;
  for (int k = 1; k < n; ++k)
    if (t >= k * len + shift) start = k * len + shift;
  return start;
}

/// Optimizer steps of a tiny model (2 micro-steps each, the data of each step its own; six,
/// eight packed), launched and collected one by one; the losses, norms and every fp32 master
/// parameter after the last step. With `graphs` the third step is captured and the later ones
/// replayed (packed: the steps GraphSchedule captures and replays, train/step_graph.hpp).
struct StepRun {
  std::vector<double> loss, norm;
  std::vector<float> master;
  int replayed = 0;
};
/// `release_after`: a step (0-based) after which the graphs are released, as the trainer does
/// before an evaluation (StepRunner::release_graphs); the next step captures again.
template <class T>
StepRun run_steps(const char* family, bool graphs, meshtrain::Runtime& rt, StepData data = StepData::Plain,
                  int release_after = -1) {
  const bool packed = data == StepData::Packed, preference = data == StepData::Dpo || data == StepData::Simpo;
  const bool masked = data == StepData::Masked || preference;
  meshtrain::Config c;
  c.model.family = meshtrain::choice_of<meshtrain::ModelFamily>(family);
  c.model.vocab_size = 256;
  c.model.d_model = 64;
  c.model.n_layers = 2;
  c.model.n_heads = 4;
  if (std::string(family) == "llama") c.model.n_kv_heads = 2;
  c.model.max_seq_len = 64;
  c.model.tie_embeddings = std::string(family) == "gpt2";
  c.train.seq_len = 64;
  c.train.micro_batch = 2;
  c.train.grad_accum = 2;
  c.train.steps = packed ? 8 : 6;
  c.train.warmup_steps = 2;
  c.train.grad_clip = 0.5;  // clipping active: the norm's coefficient reaches AdamW through the graph
  c.train.precision = std::is_same_v<T, bf16> ? meshtrain::Precision::Bf16 : meshtrain::Precision::Fp32;
  c.parallel.strategy = meshtrain::StrategyChoice::NoShard;
  c.data.dir = "random";
  c.gpu.graphs = graphs;
  if (preference) {
    c.train.objective = data == StepData::Dpo ? meshtrain::Objective::Dpo : meshtrain::Objective::Simpo;
    c.model.lora_rank = 4;
  }
  const meshtrain::plan::RunSetup setup = meshtrain::app::resolve_run(c, rt.topology());
  meshtrain::train::Session<T> s(rt, setup);
  s.engine().init_parameters(5);
  meshtrain::train::StepRunner<T> runner(s, meshtrain::train::step_settings(setup), packed, masked);
  StepRun out;
  int updates = 0;
  const int seq = c.train.seq_len, B = c.train.micro_batch;
  for (int step = 0; step < c.train.steps; ++step) {
    // Whether token i of micro-step `micro` has a target: masked, past a prompt of
    // 5 + 3 step + micro positions per sequence; packed, not the last token of a document.
    const auto counts = [&](int micro, int i) {
      const int row = i / seq, t = i % seq;
      if (masked) return t >= 5 + 3 * step + micro;
      if (packed) return t + 1 == seq || packed_doc_start(step, micro, row, t + 1) == packed_doc_start(step, micro, row, t);
      return true;
    };
    const meshtrain::train::BatchFiller fill = [&](int micro, std::int32_t* in, std::int32_t* tgt) {
      for (int i = 0; i < B * seq; ++i) {
        in[i] = (i * 7 + micro * 31 + step * 13) % 256;
        tgt[i] = counts(micro, i) ? (i * 5 + micro * 3 + step * 11 + 1) % 256 : -1;
      }
    };
    const meshtrain::train::DocFiller docs = [&](int micro, std::int32_t* start) {
      for (int i = 0; i < B * seq; ++i) start[i] = packed_doc_start(step, micro, i / seq, i % seq);
    };
    meshtrain::train::StepInput in;
    in.step = step;
    in.fill = &fill;
    if (packed) in.docs = &docs;
    if (masked || packed)
      for (int micro = 0; micro < c.train.grad_accum; ++micro)
        for (int i = 0; i < B * seq; ++i) in.counted_targets += counts(micro, i) ? 1 : 0;
    runner.launch(in, updates);
    const meshtrain::train::StepResult r = runner.collect();
    updates += r.applied ? 1 : 0;
    out.loss.push_back(r.loss);
    out.norm.push_back(r.grad_norm);
    out.replayed += r.graph ? 1 : 0;
    if (step == release_after) runner.release_graphs();
  }
  for (int u = 0; u < s.engine().num_units(); ++u) {
    const std::vector<float> m = down(s.engine().state(u).master);
    out.master.insert(out.master.end(), m.begin(), m.end());
  }
  return out;
}
template <class T>
std::string graph_path(const char* family, meshtrain::Runtime& rt, StepData data = StepData::Plain,
                       int release_after = -1) {
#if !defined(MESHTRAIN_WITH_CUDA)
  (void)family;
  (void)rt;
  (void)data;
  (void)release_after;
  throw NotBuilt("a host build has no CUDA graphs");
#else
  const StepRun eager = run_steps<T>(family, false, rt, data),
                graph = run_steps<T>(family, true, rt, data, release_after);
  // Plain and masked: steps 3-6 from the graph (released after step 4: captured again at
  // step 5). Packed (graph batches 4 4 8 4 8 4 8 8): steps 1-2 warm up, step 3 runs batch 8
  // eagerly once, steps 4-5 capture 4 and 8, 6-8 replay.
  const int steps = static_cast<int>(eager.loss.size());
  const int expected = data == StepData::Packed ? 5 : steps - meshtrain::train::kWarmupSteps;
  require(eager.replayed == 0, "the eager run used a graph");
  require(graph.replayed == expected,
          "expected " + std::to_string(expected) + " steps from the graphs, got " + std::to_string(graph.replayed) +
              " (see the gpu.graphs lines above for the reason)");
  check_bitwise("losses (eager vs graph)", eager.loss, graph.loss);
  check_bitwise("gradient norms (eager vs graph)", eager.norm, graph.norm);
  check_bitwise("fp32 master parameters after the last step (eager vs graph)", eager.master, graph.master);
  const char* what = data == StepData::Masked   ? " with a loss mask"
                     : data == StepData::Packed ? " on packed rows"
                     : data == StepData::Dpo    ? " with DPO (LoRA)"
                     : data == StepData::Simpo  ? " with SimPO (LoRA)"
                                                : "";
  char out[320];
  std::snprintf(out, sizeof out, "%s%s%s: %d of %d steps from graphs; losses %.6f .. %.6f and %zu parameters bitwise the eager run's",
                family, what, release_after >= 0 ? " (graphs released after a step, as before an evaluation)" : "",
                graph.replayed, steps, graph.loss.front(), graph.loss.back(), graph.master.size());
  return out;
#endif
}

// ---- GEMM epilogues (gpu.epilogues) -----------------------------------------------------
namespace lin = meshtrain::linalg;

/// One epilogue GEMM on random inputs of a GPT-2-124M projection shape (256 tokens), row-major
/// with unpadded strides (ld_pre: the pre-activation's): inputs bf16-exact, A ~ N(0, 1),
/// B ~ N(0, 1/k) (so C ~ N(0, 1) as in a trained net), pre ~ N(0, 1.5), a nonzero starting
/// bias gradient (the epilogues accumulate into it).
struct EpiCase {
  lin::Epilogue ep;
  lin::Op oa, ob;
  int m, n, k, ld_pre;
  std::vector<double> a, b, c0, bias, pre, bg0;
  EpiCase(lin::Epilogue e, lin::Op opa, lin::Op opb, int m_, int n_, int k_, int ld_pre_, std::uint64_t seed)
      : ep(e), oa(opa), ob(opb), m(m_), n(n_), k(k_), ld_pre(ld_pre_) {
    const auto exact = [](std::vector<float> v, double scale) {
      std::vector<double> d(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) d[i] = static_cast<float>(bf16(static_cast<float>(v[i] * scale)));
      return d;
    };
    a = exact(randn(static_cast<std::size_t>(m) * k, seed), 1.0);
    b = exact(randn(static_cast<std::size_t>(k) * n, seed + 1), 1.0 / std::sqrt(static_cast<double>(k)));
    c0 = exact(randn(static_cast<std::size_t>(m) * n, seed + 2), 1.0);
    bias = exact(randn(n, seed + 3), 0.5);
    pre = exact(randn(static_cast<std::size_t>(m) * ld_pre, seed + 4), 1.5);
    bg0 = exact(randn(n, seed + 5), 0.5);
  }
  int lda() const { return oa == lin::Op::N ? k : m; }
  int ldb() const { return ob == lin::Op::N ? n : k; }
  float beta() const { return ep == lin::Epilogue::BiasGradB ? 1.0f : 0.0f; }
};

/// What one run produced (as doubles) and which implementation took it; for the reference
/// also the scale of each value (the sum of the magnitudes it is made of), which a rounding
/// error is measured against: a result that is a small difference of large terms carries
/// the terms' absolute error.
struct EpiRun {
  std::vector<double> c, pre, bg;
  std::vector<double> c_scale, bg_scale;
  lin::EpilogueImpl impl = lin::EpilogueImpl::GemmThenPass;
};

/// max |got - ref| / scale over the elements; fails above rtol.
double check_scaled(const std::string& what, const std::vector<double>& got, const std::vector<double>& ref,
                    const std::vector<double>& scale, double rtol) {
  require(got.size() == ref.size() && ref.size() == scale.size(), what + ": sizes differ");
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double e = std::fabs(got[i] - ref[i]) / scale[i];
    if (!(e <= worst)) {  // also catches NaN
      worst = std::isnan(e) ? INFINITY : e;
      at = i;
    }
  }
  char msg[256];
  std::snprintf(msg, sizeof msg, "%s: worst error %.3g of the scale at %zu (%.9g vs %.9g, scale %.3g), limit %.3g",
                what.c_str(), worst, at, got.empty() ? 0.0 : got[at], ref.empty() ? 0.0 : ref[at],
                scale.empty() ? 0.0 : scale[at], rtol);
  require(worst <= rtol, msg);
  return worst;
}

template <class T>
Buffer<T> up_as(const std::vector<double>& v) {
  std::vector<T> h(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) h[i] = static_cast<T>(static_cast<float>(v[i]));
  return up(h);
}
template <class T>
std::vector<double> down_as(const Buffer<T>& b) {
  const std::vector<T> h = down(b);
  std::vector<double> d(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) d[i] = static_cast<double>(static_cast<float>(h[i]));
  return d;
}

/// TC: C's type (T, or acc_t<T> for a weight gradient); bias gradients are acc_t<T>.
template <class T, class TC>
EpiRun run_epilogue_as(const EpiCase& e, lin::EpiloguePath path) {
  auto A = up_as<T>(e.a), B = up_as<T>(e.b), bias = up_as<T>(e.bias), pre = up_as<T>(e.pre);
  auto C = up_as<TC>(e.c0);
  auto bg = up_as<meshtrain::acc_t<T>>(e.bg0);
  lin::EpilogueOperands<T> x;
  x.bias = bias.data();
  x.pre = pre.data();
  x.ld_pre = e.ld_pre;
  x.bias_grad = bg.data();
  EpiRun r;
  r.impl = lin::gemm_epilogue<T>(e.ep, e.oa, e.ob, e.m, e.n, e.k, 1.0f, A.data(), e.lda(), B.data(), e.ldb(), e.beta(),
                                 C.data(), e.n, x, path);
  r.c = down_as(C);
  r.pre = down_as(pre);
  r.bg = down_as(bg);
  return r;
}

/// The model's form of a case: a bf16 BiasGradB writes its weight gradient in fp32 (the
/// model's gradients are acc_t<T>); everything else writes C in T.
template <class T>
bool wide_c(const EpiCase& e) {
  return std::is_same_v<T, bf16> && e.ep == lin::Epilogue::BiasGradB;
}
template <class T>
EpiRun run_epilogue(const EpiCase& e, lin::EpiloguePath path) {
  return wide_c<T>(e) ? run_epilogue_as<T, meshtrain::acc_t<T>>(e, path) : run_epilogue_as<T, T>(e, path);
}

/// The double reference of a case: C, the pre-activation (BiasGelu) and the bias gradient.
EpiRun reference(const EpiCase& e) {
  std::vector<double> p, absp;
  meshtrain::test::gemm_ref(e.oa == lin::Op::T, e.ob == lin::Op::T, e.m, e.n, e.k, e.a.data(), e.lda(), e.b.data(),
                            e.ldb(), p, &absp);
  EpiRun r;
  r.c.assign(p.size(), 0.0);
  r.c_scale.assign(p.size(), 0.0);
  r.pre = e.pre;
  r.bg = e.bg0;
  r.bg_scale.assign(e.n, 0.0);
  for (int j = 0; j < e.n; ++j) r.bg_scale[j] = std::fabs(e.bg0[j]) + 1e-3;
  for (int i = 0; i < e.m; ++i)
    for (int j = 0; j < e.n; ++j) {
      const std::size_t ij = static_cast<std::size_t>(i) * e.n + j, ip = static_cast<std::size_t>(i) * e.ld_pre + j;
      switch (e.ep) {
        case lin::Epilogue::Bias:
          r.c[ij] = p[ij] + e.bias[j];
          r.c_scale[ij] = absp[ij] + std::fabs(e.bias[j]);
          break;
        case lin::Epilogue::BiasGelu:
          r.pre[ip] = p[ij] + e.bias[j];
          r.c[ij] = meshtrain::test::gelu_tanh_ref(r.pre[ip]);
          r.c_scale[ij] = 1.2 * (absp[ij] + std::fabs(e.bias[j]));  // |gelu'| <= 1.13
          break;
        case lin::Epilogue::DGeluBiasGrad: {
          const double g = meshtrain::test::gelu_tanh_grad_ref(e.pre[ip]);
          r.c[ij] = p[ij] * g;
          r.c_scale[ij] = absp[ij] * (std::fabs(g) + 0.2);
          r.bg[j] += r.c[ij];
          r.bg_scale[j] += r.c_scale[ij];
          break;
        }
        case lin::Epilogue::BiasGradB:
          r.c[ij] = p[ij] + e.c0[ij];
          r.c_scale[ij] = absp[ij] + std::fabs(e.c0[ij]);
          break;
      }
      r.c_scale[ij] += 1e-3;
    }
  if (e.ep == lin::Epilogue::BiasGradB)
    for (int q = 0; q < e.k; ++q)
      for (int j = 0; j < e.n; ++j) {
        r.bg[j] += e.b[static_cast<std::size_t>(q) * e.n + j];
        r.bg_scale[j] += std::fabs(e.b[static_cast<std::size_t>(q) * e.n + j]);
      }
  return r;
}

/// The checks of one case in T: the Auto path (cuBLASLt on CUDA builds, which must take it
/// when `must_fuse`) against the double reference and against the GEMM-then-pass form on
/// the same execution space; run to run bitwise. Appends a summary to `detail`.
template <class T>
void check_epilogue_case(const EpiCase& e, const EpiRun& ref, bool must_fuse, std::string& detail) {
  const bool bf = std::is_same_v<T, bf16>;
  const char* tn = bf ? "bf16" : "fp32";
  const EpiRun got = run_epilogue<T>(e, lin::EpiloguePath::Auto);
  const EpiRun twin = run_epilogue<T>(e, lin::EpiloguePath::GemmThenPass);
  const bool fused = got.impl == lin::EpilogueImpl::Fused;
  if (must_fuse && lin::gemm_epilogue_fused_built())
    require(fused, std::string(tn) + " " + lin::epilogue_name(e.ep) +
                       ": cuBLASLt did not take the GPT-2 shape (the reason is in the log line above)");
  // Tolerances, of each value's scale (reference()): bf16 outputs round to 8 bits (2^-9)
  // once (cuBLASLt) or two-three times (the GEMM-then-pass form); fp32 sums k products in
  // fp32, and allows for a device GELU on the approximate tanh (2^-11 relative).
  // A bf16 BiasGradB's fp32 weight gradient and bias gradient are fp32 sums of exact
  // products (1e-5: tensor-core accumulation; a result rounded to bf16 is off by ~2e-3).
  const bool gelu = e.ep == lin::Epilogue::BiasGelu || e.ep == lin::Epilogue::DGeluBiasGrad;
  const double rtol = wide_c<T>(e) ? 1e-5 : bf ? 8e-3 : (gelu ? 1e-3 : 2e-6);
  const std::string what = std::string(tn) + (wide_c<T>(e) ? " -> fp32 " : " ") + lin::epilogue_name(e.ep);
  double worst = check_scaled(what + " C vs double", got.c, ref.c, ref.c_scale, rtol);
  check_scaled(what + " C vs GEMM-then-pass", got.c, twin.c, ref.c_scale, 2 * rtol);
  if (e.ep == lin::Epilogue::BiasGelu) {
    std::vector<double> pre_scale(ref.pre.size(), 1.0);  // 1: stride padding, untouched
    for (int i = 0; i < e.m; ++i)
      for (int j = 0; j < e.n; ++j)
        pre_scale[static_cast<std::size_t>(i) * e.ld_pre + j] = ref.c_scale[static_cast<std::size_t>(i) * e.n + j];
    const double rtol_pre = bf ? 8e-3 : 2e-6;
    worst = std::max(worst, check_scaled(what + " pre vs double", got.pre, ref.pre, pre_scale, rtol_pre));
    check_scaled(what + " pre vs GEMM-then-pass", got.pre, twin.pre, pre_scale, 2 * rtol_pre);
  }
  if (e.ep == lin::Epilogue::DGeluBiasGrad || e.ep == lin::Epilogue::BiasGradB) {
    worst = std::max(worst, check_scaled(what + " bias gradient vs double", got.bg, ref.bg, ref.bg_scale, rtol));
    check_scaled(what + " bias gradient vs GEMM-then-pass", got.bg, twin.bg, ref.bg_scale, 2 * rtol);
  }
  const EpiRun again = run_epilogue<T>(e, lin::EpiloguePath::Auto);
  check_bitwise((what + " C run to run").c_str(), got.c, again.c);
  check_bitwise((what + " bias gradient run to run").c_str(), got.bg, again.bg);
  char out[200];
  std::snprintf(out, sizeof out, "%s%s m %d n %d k %d %s: worst %.2g vs double", detail.empty() ? "" : "; ", tn, e.m, e.n,
                e.k, fused ? "cuBLASLt" : "GEMM+pass", worst);
  detail += out;
}

/// One epilogue in bf16 and fp32 on its GPT-2 shape, plus (`odd`) a shape cuBLASLt refuses,
/// which must fall back and still be right. On a build without cuBLASLt the same checks run
/// on the host twin, and the path reports SKIP with their summary.
std::string epilogue_path(const EpiCase& gpt2, const EpiCase* odd, const std::string& extra = "") {
  std::string detail;
  const EpiRun ref = reference(gpt2);
  check_epilogue_case<bf16>(gpt2, ref, true, detail);
  check_epilogue_case<float>(gpt2, ref, true, detail);
  if (odd) {
    std::string odd_detail;
    check_epilogue_case<bf16>(*odd, reference(*odd), false, odd_detail);
    const EpiRun r = run_epilogue<bf16>(*odd, lin::EpiloguePath::Auto);
    require(r.impl == lin::EpilogueImpl::GemmThenPass, "the odd shape (pre-activation stride not a multiple of 8) should fall back");
    detail += "; odd shape falls back: ok";
  }
  detail += extra;
  if (!lin::gemm_epilogue_fused_built())
    throw NotBuilt("no cuBLASLt epilogues in this build; their checks ran on the host twin: " + detail);
  return detail;
}

std::string path_epilogue_bias() {
  // c_attn: qkv (256, 2304) = norm1 (256, 768) @ W (768, 2304) + bias.
  return epilogue_path(EpiCase(lin::Epilogue::Bias, lin::Op::N, lin::Op::N, 256, 2304, 768, 2304, 61), nullptr);
}
std::string path_epilogue_bias_gelu() {
  // c_fc: mlp_in = norm2 (256, 768) @ W (768, 3072) + bias, act = gelu(mlp_in).
  const EpiCase gpt2(lin::Epilogue::BiasGelu, lin::Op::N, lin::Op::N, 256, 3072, 768, 3072, 62);
  const EpiCase odd(lin::Epilogue::BiasGelu, lin::Op::N, lin::Op::N, 37, 53, 29, 53, 63);
  // The GELU flavour: over the pre-activations where the tanh and erf forms differ most
  // (1.5 <= |h| <= 4), the fp32 result must be the tanh form's (rms distance below a quarter
  // of its distance to the erf form's).
  const EpiRun got = run_epilogue<float>(gpt2, lin::EpiloguePath::Auto);
  double st = 0, se = 0;
  int n = 0;
  for (std::size_t i = 0; i < got.c.size(); ++i) {
    const double h = got.pre[i];
    if (std::fabs(h) < 1.5 || std::fabs(h) > 4) continue;
    const double dt = got.c[i] - meshtrain::test::gelu_tanh_ref(h), de = got.c[i] - meshtrain::test::gelu_erf_ref(h);
    st += dt * dt;
    se += de * de;
    ++n;
  }
  require(n > 1000, "too few pre-activations in [1.5, 4] for the GELU flavour check");
  const double rms_tanh = std::sqrt(st / n), rms_erf = std::sqrt(se / n);
  char extra[160];
  std::snprintf(extra, sizeof extra, "; fp32 GELU is the tanh form: rms %.2g from it, %.2g from erf's (%d values)", rms_tanh,
                rms_erf, n);
  require(rms_tanh < 0.25 * rms_erf, std::string("fp32 GELU is not the tanh approximation") + extra);
  return epilogue_path(gpt2, &odd, extra);
}
std::string path_epilogue_dgelu_bgrad() {
  // mlp backward: dh (256, 3072) = (dx (256, 768) @ c_proj^T) * gelu'(mlp_in), d c_fc bias.
  const EpiCase gpt2(lin::Epilogue::DGeluBiasGrad, lin::Op::N, lin::Op::T, 256, 3072, 768, 3072, 64);
  const EpiCase odd(lin::Epilogue::DGeluBiasGrad, lin::Op::N, lin::Op::T, 37, 53, 29, 53, 65);
  return epilogue_path(gpt2, &odd);
}
std::string path_epilogue_bgrad() {
  // c_attn weight gradient: dW (768, 2304) += norm1^T (768, 256) @ dqkv (256, 2304), d bias.
  return epilogue_path(EpiCase(lin::Epilogue::BiasGradB, lin::Op::T, lin::Op::N, 768, 2304, 256, 2304, 66), nullptr);
}

struct Path {
  const char* name;
  std::function<std::string()> run;
};

}  // namespace

int main(int argc, char** argv) {
  meshtrain::Runtime runtime(argc, argv, MPI_COMM_WORLD);
  std::string json_path, only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else {
      std::fprintf(stderr, "selfcheck_paths: unknown argument '%s' (usage: selfcheck_paths [--json FILE] [--only PATH])\n",
                   a.c_str());
      return 2;
    }
  }
  const std::vector<Path> paths = {
      {"fused_optimizer.adamw_multi", path_adamw_multi},
      {"fused_optimizer.grad_norm", path_grad_norm},
      {"packed.position_embedding_backward", path_position_backward_docs},
      {"packed.attention_document_mask", path_attention_document_mask},
      {"attention.cudnn", path_attention_cudnn},
      {"attention.cudnn_ragged", path_attention_cudnn_ragged},
      {"fused_loss.cross_entropy", path_fused_cross_entropy},
      {"fused_loss.tp_merge", path_fused_cross_entropy_tp},
      {"fused_norms.residual_layernorm", path_residual_layernorm},
      {"fused_norms.residual_rmsnorm", path_residual_rmsnorm},
      {"row_packs.swiglu", path_row_packs_swiglu},
      {"row_packs.rope", path_row_packs_rope},
      // Whole steps, eager against replayed from a CUDA graph (bf16, cuDNN attention where built).
      {"graphs.step", [&runtime] {
         return graph_path<bf16>("gpt2", runtime) + "; " + graph_path<bf16>("llama", runtime, StepData::Plain, 3);
       }},
      {"graphs.step_masked", [&runtime] { return graph_path<bf16>("llama", runtime, StepData::Masked); }},
      {"graphs.step_packed", [&runtime] {
         return graph_path<bf16>("llama", runtime, StepData::Packed) + "; " +
                graph_path<bf16>("gpt2", runtime, StepData::Packed);  // learned positions restart per document
       }},
      {"graphs.step_preference", [&runtime] {
         return graph_path<bf16>("llama", runtime, StepData::Dpo) + "; " + graph_path<bf16>("gpt2", runtime, StepData::Simpo);
       }},
      {"epilogues.bias", path_epilogue_bias},
      {"epilogues.bias_gelu", path_epilogue_bias_gelu},
      {"epilogues.dgelu_bgrad", path_epilogue_dgelu_bgrad},
      {"epilogues.bgrad", path_epilogue_bgrad},
  };
  const char* space = meshtrain::kDeviceIsHost ? "host threads (the host twins)" : "the device";
  std::printf("selfcheck_paths: %zu paths on %s (%s), each against the path it replaces and a double reference\n",
              paths.size(), space, Kokkos::DefaultExecutionSpace::name());
  int failed = 0, ran = 0, skipped = 0;
  std::string json = "{\"paths\": {";
  for (const Path& p : paths) {
    if (!only.empty() && only != p.name) continue;
    std::string verdict, detail;
    try {
      detail = p.run();
      Kokkos::fence();
      verdict = "PASS";
    } catch (const NotBuilt& e) {
      detail = e.what();
      verdict = "SKIP";
      ++skipped;
    } catch (const std::exception& e) {
      detail = e.what();
      verdict = "FAIL";
      ++failed;
    }
    ++ran;
    const bool pass = verdict != "FAIL";
    std::printf("%s %s%s%s%s\n", verdict.c_str(), p.name, pass ? " (" : ": ", detail.c_str(), pass ? ")" : "");
    std::fflush(stdout);
    json += std::string(ran > 1 ? ", " : "") + "\"" + p.name + "\": \"" + verdict + "\"";
  }
  json += "}}\n";
  if (ran == 0) {
    std::fprintf(stderr, "selfcheck_paths: no path named '%s'\n", only.c_str());
    return 2;
  }
  std::printf("selfcheck_paths: %d of %d paths passed, %d not in this build (SKIP)\n", ran - failed - skipped, ran,
              skipped);
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (f == nullptr || std::fputs(json.c_str(), f) < 0 || std::fclose(f) != 0) {
      std::fprintf(stderr, "selfcheck_paths: cannot write %s\n", json_path.c_str());
      return 2;
    }
  }
  return failed ? 1 : 0;
}
