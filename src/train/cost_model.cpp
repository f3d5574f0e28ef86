#include "meshtrain/comm/collectives.hpp"
#include "meshtrain/train/cost_model.hpp"

#include <algorithm>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <cmath>
#include <sched.h>

#include <sstream>
#include <vector>

#include "meshtrain/comm/bench.hpp"
#include "meshtrain/comm/mpi_communicator.hpp"
#include "meshtrain/core/check.hpp"
#include "meshtrain/core/error.hpp"
#include "meshtrain/core/memory.hpp"
#include "meshtrain/core/timer.hpp"
#include "meshtrain/kernels/adamw.hpp"
#include "meshtrain/kernels/attention.hpp"
#include "meshtrain/kernels/elementwise.hpp"
#include "meshtrain/linalg/gemm.hpp"
#include "meshtrain/linalg/peak.hpp"
#include "meshtrain/model/layout.hpp"
#include "meshtrain/parallel/device_mesh.hpp"

namespace meshtrain::train {
namespace {

/// Reads+writes of every saved activation element by the memory-bound kernels over a
/// forward and backward (norms, bias, softmax, residual adds and their backward; the MLP
/// activation is timed separately when measured). An estimate from counting the kernels'
/// passes, not a fit.
constexpr double kElementwisePasses = 6.0;

/// One GEMM call of a micro-step: C (m, n) = op(A) op(B), `batch` times (strided), repeated
/// `count` times per micro-step.
struct GemmCall {
  linalg::Op a, b;
  int m, n, k, batch, count;
  float beta = 0.0f;  ///< 1 for weight gradients, which the model accumulates (dW += X^T dY)
};

/// FLOPs per token of the attention scores that backward computes again (q k^T of every
/// block, counted full like ModelDims::flops_per_token_forward): the kernels keep each
/// row's softmax statistics, not the (T, T) probabilities.
double recompute_flops_per_token(const model::ModelDims& d, int seq_len) {
  return 2.0 * d.n_layers * static_cast<double>(seq_len) * d.d_model;
}

/// The GEMMs of one micro-step of N = micro_batch x seq_len rows, as the model issues them:
/// per block the four linear layers (forward X W; backward dW += X^T dY and dX = dY W^T) and
/// causal attention in the kernels' row blocks (scores, weighted sum; scores again, dP, dQ,
/// dK, dV), and the LM head (logits, dW, dX) in the model's row chunks. Returns the list and, in `flop`, the FLOPs the
/// step is credited with (3 x ModelDims::flops_per_token_forward x N plus the recomputed
/// scores: attention counted as full, not causal-halved) - so FLOP / time is the rate that
/// turns that count into this time.
std::vector<GemmCall> model_gemms(const model::ModelDims& d, int B, int T, int tp, double& flop) {
  using linalg::Op;
  const int N = B * T, C = d.d_model, hd = d.head_dim;
  const int Hq = d.n_heads / tp, kv = d.n_kv_heads * hd / std::max(1, std::min(tp, d.n_kv_heads));
  const int Fl = d.ffn_dim / tp, Vl = static_cast<int>(d.vocab / tp), L = d.n_layers;
  const int qkv = Hq * hd + 2 * kv;
  const int up = d.family == model::Family::Gpt2 ? Fl : 2 * Fl;  // llama: gate and up
  std::vector<GemmCall> g;
  const auto linear = [&](int in, int out) {  // Y (N, out) = X (N, in) W (in, out)
    g.push_back({Op::N, Op::N, N, out, in, 1, L});
    g.push_back({Op::T, Op::N, in, out, N, 1, L, 1.0f});
    g.push_back({Op::N, Op::T, N, in, out, 1, L});
  };
  linear(C, qkv);
  linear(Hq * hd, C);
  linear(C, up);
  linear(Fl, C);
  const int rb = kernels::attention_block_rows(T);
  for (int i0 = 0; i0 < T; i0 += rb) {
    const int i1 = std::min(T, i0 + rb), r = i1 - i0;
    g.push_back({Op::N, Op::T, r, i1, hd, B, L * Hq});   // scores
    g.push_back({Op::N, Op::N, r, hd, i1, B, L * Hq});   // out = P V
    g.push_back({Op::N, Op::T, r, i1, hd, B, L * Hq});   // scores again (backward recomputes P)
    g.push_back({Op::N, Op::T, r, i1, hd, B, L * Hq});   // dP
    g.push_back({Op::N, Op::N, r, hd, i1, B, L * Hq});   // dQ
    g.push_back({Op::T, Op::N, i1, hd, r, B, L * Hq});   // dK
    g.push_back({Op::T, Op::N, i1, hd, r, B, L * Hq});   // dV
  }
  const int chunk = static_cast<int>(std::min<std::int64_t>(N, std::max<std::int64_t>(1, (std::int64_t{1} << 24) / Vl)));
  for (int r0 = 0; r0 < N; r0 += chunk) {
    const int nc = std::min(chunk, N - r0);
    g.push_back({Op::N, Op::T, nc, Vl, C, 1, 1});
    g.push_back({Op::T, Op::N, Vl, C, nc, 1, 1, 1.0f});
    g.push_back({Op::N, Op::N, nc, C, Vl, 1, 1});
  }
  flop = (3.0 * d.flops_per_token_forward(T) + recompute_flops_per_token(d, T)) * N / tp;
  return g;
}

/// Operand sets cycled through by time_gemms, so that successive calls find their
/// activations in memory rather than in the last-level cache (as in training, where every
/// call reads a different activation and its weights were last touched a block earlier).
constexpr std::size_t kColdSetBytes = std::size_t{96} << 20;

template <class T>
double time_gemms(const std::vector<GemmCall>& calls) {
  std::size_t na = 0, nb = 0, nc = 0;
  for (const GemmCall& c : calls) {
    na = std::max(na, static_cast<std::size_t>(c.m) * c.k * c.batch);
    nb = std::max(nb, static_cast<std::size_t>(c.k) * c.n * c.batch);
    nc = std::max(nc, static_cast<std::size_t>(c.m) * c.n * c.batch);
  }
  const std::size_t set = na + nb + nc;
  const std::size_t sets = std::clamp<std::size_t>(kColdSetBytes / (set * sizeof(T)) + 1, 1, 8);
  Buffer<T> pool(set * sets, MemCategory::Workspace);
  kernels::fill(pool.data(), set * sets, 0.01);
  std::size_t next = 0;
  const auto run_all = [&](bool once) {
    for (const GemmCall& g : calls) {
      const int lda = g.a == linalg::Op::N ? g.k : g.m, ldb = g.b == linalg::Op::N ? g.n : g.k;
      const int reps = once ? 1 : g.count;
      for (int r = 0; r < reps; ++r) {
        T* a = pool.data() + (next++ % sets) * set;
        T* b = a + na;
        T* c = b + nb;
        if (g.batch == 1)
          linalg::gemm<T>(g.a, g.b, g.m, g.n, g.k, 1.0f, a, lda, b, ldb, g.beta, c, g.n);
        else
          linalg::gemm_strided_batched<T>(g.a, g.b, g.m, g.n, g.k, 1.0f, a, lda,
                                          static_cast<std::int64_t>(g.m) * g.k, b, ldb,
                                          static_cast<std::int64_t>(g.k) * g.n, g.beta, c, g.n,
                                          static_cast<std::int64_t>(g.m) * g.n, g.batch);
      }
    }
    Kokkos::fence();
  };
  run_all(true);  // warm-up: every shape once
  // The best of at least 3 passes, more until ~0.3 s is spent (at most 10): a small model's
  // micro-step takes milliseconds, and two passes of it on a shared machine gave rates 2-3x
  // apart between runs of `plan`.
  double best = 1e300, spent = 0;
  for (int rep = 0; rep < 10 && (rep < 3 || spent < 0.3); ++rep) {
    const double t0 = now_seconds();
    run_all(false);
    const double t = now_seconds() - t0;
    best = std::min(best, t);
    spent += t;
  }
  return best;
}

/// Seconds per element of the fused AdamW update and of the MLP activation's forward plus
/// backward (GELU-tanh or SwiGLU): both are compute-bound on CPUs (sqrt/div, tanh/exp per
/// element), so bytes / copy bandwidth underestimates them several-fold. Timed on `n`
/// elements, best of 3 after a warm-up.
struct ElementRates {
  double adamw = 0, activation = 0;
};

template <class T>
ElementRates measure_element_rates(model::Family family, std::size_t n) {
  ElementRates r;
  const auto best_of = [](auto&& fn) {
    fn();
    double best = 1e300;
    for (int rep = 0; rep < 3; ++rep) {
      const double t0 = now_seconds();
      fn();
      Kokkos::fence();
      best = std::min(best, now_seconds() - t0);
    }
    return best;
  };
  {
    Buffer<float> p(n, MemCategory::Workspace), g(n, MemCategory::Workspace), m(n, MemCategory::Workspace),
        v(n, MemCategory::Workspace);
    for (Buffer<float>* b : {&p, &g, &m, &v}) kernels::fill(b->data(), n, 0.01);
    kernels::AdamWParams ap;
    ap.weight_decay = 0.1f;
    r.adamw = best_of([&] { kernels::adamw_step(p.data(), g.data(), m.data(), v.data(), n, ap); }) / n;
  }
  // Activation: n elements of the MLP hidden (rows x cols); SwiGLU reads gate and up.
  Buffer<T> a(2 * n, MemCategory::Workspace), b(2 * n, MemCategory::Workspace), c(2 * n, MemCategory::Workspace);
  kernels::fill(a.data(), 2 * n, 0.5);
  kernels::fill(b.data(), 2 * n, 0.25);
  const int cols = 1024, rows = static_cast<int>(n / cols);
  if (family == model::Family::Gpt2) {
    r.activation = best_of([&] {
      kernels::gelu_forward(a.data(), c.data(), n);
      kernels::gelu_backward(a.data(), b.data(), c.data(), n);
    }) / n;
  } else {
    r.activation = best_of([&] {
      kernels::swiglu_forward(a.data(), a.data() + cols, 2 * cols, c.data(), cols, rows, cols);
      kernels::swiglu_backward(a.data(), a.data() + cols, 2 * cols, b.data(), cols, c.data(), c.data() + cols,
                               rows, cols);
    }) / n;
  }
  return r;
}

/// How the ranks of an oversubscribed node (more host threads than cores, e.g. 4 ranks on a
/// 2-core workstation) share it. Measuring with every rank at once there is noise: over a
/// 0.3 s window one rank gets a tenth of a core, another a whole one. Instead only the first
/// `slots` ranks of each node (one per core's worth of threads) measure, and a rank's step
/// sees that rate times `share` = slots / ranks on the node - its time-shared fraction.
struct NodeShare {
  bool measures = true;  ///< this rank takes the measurements
  double share = 1.0;    ///< fraction of a measuring rank's rate each rank gets in a step
};

/// The ranks that share this rank's cores: those under the same running kernel (its boot id).
/// A topology of host names counts "nodes" that may be containers or network namespaces of
/// one machine (the multi-host tests and perf/multihost_sweep.sh), whose ranks still share
/// its cores. Without a boot id (not Linux) the node is the machine.
MpiComm same_machine(const Runtime& rt) {
  std::string id;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  if (!std::getline(f, id) || id.empty()) id = "node " + std::to_string(rt.topology().node_index);
  const int color = static_cast<int>(std::hash<std::string>{}(id) & 0x7fffffff);
  return rt.world().split(color, rt.world().rank());
}

NodeShare node_share(const Runtime& rt) {
  NodeShare ns;
  if (!kDeviceIsHost) return ns;
  const MpiComm machine = same_machine(rt);  // collective: before any early return below
  cpu_set_t set;
  const int cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set)
                                                                  : static_cast<int>(std::thread::hardware_concurrency());
  const int threads = std::max(1, static_cast<int>(Kokkos::DefaultHostExecutionSpace().concurrency()));
  const int slots = std::max(1, std::max(1, cores) / threads);
  const int local = machine.size();
  if (local > slots) {
    ns.measures = machine.rank() < slots;
    ns.share = static_cast<double>(slots) / local;
  }
  return ns;
}

/// The value a training step will see from per-rank measurements: the slowest measuring
/// rank's (it bounds the step; `worse` = Min for rates, Max for times), scaled by
/// the node's time share. Collective; `v` is ignored on ranks that do not measure.
double step_value(const Runtime& rt, double v, ReduceOp worse, const NodeShare& ns) {
  // Ranks that do not measure arrive early; they must sleep, not spin in the collective:
  // Open MPI busy-polls a blocking collective and would take the cores being measured.
  sleeping_barrier(rt.world());
  const bool rate = worse == ReduceOp::Min;
  const double in = ns.measures ? v : (rate ? 1e300 : -1e300);
  const double out = all_reduce_value(rt.world(), in, worse);
  return rate ? out * ns.share : out / ns.share;
}

/// One of the model's linear layers as a GEMM on workspace buffers: (rows, d_model) x
/// (d_model, 3 d_model / tp) - the average width of its four linears (qkv 3C, proj C, up and
/// down 4C). What the measurements below need is its duration, so a large model's shape is
/// shrunk (fewer rows and columns) to at most `max_s` at `gemm_flops` and a 64 MiB weight.
class ModelLinear {
 public:
  ModelLinear(const model::ModelDims& dims, int rows, int tp, double gemm_flops, double max_s) {
    k_ = std::max(1, dims.d_model);
    n_ = std::max(1, 3 * dims.d_model / std::max(1, tp));
    n_ = std::max(1, std::min(n_, (1 << 24) / k_));
    const double max_rows = max_s * std::max(gemm_flops, 1e9) / (2.0 * k_ * n_);
    m_ = std::max(1, static_cast<int>(std::min<double>(std::max(1, rows), max_rows)));
    a_ = Buffer<float>(static_cast<std::size_t>(m_) * k_, MemCategory::Workspace);
    b_ = Buffer<float>(static_cast<std::size_t>(k_) * n_, MemCategory::Workspace);
    c_ = Buffer<float>(static_cast<std::size_t>(m_) * n_, MemCategory::Workspace);
    for (Buffer<float>* x : {&a_, &b_, &c_}) kernels::fill(x->data(), x->size(), 0.01);
  }
  void run() {
    linalg::gemm<float>(linalg::Op::N, linalg::Op::N, m_, n_, k_, 1.0f, a_.data(), k_, b_.data(), n_, 0.0f, c_.data(),
                        n_);
    Kokkos::fence();
  }

