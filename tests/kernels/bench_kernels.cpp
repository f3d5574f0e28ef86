// Micro-benchmark of the kernels at GPT-2-small-like shapes (fp32). Not a test: run by
// hand, e.g. `OMP_NUM_THREADS=1 build/<dir>/bin/bench_kernels`. For each kernel it prints
// the bytes it must move at least, the time (best of a few repetitions) and the
// effective bandwidth; attention also prints its GEMM flop rate.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

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
#include "runtime/runtime.hpp"

using namespace meshtrain;
namespace k = meshtrain::kernels;

namespace {

/// Seconds now: wall time, or with BENCH_CPU_TIME=1 the process's CPU time (with one thread,
/// the time it ran: a shared machine's other load then costs less of the measurement,
/// though caches and memory bandwidth stay shared).
double now_seconds() {
  static const bool cpu = std::getenv("BENCH_CPU_TIME") && std::string(std::getenv("BENCH_CPU_TIME")) == "1";
  if (cpu) {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double best_seconds(const std::function<void()>& f, int reps = 5) {
  f();  // warm up (first touch, pool)
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    Kokkos::fence();
    const double t0 = now_seconds();
    f();
    Kokkos::fence();
    best = std::min(best, now_seconds() - t0);
  }
  return best;
}

void report(const std::string& name, double bytes, double s, double flops = 0) {
  std::printf("%-36s %9.3f ms  %7.2f GB/s", name.c_str(), s * 1e3, bytes / s / 1e9);
  if (flops > 0) std::printf("  %7.2f GFLOP/s (GEMM flops)", flops / s / 1e9);
  std::printf("\n");
}

template <class T>
Buffer<T> filled(std::size_t n, double v) {
  Buffer<T> b(n, MemCategory::Workspace);
  k::fill(b.data(), n, v);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  Runtime runtime(argc, argv, MPI_COMM_WORLD);
  using F = float;
  const int N = 8192, C = 768, C4 = 4 * C, V = 50304;
  // --only=norms: the LayerNorm/RMSNorm section alone (perf/bench_norms.sh repeats it);
  // --only=epilogues: the GELU section alone, with gpu.epilogues' one-pass forms beside the
  // kernels they replace.
  const std::string only = argc > 1 ? std::string(argv[argc - 1]) : "";
  const bool norms_only = only == "--only=norms", epilogues_only = only == "--only=epilogues";
  std::printf("meshtrain kernel micro-benchmark, fp32, N=%d rows, C=%d\n", N, C);

  if (!epilogues_only) {  // LayerNorm
    auto x = filled<F>(static_cast<std::size_t>(N) * C, 0.5), y = filled<F>(static_cast<std::size_t>(N) * C, 0);
    auto w = filled<F>(C, 1.0), b = filled<F>(C, 0.0), dw = filled<F>(C, 0), db = filled<F>(C, 0);
    auto m = filled<F>(N, 0), r = filled<F>(N, 0), dx = filled<F>(static_cast<std::size_t>(N) * C, 0);
    const double nc = 4.0 * N * C;
    report("layernorm_forward", 2 * nc, best_seconds([&] {
             k::layernorm_forward(x.data(), w.data(), b.data(), 1e-5, N, C, y.data(), m.data(), r.data());
           }));
    report("layernorm_backward", 4 * nc, best_seconds([&] {
             k::layernorm_backward(y.data(), x.data(), w.data(), m.data(), r.data(), N, C, dx.data(), dw.data(),
                                   db.data());
           }));
    report("rmsnorm_forward", 2 * nc, best_seconds([&] {
             k::rmsnorm_forward(x.data(), w.data(), 1e-5, N, C, y.data(), r.data());
           }));
    report("rmsnorm_backward", 4 * nc, best_seconds([&] {
             k::rmsnorm_backward(y.data(), x.data(), w.data(), r.data(), N, C, dx.data(), dw.data());
           }));
    report("bias_backward (N x C)", nc, best_seconds([&] { k::bias_backward(x.data(), db.data(), N, C, C); }));
    // gpu.fused_norms side by side (each includes resetting h, the same copy for both):
    // unfused add_bias + add_inplace + norm against the fused residual norm.
    auto h0 = filled<F>(static_cast<std::size_t>(N) * C, 0.25), h = filled<F>(static_cast<std::size_t>(N) * C, 0);
    k::fill_uniform(h0.data(), h0.size(), -1.0, 1.0, 7);
    k::fill_uniform(x.data(), x.size(), -1.0, 1.0, 8);
    const auto reset = [&] { Kokkos::deep_copy(h.view(), h0.view()); };
    report("copy (reset of h, in both below)", 2 * nc, best_seconds(reset));
    report("unfused residual+layernorm fwd", 5 * nc, best_seconds([&] {
             reset();
             k::add_bias(h.data(), b.data(), N, C, C);
             k::add_inplace(h.data(), x.data(), h.size());
             k::layernorm_forward(h.data(), w.data(), b.data(), 1e-5, N, C, y.data(), m.data(), r.data());
           }));
    report("fused residual_layernorm_forward", 4 * nc, best_seconds([&] {
             reset();
             k::residual_layernorm_forward(h.data(), x.data(), b.data(), w.data(), b.data(), 1e-5, N, C, y.data(),
                                           m.data(), r.data());
           }));
    report("unfused layernorm+bias backward", 5 * nc, best_seconds([&] {
             k::layernorm_backward(y.data(), h.data(), w.data(), m.data(), r.data(), N, C, dx.data(), dw.data(),
                                   db.data());
             k::bias_backward(dx.data(), db.data(), N, C, C);
           }));
    report("fused residual_layernorm_backward", 4 * nc, best_seconds([&] {
             k::residual_layernorm_backward(y.data(), h.data(), w.data(), m.data(), r.data(), N, C, dx.data(),
                                            dw.data(), db.data(), db.data());
           }));
    report("unfused residual+rmsnorm fwd", 5 * nc, best_seconds([&] {
             reset();
             k::add_inplace(h.data(), x.data(), h.size());
             k::rmsnorm_forward(h.data(), w.data(), 1e-5, N, C, y.data(), r.data());
           }));
    report("fused residual_rmsnorm_forward", 4 * nc, best_seconds([&] {
             reset();
             k::residual_rmsnorm_forward(h.data(), x.data(), w.data(), 1e-5, N, C, y.data(), r.data());
           }));
    report("unfused rmsnorm backward", 4 * nc, best_seconds([&] {
             k::rmsnorm_backward(y.data(), h.data(), w.data(), r.data(), N, C, dx.data(), dw.data());
           }));
    report("fused residual_rmsnorm_backward", 4 * nc, best_seconds([&] {
             k::residual_rmsnorm_backward(y.data(), h.data(), w.data(), r.data(), N, C, dx.data(), dw.data());
           }));
    report("add_bias (N x C)", 2 * nc, best_seconds([&] { k::add_bias(y.data(), b.data(), N, C, C); }));
  }
  if (norms_only) return 0;
  {  // GELU, SwiGLU on (N, 4C)
    const std::size_t n = static_cast<std::size_t>(N) * C4;
    auto x = filled<F>(2 * n, 0.3), y = filled<F>(n, 0), dx = filled<F>(2 * n, 0);
    report("gelu_forward (N x 4C)", 8.0 * n, best_seconds([&] { k::gelu_forward(x.data(), y.data(), n); }));
    report("gelu_backward (N x 4C)", 12.0 * n,
           best_seconds([&] { k::gelu_backward(x.data(), y.data(), dx.data(), n); }));
    // gpu.epilogues' host twin side by side: the pass after the GEMM, unfused and fused.
    {
      auto b = filled<F>(C4, 0.1), db = filled<F>(C4, 0), pre = filled<F>(n, 0), d = filled<F>(n, 0);
      k::fill_uniform(pre.data(), n, -3.0, 3.0, 9);
      k::fill_uniform(d.data(), n, -1.0, 1.0, 10);
      const auto reset = [&] {  // the GEMM's output, rewritten before each (in both forms)
        Kokkos::deep_copy(x.view(0, n), pre.view());
        Kokkos::deep_copy(dx.view(0, n), d.view());
      };
      report("copy (the GEMM output, in both below)", 16.0 * n, best_seconds(reset));
      report("unfused add_bias + gelu_forward", 16.0 * n + 8.0 * n, best_seconds([&] {
               reset();
               k::add_bias(x.data(), b.data(), N, C4, C4);
               k::gelu_forward(x.data(), y.data(), n);
             }));
      report("fused bias_gelu_forward", 16.0 * n + 12.0 * n, best_seconds([&] {
               reset();
               k::bias_gelu_forward(x.data(), C4, b.data(), y.data(), C4, N, C4);
             }));
      report("unfused gelu_backward + bias_backward", 16.0 * n + 16.0 * n, best_seconds([&] {
               reset();
               k::gelu_backward(x.data(), dx.data(), dx.data(), n);
               k::bias_backward(dx.data(), db.data(), N, C4, C4);
             }));
      report("fused gelu_backward_bias_grad", 16.0 * n + 12.0 * n, best_seconds([&] {
               reset();
               k::gelu_backward_bias_grad(x.data(), C4, dx.data(), C4, db.data(), N, C4);
             }));
    }
    if (epilogues_only) return 0;
    report("swiglu_forward (N x 4C)", 12.0 * n, best_seconds([&] {
             k::swiglu_forward(x.data(), x.data() + C4, 2 * C4, y.data(), C4, N, C4);
           }));
    report("swiglu_backward (N x 4C)", 20.0 * n, best_seconds([&] {
             k::swiglu_backward(x.data(), x.data() + C4, 2 * C4, y.data(), C4, dx.data(), dx.data() + C4, N, C4);
           }));
    report("sum_squares (N x 4C)", 4.0 * n, best_seconds([&] { (void)k::sum_squares(y.data(), n); }));
    report("cast fp32->bf16 (N x 4C)", 6.0 * n, best_seconds([&] {
             k::cast(y.data(), reinterpret_cast<bf16*>(dx.data()), n);
           }));
  }
  {  // Embeddings
    std::vector<std::int32_t> tok(N);
    for (int i = 0; i < N; ++i) tok[i] = static_cast<std::int32_t>((i * 7919L) % V);
    Buffer<std::int32_t> dtok(N, MemCategory::Workspace);
    Kokkos::deep_copy(dtok.view(), Kokkos::View<std::int32_t*, HostMem, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(tok.data(), N));
    auto wte = filled<F>(static_cast<std::size_t>(V) * C, 0.1), out = filled<F>(static_cast<std::size_t>(N) * C, 0);
    const double nc = 4.0 * N * C;
    report("embedding_forward", 2 * nc, best_seconds([&] {
             k::embedding_forward(dtok.data(), N, wte.data(), 0, V, C, out.data());
           }));
    report("embedding_backward", 3 * nc, best_seconds([&] {
             k::embedding_backward(dtok.data(), N, out.data(), 0, V, C, wte.data());
           }));
    auto wpe = filled<F>(1024 * static_cast<std::size_t>(C), 0.1);
    report("position_embedding_backward", nc, best_seconds([&] {
             k::position_embedding_backward(out.data(), wpe.data(), N / 1024, 1024, C);
           }));
  }
  {  // RoPE, Llama-like q: (N, 32 heads x 128)
    const int H = 32, hd = 128;
    auto x = filled<F>(static_cast<std::size_t>(N) * H * hd, 0.2);
    auto cs = filled<float>(1024 * hd / 2, 0), sn = filled<float>(1024 * hd / 2, 0);
    k::rope_tables(10000.0, hd, 1024, cs.data(), sn.data());
    report("rope_forward (N x 32x128)", 8.0 * N * H * hd, best_seconds([&] {
             k::rope_forward(x.data(), H * hd, N / 1024, 1024, H, hd, cs.data(), sn.data());
           }));
  }
  {  // Attention: B=1, T=1024, 12 heads of 64
    k::AttentionShape s;
    s.B = 1;
    s.T = 1024;
    s.Hq = s.Hkv = 12;
    s.hd = 64;
    s.scale = 0.125f;
    const int Nt = s.B * s.T, ld = 3 * s.Hq * s.hd;
    auto qkv = filled<F>(static_cast<std::size_t>(Nt) * ld, 0.01), out = filled<F>(static_cast<std::size_t>(Nt) * s.Hq * s.hd, 0);
    auto dqkv = filled<F>(static_cast<std::size_t>(Nt) * ld, 0);
    const std::size_t pp = static_cast<std::size_t>(s.B) * s.Hq * s.T * s.T;
    auto stats = filled<acc_t<F>>(static_cast<std::size_t>(s.B) * s.Hq * s.T * 2, 0);
    auto ws = filled<F>(static_cast<std::size_t>(k::attention_workspace_elems(s)), 0);
    const double causal_flops = 2.0 * s.B * s.Hq * s.T * s.T * s.hd;  // two GEMMs, half of each square
    const int H = s.Hq * s.hd;
    report("attention_forward (T=1024, 12x64)", 8.0 * pp, best_seconds([&] {
             k::attention_forward(s, qkv.data(), ld, qkv.data() + H, ld, qkv.data() + 2 * H, ld, out.data(), H,
                                  stats.data(), ws.data());
           }, 3), causal_flops);
    // Backward recomputes the scores from the saved row statistics: five GEMMs to forward's two.
    report("attention_backward (T=1024, 12x64)", 16.0 * pp, best_seconds([&] {
             k::attention_backward(s, qkv.data(), ld, qkv.data() + H, ld, qkv.data() + 2 * H, ld, out.data(),
                                   stats.data(), out.data(), H, dqkv.data(), dqkv.data() + H, dqkv.data() + 2 * H, ws.data());
           }, 3), 2.5 * causal_flops);
  }
  {  // Cross-entropy over (1024, V)
    const int Nr = 1024;
    auto logits = filled<F>(static_cast<std::size_t>(Nr) * V, 0.01);
    std::vector<std::int32_t> tgt(Nr, 5);
    Buffer<std::int32_t> dt(Nr, MemCategory::Workspace);
    Kokkos::deep_copy(dt.view(), Kokkos::View<std::int32_t*, HostMem, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(tgt.data(), Nr));
    auto mx = filled<float>(Nr, 0), st = filled<float>(2 * Nr, 0);
    const double bytes = 4.0 * Nr * V;
    report("cross_entropy_row_max (1024 x V)", bytes, best_seconds([&] {
             k::cross_entropy_row_max(logits.data(), V, Nr, V, 0, 50257, mx.data());
           }));
    report("cross_entropy_row_sums (1024 x V)", bytes, best_seconds([&] {
             k::cross_entropy_row_sums(logits.data(), V, Nr, V, 0, 50257, dt.data(), mx.data(), st.data());
           }));
    report("cross_entropy_finish (1024 x V)", 2 * bytes, best_seconds([&] {
             k::fill(logits.data(), static_cast<std::size_t>(Nr) * V, 0.01);
             (void)k::cross_entropy_finish(logits.data(), V, Nr, V, 0, 50257, dt.data(), mx.data(), st.data(), 1.0f);
           }));
    // gpu.fused_loss side by side on random logits: each run restores the logits from a
    // copy (the gradient overwrites them), the same copy for both forms.
    auto l0 = filled<F>(static_cast<std::size_t>(Nr) * V, 0);
    k::fill_uniform(l0.data(), l0.size(), -4.0, 4.0, 9);
    const auto restore = [&] { Kokkos::deep_copy(logits.view(), l0.view()); };
    Buffer<double> loss(1, MemCategory::Workspace);
    auto lmax = filled<float>(Nr, 0);
    report("copy (restore, in each below)", 2 * bytes, best_seconds(restore));
    report("three-pass cross-entropy (1024 x V)", 4 * bytes, best_seconds([&] {
             restore();
             k::cross_entropy_row_max(logits.data(), V, Nr, V, 0, 50257, mx.data());
             k::cross_entropy_row_sums(logits.data(), V, Nr, V, 0, 50257, dt.data(), mx.data(), st.data());
             (void)k::cross_entropy_finish(logits.data(), V, Nr, V, 0, 50257, dt.data(), mx.data(), st.data(), 1.0f);
           }));
    report("fused cross_entropy_fused (1024 x V)", 2 * bytes, best_seconds([&] {
             restore();
             k::cross_entropy_fused(logits.data(), V, Nr, V, 50257, dt.data(), 1.0f, nullptr, loss.data());
           }));
    report("online stats + finish (tp form)", 3 * bytes, best_seconds([&] {
             restore();
             k::cross_entropy_online_stats(logits.data(), V, Nr, V, 0, 50257, dt.data(), lmax.data(), mx.data(),
                                           st.data());
             k::cross_entropy_finish_into(logits.data(), V, Nr, V, 0, 50257, dt.data(), mx.data(), st.data(), 1.0f,
                                          nullptr, loss.data());
           }));
  }
  {  // AdamW over 16M parameters
    const std::size_t n = 16u << 20;
    auto p = filled<float>(n, 0.1), g = filled<float>(n, 0.01), m = filled<float>(n, 0), v = filled<float>(n, 0);
    k::AdamWParams hp;
    hp.lr = 1e-3f;
    hp.weight_decay = 0.1f;
    report("adamw_step (16M)", 28.0 * n, best_seconds([&] {
             k::adamw_step(p.data(), g.data(), m.data(), v.data(), n, hp);
           }));
  }
  return 0;
}
