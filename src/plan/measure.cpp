// The cost model's measurements (plan/measure.hpp): every function here times kernels on
// this rank or runs collectives over the job's world; the predictor (cost_model.cpp) only
// reads what they return.
#include "plan/measure.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <sched.h>
#include <string>
#include <thread>
#include <vector>

#include "comm/bench.hpp"
#include "comm/collectives.hpp"
#include "comm/mpi_communicator.hpp"
#include "core/check.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/memory.hpp"
#include "core/timer.hpp"
#include "kernels/adamw.hpp"
#include "kernels/attention.hpp"
#include "kernels/elementwise.hpp"
#include "linalg/gemm.hpp"
#include "linalg/peak.hpp"
#include "model/layout.hpp"
#include "model/step_flops.hpp"
#include "model/transformer.hpp"
#include "parallel/device_mesh.hpp"

namespace meshtrain::plan {
namespace {

/// One GEMM call of a micro-step: C (m, n) = op(A) op(B), `batch_count` times (strided), repeated
/// `count` times per micro-step.
struct GemmCall {
  linalg::Op a, b;
  int m, n, k, batch_count, count;
  float beta = 0.0f;  ///< 1 for weight gradients, which the model accumulates (dW += X^T dY)
};

/// The GEMMs of one micro-step of N = micro_batch x seq_len rows, as the model issues them:
/// per block the four linear layers (forward X W; backward dW += X^T dY and dX = dY W^T) and
/// causal attention in the kernels' row blocks (scores, weighted sum; scores again, dP, dQ,
/// dK, dV), and the LM head (logits, dW, dX) in the model's row chunks. Returns the list and, in `flop`, the FLOPs the
/// step is credited with (3 x ModelDims::flops_per_token_forward x N plus the recomputed
/// scores: attention counted as full, not causal-halved) - so FLOP / time is the rate that
/// turns that count into this time.
std::vector<GemmCall> model_gemms(const model::ModelDims& d, int B, int seq, int tp, bool with_attention, double& flop) {
  using linalg::Op;
  const int N = B * seq, C = d.d_model, hd = d.head_dim;
  const int Hq = d.n_heads / tp, kv = d.n_kv_heads * hd / std::max(1, std::min(tp, d.n_kv_heads));
  const int Fl = d.ffn_dim / tp, Vl = static_cast<int>(d.vocab / tp), layers = d.n_layers;
  const int qkv = Hq * hd + 2 * kv;
  const int up = d.family == model::Family::Gpt2 ? Fl : 2 * Fl;  // llama: gate and up
  std::vector<GemmCall> g;
  const auto linear = [&](int in, int out) {  // Y (N, out) = X (N, in) W (in, out)
    g.push_back({Op::N, Op::N, N, out, in, 1, layers});
    g.push_back({Op::T, Op::N, in, out, N, 1, layers, 1.0f});
    g.push_back({Op::N, Op::T, N, in, out, 1, layers});
  };
  linear(C, qkv);
  linear(Hq * hd, C);
  linear(C, up);
  linear(Fl, C);
  const int rb = kernels::attention_block_rows(seq);
  for (int i0 = 0; with_attention && i0 < seq; i0 += rb) {
    const int i1 = std::min(seq, i0 + rb), r = i1 - i0;
    g.push_back({Op::N, Op::T, r, i1, hd, B, layers * Hq});  // scores
    g.push_back({Op::N, Op::N, r, hd, i1, B, layers * Hq});  // out = P V
    g.push_back({Op::N, Op::T, r, i1, hd, B, layers * Hq});  // scores again (backward recomputes P)
    g.push_back({Op::N, Op::T, r, i1, hd, B, layers * Hq});  // dP
    g.push_back({Op::N, Op::N, r, hd, i1, B, layers * Hq});  // dQ
    g.push_back({Op::T, Op::N, i1, hd, r, B, layers * Hq});  // dK
    g.push_back({Op::T, Op::N, i1, hd, r, B, layers * Hq});  // dV
  }
  const int chunk = static_cast<int>(std::min<std::int64_t>(N, std::max<std::int64_t>(1, (std::int64_t{1} << 24) / Vl)));
  for (int r0 = 0; r0 < N; r0 += chunk) {
    const int nc = std::min(chunk, N - r0);
    g.push_back({Op::N, Op::T, nc, Vl, C, 1, 1});
    g.push_back({Op::T, Op::N, Vl, C, nc, 1, 1, 1.0f});
    g.push_back({Op::N, Op::N, nc, C, Vl, 1, 1});
  }
  flop = (3.0 * d.flops_per_token_forward(seq) + recompute_flops_per_token(d, seq)) * N / tp;
  if (!with_attention) flop -= model::train_step_flops(d, seq, false).attention * N / tp;
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
    na = std::max(na, static_cast<std::size_t>(c.m) * c.k * c.batch_count);
    nb = std::max(nb, static_cast<std::size_t>(c.k) * c.n * c.batch_count);
    nc = std::max(nc, static_cast<std::size_t>(c.m) * c.n * c.batch_count);
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
        if (g.batch_count == 1)
          linalg::gemm<T>(g.a, g.b, g.m, g.n, g.k, 1.0f, a, lda, b, ldb, g.beta, c, g.n);
        else
          linalg::gemm_strided_batched<T>(g.a, g.b, g.m, g.n, g.k, 1.0f, a, lda,
                                          static_cast<std::int64_t>(g.m) * g.k, b, ldb,
                                          static_cast<std::int64_t>(g.k) * g.n, g.beta, c, g.n,
                                          static_cast<std::int64_t>(g.m) * g.n, g.batch_count);
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

/// Seconds of `fn` (which queues kernels), the best of 3 after a warm-up call, each fenced.
template <class Fn>
double best_of_3(Fn&& fn) {
  fn();
  Kokkos::fence();
  double best = 1e300;
  for (int rep = 0; rep < 3; ++rep) {
    const double t0 = now_seconds();
    fn();
    Kokkos::fence();
    best = std::min(best, now_seconds() - t0);
  }
  return best;
}

/// Seconds of one micro-step's attention, forward and backward of every block, as the kernels
/// run it on `path` (the fused cuDNN kernel where the build has it): one block's pair timed
/// (best_of_3), times the blocks. Q/K/V are read in place from one qkv buffer by strides, as
/// the blocks do; tp rank 0's heads.
template <class T>
double time_attention(const model::ModelDims& d, int B, int seq, int tp, kernels::AttentionPath path) {
  const kernels::AttentionShape as = model::attention_shape(d, model::tp_dims(d, tp, 0), model::BatchShape{B, seq}, path);
  const std::int64_t N = static_cast<std::int64_t>(B) * seq, q_cols = std::int64_t{as.Hq} * as.hd,
                     kv_cols = std::int64_t{as.Hkv} * as.hd, W = q_cols + 2 * kv_cols;
  Buffer<T> qkv(static_cast<std::size_t>(N * W), MemCategory::Workspace),
      dqkv(static_cast<std::size_t>(N * W), MemCategory::Workspace),
      out(static_cast<std::size_t>(N * q_cols), MemCategory::Workspace),
      dout(static_cast<std::size_t>(N * q_cols), MemCategory::Workspace),
      work(static_cast<std::size_t>(kernels::attention_workspace_elems(as)), MemCategory::Workspace);
  Buffer<acc_t<T>> stats(static_cast<std::size_t>(N * as.Hq * 2), MemCategory::Workspace);
  kernels::fill(qkv.data(), qkv.size(), 0.01);
  kernels::fill(dout.data(), dout.size(), 0.01);
  const int w = static_cast<int>(W), oc = static_cast<int>(q_cols);
  T* q = qkv.data();
  T* k = q + q_cols;
  T* v = k + kv_cols;
  return d.n_layers * best_of_3([&] {
    kernels::attention_forward(as, q, w, k, w, v, w, out.data(), oc, stats.data(), work.data());
    kernels::attention_backward(as, q, w, k, w, v, w, out.data(), stats.data(), dout.data(), oc, dqkv.data(),
                                dqkv.data() + q_cols, dqkv.data() + q_cols + kv_cols, work.data());
  });
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
  {
    Buffer<float> p(n, MemCategory::Workspace), g(n, MemCategory::Workspace), m(n, MemCategory::Workspace),
        v(n, MemCategory::Workspace);
    for (Buffer<float>* b : {&p, &g, &m, &v}) kernels::fill(b->data(), n, 0.01);
    kernels::AdamWParams ap;
    ap.weight_decay = 0.1f;
    r.adamw = best_of_3([&] { kernels::adamw_step(p.data(), g.data(), m.data(), v.data(), n, ap); }) / n;
  }
  // Activation: n elements of the MLP hidden (rows x cols); SwiGLU reads gate and up.
  Buffer<T> a(2 * n, MemCategory::Workspace), b(2 * n, MemCategory::Workspace), c(2 * n, MemCategory::Workspace);
  kernels::fill(a.data(), 2 * n, 0.5);
  kernels::fill(b.data(), 2 * n, 0.25);
  const int cols = 1024, rows = static_cast<int>(n / cols);
  if (family == model::Family::Gpt2) {
    r.activation = best_of_3([&] {
      kernels::gelu_forward(a.data(), c.data(), n);
      kernels::gelu_backward(a.data(), b.data(), c.data(), n);
    }) / n;
  } else {
    r.activation = best_of_3([&] {
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

double measure_attention_flops(const model::ModelDims& d, int micro_batch, int seq_len, int tp, bool bf16,
                               kernels::AttentionPath path) {
  const double flop = model::train_step_flops(d, seq_len, false).attention * micro_batch * seq_len / tp;
  const double t = bf16 ? time_attention<meshtrain::bf16>(d, micro_batch, seq_len, tp, path)
                        : time_attention<float>(d, micro_batch, seq_len, tp, path);
  return t > 0 ? flop / t : 0;
}

double measure_model_gemm_flops(const model::ModelDims& d, int micro_batch, int seq_len, int tp, bool bf16,
                                double max_flop, bool with_attention) {
  double flop = 0;
  const std::vector<GemmCall> calls = model_gemms(d, micro_batch, seq_len, tp, with_attention, flop);
  if (flop / std::max(1, d.n_layers) > max_flop) return 0;
  const double t = bf16 ? time_gemms<meshtrain::bf16>(calls) : time_gemms<float>(calls);
  return t > 0 ? flop / t : 0;
}

MeasureRequest measure_request(const RunSpec& spec) {
  MeasureRequest r;
  r.target = spec.plan_target;
  r.batch = spec.batch;
  r.backend = spec.parallel.backend;
  r.bf16 = spec.train.bf16();
  r.model = spec.dims;
  r.tp = spec.parallel.mesh_request.tp > 0 ? spec.parallel.mesh_request.tp : 1;
  r.attention = spec.train.attention == AttentionChoice::Cudnn ? kernels::AttentionPath::Cudnn
                                                               : kernels::AttentionPath::Kokkos;
  return r;
}

CostModelInputs measure_cost_inputs(const MeasureRequest& req, const Runtime& rt) {
  const PlanTarget& target = req.target;
  const BatchSpec& batch = req.batch;
  const Backend backend = req.backend;
  const bool bf16 = req.bf16, measure_here = req.on_this_job;
  const model::ModelDims* dims = req.model ? &*req.model : nullptr;
  const int tp = req.tp;
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
      // Attention run as a fused kernel of its own (cuDNN) is a kernel class of its own: timed
      // as the build runs it, and the model's GEMM rate is then that of the other GEMMs.
      const bool fused = kernels::attention_is_fused(req.attention, bf16);
      c.model_gemm_flops = slowest_rate(
          [&] { return measure_model_gemm_flops(*dims, batch.micro_batch, batch.seq_len, tp, bf16, 4e10, !fused); });
      if (c.model_gemm_flops > 0) {
        c.gemm_source += strprintf("; this model's %s (micro-batch %d x %d rows): %.1f GFLOP/s",
                                   fused ? "GEMMs other than attention" : "GEMMs", batch.micro_batch, batch.seq_len,
                                   c.model_gemm_flops / 1e9);
        if (fused) {
          c.attention_flops = slowest_rate([&] {
            return measure_attention_flops(*dims, batch.micro_batch, batch.seq_len, tp, bf16, req.attention);
          });
          c.gemm_source += strprintf("; attention (%s, fused): %.1f GFLOP/s", kernels::fused_attention_version().c_str(),
                                     c.attention_flops / 1e9);
        }
      }
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
  // The operands above (GEMMs of the model's shapes, copy buffers: hundreds of MiB) are back
  // in the pool's cache, which keeps blocks by exact size: no step would take them, and they
  // would stay reserved through the whole run (and in its peak_mem_bytes).
  MemoryPool::instance().trim();
  return c;
}

}  // namespace meshtrain::plan