 private:
  int m_ = 1, n_ = 1, k_ = 1;
  Buffer<float> a_, b_, c_;
};

/// Wall seconds of `fn` on the slowest rank of `world`, all ranks starting together.
template <class Fn>
double timed_on(const MpiComm& world, Fn&& fn) {
  sleeping_barrier(world);
  const double t0 = now_seconds();
  fn();
  return all_reduce_value(world, now_seconds() - t0, ReduceOp::Max);
}

}  // namespace

double measure_overlap(const Runtime& rt, Backend backend, const model::ModelDims& dims, int rows, int tp,
                       double gemm_flops) {
  const MpiComm& world = rt.world();
  if (world.size() < 2) return 1.0;
  auto comm = parallel::make_communicator(world, "cost_model_overlap", backend);
  // One block's parameters gathered (12 d_model^2 / tp elements), what FSDP moves per unit,
  // between 256 KiB and 16 MiB per rank: a large model's block would take seconds here.
  const double block = 12.0 * dims.d_model * dims.d_model / std::max(1, tp);
  const std::size_t count =
      std::clamp<std::size_t>(static_cast<std::size_t>(block / world.size()), std::size_t{1} << 16, std::size_t{1} << 22);
  Buffer<float> gathered(count * world.size(), MemCategory::Workspace);
  kernels::fill(gathered.data(), gathered.size(), 0.5);
  const float* mine = gathered.data() + count * world.rank();
  // One linear layer runs between two polls (~50 ms at most for a large model).
  ModelLinear linear(dims, rows, tp, gemm_flops, 0.05);
  const auto timed = [&](auto&& fn) { return timed_on(world, fn); };
  const auto gather = [&] { comm->all_gather_async(mine, gathered.data(), count, DType::F32).wait(); };
  linear.run();
  gather();  // warm-up: connections, first-touch
  const double t_one = timed([&] { for (int i = 0; i < 2; ++i) linear.run(); }) / 2;
  std::vector<double> hidden;
  for (int rep = 0; rep < 3; ++rep) {
    const double t_comm = timed(gather);
    const int gemms = static_cast<int>(std::clamp(std::ceil(t_comm / std::max(t_one, 1e-7)), 1.0, 200.0));
    const double t_gemm = timed([&] { for (int i = 0; i < gemms; ++i) linear.run(); });
    const double t_both = timed([&] {
      Work w = comm->all_gather_async(mine, gathered.data(), count, DType::F32);
      for (int i = 0; i < gemms; ++i) {
        linear.run();
        comm->progress();
      }
      w.wait();
    });
    hidden.push_back(std::clamp((t_comm + t_gemm - t_both) / std::max(1e-9, std::min(t_comm, t_gemm)), 0.0, 1.0));
  }
  std::sort(hidden.begin(), hidden.end());
  return hidden[1];
}

