// selfcheck_paths: every fused path of issue 33 run on this build's execution space (the GPU
// on a CUDA build, host threads otherwise) against the path it replaces and against an
// independent double-precision reference computed here on the host, on random inputs. One
// line per path, "PASS <path> ..." or "FAIL <path>: ...", continuing after a failure; the
// exit status is 1 when any path failed. perf/gpu/validate.sh runs it first on the device
// (its step (a)) and reads the lines into results.json's "paths".
//
// usage: selfcheck_paths [--json FILE] [--only PATH]
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <mpi.h>

#include "core/bf16.hpp"
#include "core/memory.hpp"
#include "kernels/adamw.hpp"
#include "kernels/attention.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/embedding.hpp"
#include "runtime/runtime.hpp"

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
void attention_ref_double(int B, int T, int H, int Hkv, int hd, double scale, const std::vector<float>& q,
                          const std::vector<float>& kk, const std::vector<float>& v, const std::vector<float>& dout,
                          std::vector<double>& o, std::vector<double>& dq, std::vector<double>& dk,
                          std::vector<double>& dv) {
  const int ldq = H * hd, ldk = Hkv * hd, group = H / Hkv;
  o.assign(q.size(), 0.0), dq.assign(q.size(), 0.0), dk.assign(kk.size(), 0.0), dv.assign(v.size(), 0.0);
  std::vector<double> pr(T), dp(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const int j = h / group;
      for (int i = 0; i < T; ++i) {
        const std::size_t orow = (static_cast<std::size_t>(b) * T + i) * ldq + h * hd;
        auto krow = [&](int t) { return (static_cast<std::size_t>(b) * T + t) * ldk + j * hd; };
        double mx = -INFINITY;
        for (int t = 0; t <= i; ++t) {
          double sc = 0;
          for (int d = 0; d < hd; ++d) sc += static_cast<double>(q[orow + d]) * kk[krow(t) + d];
          pr[t] = sc * scale;
          mx = std::max(mx, pr[t]);
        }
        double sum = 0;
        for (int t = 0; t <= i; ++t) sum += (pr[t] = std::exp(pr[t] - mx));
        for (int t = 0; t <= i; ++t) pr[t] /= sum;
        for (int d = 0; d < hd; ++d) {
          double acc = 0;
          for (int t = 0; t <= i; ++t) acc += pr[t] * v[krow(t) + d];
          o[orow + d] = acc;
        }
        double dot = 0;
        for (int t = 0; t <= i; ++t) {
          double a = 0;
          for (int d = 0; d < hd; ++d) a += static_cast<double>(dout[orow + d]) * v[krow(t) + d];
          dp[t] = a;
          dot += pr[t] * a;
        }
        for (int t = 0; t <= i; ++t) {
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