double measure_sync_cost(const Runtime& rt, Backend backend, const model::ModelDims& dims, int rows, int group,
                         double gemm_flops) {
  const MpiComm& world = rt.world();
  if (group < 2 || world.size() % group != 0) return 0.0;
  // Groups of `group` consecutive ranks: where the mesh puts its tp groups (tp fastest-varying).
  const MpiComm sub = world.split(world.rank() / group, world.rank());
  auto comm = parallel::make_communicator(sub, "cost_model_sync", backend);
  // What a tensor-parallel all-reduce carries (one micro-batch's activations, rows x d_model),
  // capped at 4 Mi elements, and what runs between two of them: half a block's forward, about
  // two of its linear layers (each at most ~10 ms here: 10 rounds stay quick).
  const std::size_t count = std::clamp<std::size_t>(static_cast<std::size_t>(std::max(1, rows)) * std::max(1, dims.d_model),
                                                    1, std::size_t{1} << 22);
  Buffer<float> act(count, MemCategory::Workspace);
  kernels::fill(act.data(), count, 0.5);
  ModelLinear linear(dims, rows, group, gemm_flops, 0.01);
  constexpr int kRounds = 10;
  const auto compute = [&] { linear.run(); linear.run(); };
  const auto reduce = [&] { comm->all_reduce(act.data(), act.data(), count, DType::F32, ReduceOp::Sum); };
  compute();
  reduce();  // warm-up: connections, first-touch
  std::vector<double> extra;
  for (int rep = 0; rep < 3; ++rep) {
    const double t_compute = timed_on(world, [&] { for (int i = 0; i < kRounds; ++i) compute(); });
    const double t_reduce = timed_on(world, [&] { for (int i = 0; i < kRounds; ++i) reduce(); });
    const double t_both = timed_on(world, [&] {
      for (int i = 0; i < kRounds; ++i) {
        compute();
        reduce();
      }
    });
    extra.push_back(std::max(0.0, (t_both - t_compute - t_reduce) / kRounds));
  }
  std::sort(extra.begin(), extra.end());
  return extra[1];
}

double measure_model_gemm_flops(const model::ModelDims& d, int micro_batch, int seq_len, int tp, bool bf16,
                                double max_flop) {
  double flop = 0;
  const std::vector<GemmCall> calls = model_gemms(d, micro_batch, seq_len, tp, flop);
  if (flop / std::max(1, d.n_layers) > max_flop) return 0;
  const double t = bf16 ? time_gemms<meshtrain::bf16>(calls) : time_gemms<float>(calls);
  return t > 0 ? flop / t : 0;
}

CostModelInputs cost_model_inputs(const PlanTarget& target, const BatchSpec& batch, Backend backend, const Runtime& rt,
                                  bool bf16, bool measure_here, const model::ModelDims* dims, int tp) {
  CostModelInputs c;
  const NodeShare ns = node_share(rt);
  // Measure on the measuring ranks only (the others wait in the reduction).
  const auto slowest_rate = [&](auto&& measure) { return step_value(rt, ns.measures ? measure() : 0.0, ReduceOp::Min, ns); };
  const auto slowest_time = [&](double v) { return step_value(rt, v, ReduceOp::Max, ns); };
  if (target.gemm_tflops > 0) {
    c.gemm_flops = target.gemm_tflops * 1e12;
    c.gemm_source = "plan.gemm_tflops";
  } else {
    c.gemm_flops = slowest_rate([&] { return linalg::measure_gemm_flops(1024, 0.3, bf16); });
    c.gemm_source = strprintf("measured here, %s GEMM 1024^3, %s", bf16 ? "bf16" : "fp32",
                              ns.share < 1 ? strprintf("one rank per core, x %.2f time share (cores oversubscribed)", ns.share).c_str()
                                          : "slowest rank");
    // Timing this model's own GEMM shapes (3 passes over one micro-step) is worth it only
    // when it takes seconds: `plan` must stay quick for big models and loaded machines.
    double micro_flop = 0;
    if (dims != nullptr)
      micro_flop = 3.0 * dims->flops_per_token_forward(batch.seq_len) * batch.micro_batch *
                   batch.seq_len / std::max(1, tp);
    if (measure_here && dims != nullptr && 3.0 * micro_flop / (c.gemm_flops / ns.share) < 5.0) {
      // Every (measuring) rank at once, as in training; the slowest rank bounds the step. A
      // model too large to time here reports 0 on all ranks alike.
      c.model_gemm_flops = slowest_rate(
          [&] { return measure_model_gemm_flops(*dims, batch.micro_batch, batch.seq_len, tp, bf16); });
      if (c.model_gemm_flops > 0)
        c.gemm_source += strprintf("; this model's GEMMs (micro-batch %d x %d rows): %.1f GFLOP/s",
                                   batch.micro_batch, batch.seq_len, c.model_gemm_flops / 1e9);
    }
    if (measure_here && dims != nullptr) {
      const std::size_t n = std::size_t{1} << 21;  // a few ms per kernel
      ElementRates er;
      if (ns.measures)
        er = bf16 ? measure_element_rates<meshtrain::bf16>(dims->family, n) : measure_element_rates<float>(dims->family, n);
      c.adamw_s_per_elem = slowest_time(er.adamw);
      c.activation_s_per_elem = slowest_time(er.activation);
    }
  }
  // The all-reduce algorithm of the communicator the planned run uses: MPI (host builds,
  // or parallel.backend=mpi) unless a GPU target is planned (plan.gemm_tflops: NCCL rings).
  c.mpi_collectives = backend == Backend::Mpi || (backend == Backend::Auto && kDeviceIsHost && target.gemm_tflops <= 0);
  c.mpi_all_reduce = mpi_all_reduce_algorithm();
  if (target.mem_gbps > 0) {
    c.copy_bytes = target.mem_gbps * 1e9;
  } else {
    c.copy_bytes = slowest_rate([&] { return linalg::measure_copy_bandwidth(64.0 * 1024 * 1024, 0.2); });
  }
  if (target.has_bus()) {
    c.intra_bus_bytes = target.intra_bus_gbps * 1e9;
    c.inter_bus_bytes = target.inter_bus_gbps * 1e9;
    c.bus_source = "plan.bus_gbps";
  } else if (measure_here && rt.topology().world_size > 1) {
    auto comm = parallel::make_communicator(rt.world(), "cost_model", backend);
    const CollectiveResult big = bench_collective(*comm, CollectiveKind::AllGather, 16u << 20, DType::F32, 1, 3);
    const CollectiveResult small = bench_collective(*comm, CollectiveKind::AllReduce, 64, DType::F32, 2, 20);
    c.intra_bus_bytes = c.inter_bus_bytes = big.busbw;
    // A small all-reduce is a ring of 2(n-1) latency-bound steps: alpha is one step.
    c.latency_s = small.time_max / (2.0 * (rt.topology().world_size - 1));
    c.bus_source = strprintf("measured here: all_gather 16 MiB bus bandwidth over %d ranks, all_reduce latency",
                             rt.topology().world_size);
  } else {
    c.bus_source = "defaults (1 rank: nothing to measure; set plan.bus_gbps for a cluster)";
  }
  if (c.mpi_collectives && measure_here && rt.topology().world_size > 1 && dims != nullptr) {
    // Sized by this machine's GEMM rate: a planned target's rate says nothing about it.
    const double local_rate = target.gemm_tflops > 0 ? 1e11 : c.gemm_flops;
    c.overlap = measure_overlap(rt, backend, *dims, std::max(1, batch.micro_batch) * batch.seq_len, tp, local_rate);
    c.overlap_source = "measured here: an all-gather under GEMMs";
  } else if (c.mpi_collectives) {
    c.overlap_source = "assumed: not measured on this job's ranks";
  }
  // The smallest node's size: the same on every rank (the measurement is collective, and
  // nodes may be uneven), and what a tp group must fit in.
  const int local = rt.topology().min_ranks_per_node;
  if (kDeviceIsHost && measure_here && dims != nullptr && local > 1) {
    // Every group size a tp group can take on these nodes (powers of two dividing a node).
    const double local_rate = target.gemm_tflops > 0 ? 1e11 : c.gemm_flops;
    const int rows = std::max(1, batch.micro_batch) * batch.seq_len;
    c.sync_s.assign(static_cast<std::size_t>(local) + 1, 0.0);
    std::string sizes;
    for (int g = 2; g <= local && local % g == 0; g *= 2) {
      c.sync_s[g] = measure_sync_cost(rt, backend, *dims, rows, g, local_rate);
      sizes += strprintf("%s%d ranks %.2f ms", sizes.empty() ? "" : ", ", g, c.sync_s[g] * 1e3);
    }
    c.sync_source = "measured here (blocking all-reduce between GEMMs, beyond its transfer): " + sizes;
  }
  return c;
}

GroupLink group_link(int n, int stride, int ranks_per_node, const CostModelInputs& c) {
  GroupLink g;
  g.ranks = n;
  const int rpn = std::max(1, ranks_per_node);
  const long span = static_cast<long>(n) * stride;  // consecutive ranks one group's members lie in
  // Groups are laid out at multiples of their span, so they stay inside nodes iff the span
  // divides the node.
  g.crosses_nodes = n > 1 && (span > rpn || rpn % span != 0);
  g.members_per_node = g.crosses_nodes ? std::max(1, std::min(n, rpn / std::max(1, stride))) : n;
  // Across nodes every member brings its own network link (inter_bus_bytes is one rank's
  // share of the network): a node's members import the group's data through members_per_node
  // links and spread it over the node's fabric (NCCL's rings over all of a node's NICs), so
  // the ring's bus bandwidth is members x network, capped by the node's own fabric.
  g.bus_bytes = g.crosses_nodes ? std::min(c.intra_bus_bytes, g.members_per_node * c.inter_bus_bytes) : c.intra_bus_bytes;
  return g;
}

double collective_seconds(const GroupLink& g, int collectives, double bus_volume, Collective kind,
                          const CostModelInputs& c) {
  if (g.ranks <= 1 || (collectives == 0 && bus_volume == 0)) return 0;
  const bool all_reduce = kind == Collective::AllReduce;
  const bool ring_all_reduce = c.mpi_all_reduce == MpiAllReduce::Ring;
  if (c.mpi_collectives && all_reduce && c.mpi_all_reduce == MpiAllReduce::HalvingDoubling) {
    // Rabenseifner (libnbc's redscat_allgather): the largest power of two p' <= n ranks
    // exchange 1/2, 1/4, ... of the buffer with partners 1, 2, 4, ... group ranks away (the
    // reduce-scatter), then the same exchanges in reverse (the all-gather), both directions
    // at once. Consecutive group ranks share a node first, so the exchanges with partners at
    // least members_per_node away cross nodes, where every member of the node exchanges at
    // once: each at one rank's network share. The n - p' extra ranks first fold into a
    // neighbour (half the buffer each way, then half back) and get the whole result back at
    // the end. The bus bandwidths are what `bench comm` reports for a 2-rank all-reduce,
    // itself one exchange of half the buffer each way: busbw is the exchange rate.
    const int n = g.ranks;
    const int members = g.crosses_nodes ? std::max(1, g.members_per_node) : n;
    const int steps = static_cast<int>(std::floor(std::log2(static_cast<double>(n))));
    const int extra = n - (1 << steps);
    const double buffer = bus_volume * n / (2.0 * (n - 1));
    double seconds = 0;
    for (int k = 0; k < steps; ++k) {
      const double rate = (1 << k) >= members ? c.inter_bus_bytes : c.intra_bus_bytes;
      seconds += 2.0 * buffer / static_cast<double>(2 << k) / rate;
    }
    if (extra > 0) seconds += 2.0 * buffer / (members >= 2 ? c.intra_bus_bytes : c.inter_bus_bytes);
    return collectives * (2 * steps + (extra > 0 ? 3 : 0)) * c.latency_s + seconds;
  }
  if (c.mpi_collectives && kind != Collective::AllGather && !(all_reduce && ring_all_reduce)) {
    // libnbc's binomial reduce to rank 0 over the group's members (consecutive group ranks
    // share a node first): the first log2(members per node) hops stay inside a node, the
    // rest cross nodes, and every hop carries the whole buffer. Then either the binomial
    // broadcast back (all-reduce: the same hops again) or rank 0 sends every other member
    // its block (reduce-scatter). A hop is one flow in one direction; a user-chosen binomial
    // all-reduce is timed the same way. Inside a node a hop moves at 2 x busbw, the factor
    // the one-host sweeps were checked with (`plan` measures the bus bandwidth there with an
    // all-gather). Across nodes the bus bandwidth is one rank's share of
    // its node's network (`bench comm`'s 2-rank all-reduces with every rank of a node in
    // one: each rank's flow at busbw). The node's groups of this kind hop at once (the other
    // mesh dimension inside the node keeps them in step), so a hop gets the node's network
    // split between them: members_per_node x busbw, the rings' rate (group_link).
    const int n = g.ranks;
    const int rounds = static_cast<int>(std::ceil(std::log2(static_cast<double>(n))));
    const int members = g.crosses_nodes ? std::max(1, g.members_per_node) : n;
    const int intra_rounds = g.crosses_nodes ? static_cast<int>(std::floor(std::log2(static_cast<double>(members)))) : rounds;
    const int inter_rounds = rounds - intra_rounds;
    const double hop_intra = 2.0 * c.intra_bus_bytes, hop_inter = g.crosses_nodes ? g.bus_bytes : hop_intra;
    const double buffer = bus_volume * n / ((all_reduce ? 2.0 : 1.0) * (n - 1));  // all ranks' data
    const double tree = buffer * (intra_rounds / hop_intra + inter_rounds / hop_inter);
    if (all_reduce) return collectives * 2.0 * rounds * c.latency_s + 2.0 * tree;
    const double block = buffer / n;
    const double scatter = block * ((members - 1) / hop_intra + (n - members) / hop_inter);
    return collectives * (rounds + n - 1) * c.latency_s + tree + scatter;
  }
  // A ring collective over n ranks takes n-1 steps (all-gather, reduce-scatter) or 2(n-1)
  // (all-reduce), each paying the per-step latency; the bytes move at the bus bandwidth.
  const double steps = (all_reduce ? 2.0 : 1.0) * (g.ranks - 1);
  return collectives * steps * c.latency_s + bus_volume / g.bus_bytes;
}

std::string all_reduce_description(const CostModelInputs& c) {
  if (!c.mpi_collectives) return "a ring (NCCL)";
  return std::string(c.mpi_all_reduce == MpiAllReduce::HalvingDoubling ? "" : "a ") + describe(c.mpi_all_reduce) + " (MPI)";
}

double document_attention_fraction(int seq_len, double document_tokens, int rows) {
  const int n = static_cast<int>(std::lround(document_tokens));
  if (n <= 0 || n >= seq_len || rows >= seq_len || rows <= 0) return 1.0;
  double computed = 0, full = 0;
  for (int i0 = 0; i0 < seq_len; i0 += rows) {
    const int i1 = std::min(seq_len, i0 + rows);
    computed += static_cast<double>(i1 - i0) * (i1 - i0 / n * n);  // keys [doc_start(i0), i1)
    full += static_cast<double>(i1 - i0) * i1;
  }
  return computed / full;
}

StepPrediction predict_step(const model::ModelDims& d, const parallel::PlanInput& in, const parallel::StrategyPlan& p,
                            const CostModelInputs& c) {
  StepPrediction r;
  if (!p.valid) return r;
  const int dp = p.mesh.dp(), tp = p.mesh.tp;
  const double global = in.global_batch > 0 ? in.global_batch : static_cast<double>(p.micro_batch) * dp * p.grad_accum;
  const double tokens = global * in.seq_len;
  const double tokens_per_rank = tokens / dp;
  const double gemm_rate = c.model_gemm_flops > 0 ? c.model_gemm_flops : c.gemm_flops;
  // Forward GEMMs once, backward twice (input and weight gradients) plus the attention
  // scores it recomputes; activation checkpointing runs every block's forward again inside
  // backward.
  const double ac = p.activation_checkpointing ? 1.0 : 0.0;
  // Packed rows: only the fraction `fa` of the attention is computed (the attention term of
  // flops_per_token_forward is the part linear in seq_len).
  const double fa = document_attention_fraction(
      in.seq_len, in.document_tokens, in.attention_rows > 0 ? in.attention_rows : kernels::attention_block_rows(in.seq_len));
  const double attn_flops = d.flops_per_token_forward(in.seq_len) - d.flops_per_token_forward(0);
  const double forward_gemm_s =
      (d.flops_per_token_forward(in.seq_len) - (1.0 - fa) * attn_flops) * tokens_per_rank / tp / gemm_rate;
  r.gemm_s = (3.0 + ac) * forward_gemm_s + fa * recompute_flops_per_token(d, in.seq_len) * tokens_per_rank / tp / gemm_rate;
  // Memory-bound kernels: the activations every micro-step's forward writes (stored or
  // recomputed) streamed by kElementwisePasses passes over forward and backward (2 more
  // passes, a forward, with checkpointing), plus the optimizer's pass over the state.
  const double act_bytes = p.activation_traffic * p.grad_accum;
  // fp32 master elements this rank updates (a frozen LoRA base has none)
  const double state_elems = (p.memory.params - p.memory.frozen) / 4.0;
  r.optimizer_s = c.adamw_s_per_elem > 0 ? state_elems * c.adamw_s_per_elem : 7.0 * 4.0 * state_elems / c.copy_bytes;
  // MLP hidden elements per step (tokens x ffn_dim / tp per block), forward + backward (the
  // measured rate), plus the recomputed forward (about half of it) with checkpointing.
  const double hidden = tokens_per_rank * d.n_layers * (static_cast<double>(d.ffn_dim) / tp);
  r.activation_s = hidden * c.activation_s_per_elem * (1.0 + 0.5 * ac);  // 0 unmeasured: in the bytes term
  r.elementwise_s = r.optimizer_s + r.activation_s + (kElementwisePasses + 2.0 * ac) * act_bytes / 2.0 / c.copy_bytes;
  r.compute_s = r.gemm_s + r.elementwise_s;

  // Each mesh group's ring, on the links it crosses (tp fastest-varying: tp groups are
  // consecutive ranks, shard groups stride tp, replicate groups stride dp_shard x tp).
  const int rpn = std::max(1, in.ranks_per_node);
  const GroupLink tp_link = group_link(tp, 1, rpn, c);
  const GroupLink shard_link = p.comm.reduce_is_all_reduce ? group_link(dp, tp, rpn, c)
                                                           : group_link(p.mesh.dp_shard, tp, rpn, c);
  const GroupLink rep_link = group_link(p.mesh.dp_replicate, p.mesh.dp_shard * tp, rpn, c);
  r.shard_crosses_nodes = shard_link.crosses_nodes;
  r.shard_bus_bytes = shard_link.bus_bytes;
  r.replicate_bus_bytes = rep_link.bus_bytes;

  const auto& v = p.comm;
  const Collective reduce_kind = v.reduce_is_all_reduce ? Collective::AllReduce : Collective::ReduceScatter;
  const int n_gather_bwd = v.fsdp_gather > 0 ? static_cast<int>(std::lround(v.gather_collectives * v.fsdp_gather_backward / v.fsdp_gather)) : 0;
  const double gather_fwd_s = collective_seconds(shard_link, v.gather_collectives - n_gather_bwd,
                                                 v.fsdp_gather - v.fsdp_gather_backward, Collective::AllGather, c);
  const double gather_bwd_s = collective_seconds(shard_link, n_gather_bwd, v.fsdp_gather_backward, Collective::AllGather, c);
  const double reduce_s = collective_seconds(shard_link, v.reduce_collectives, v.fsdp_reduce, reduce_kind, c);
  r.replicate_comm_s = collective_seconds(rep_link, v.replicate_collectives, v.replicate, Collective::AllReduce, c);
  r.fsdp_comm_s = gather_fwd_s + gather_bwd_s + reduce_s;
  // Tensor-parallel all-reduces are blocking and sit between kernels: each also pays the
  // measured synchronisation cost of its group (ranks that share cores wait for a parked peer).
  r.tp_comm_s = collective_seconds(tp_link, v.tp_collectives, v.tp, Collective::AllReduce, c) +
                (tp > 1 ? v.tp_collectives * c.sync_seconds(tp) : 0.0);

  // Overlap: the gathers of forward hide behind forward compute, the re-gathers and
  // reductions of backward behind backward compute (the optimizer runs after both). What
  // cannot hide is the pipeline fill - the first gathers of each micro-step (the outer unit
  // and the first block) and the outer unit's reduction, which the embedding's backward
  // produces last - and whatever exceeds the compute. The replicate all-reduce runs after
  // backward (FsdpEngine::finish_step), so it is exposed entirely.
  const double fill_g = v.fill_gather > 0 ? collective_seconds(shard_link, p.grad_accum * 2, v.fill_gather, Collective::AllGather, c) : 0.0;
  const double fill_r = v.fill_reduce > 0 ? collective_seconds(shard_link, 1, v.fill_reduce, reduce_kind, c) : 0.0;
  const double overlappable = r.compute_s - r.optimizer_s;
  const double fwd_c = overlappable / (3.0 + ac), bwd_c = overlappable - fwd_c;
  if (in.prefetch > 0) {
    r.exposed_fsdp_s = std::min(r.fsdp_comm_s, fill_g + fill_r + std::max(0.0, gather_fwd_s - fill_g - fwd_c) +
                                                    std::max(0.0, gather_bwd_s + reduce_s - fill_r - bwd_c));
  } else {
    r.exposed_fsdp_s = r.fsdp_comm_s;
  }
  // Of what the schedule could hide, only the measured overlap fraction does hide.
  r.exposed_fsdp_s += (1.0 - std::clamp(c.overlap, 0.0, 1.0)) * (r.fsdp_comm_s - r.exposed_fsdp_s);
  r.step_seconds_no_overlap = r.compute_s + r.fsdp_comm_s + r.replicate_comm_s + r.tp_comm_s;
  r.step_seconds_overlap = r.compute_s + r.tp_comm_s + r.exposed_fsdp_s + r.replicate_comm_s;
  r.tokens_per_s = r.step_seconds_overlap > 0 ? tokens / r.step_seconds_overlap : 0;
  return r;
}

}  // namespace meshtrain::train
