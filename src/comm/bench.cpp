#include "comm/bench.hpp"

#include <algorithm>
#include <vector>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/timer.hpp"

namespace meshtrain {
namespace {

/// Value of element i contributed by rank r: small integers whose sums over ranks stay exact
/// (fp32: up to 2^24; bf16 uses 1..2 so sums of up to 128 ranks are exact in 8 mantissa bits).
bool g_bf16_values = false;
double value(int r, std::size_t i) {
  if (g_bf16_values) return static_cast<double>((r + i) % 2 + 1);
  return static_cast<double>((r + 1) * ((i % 7) + 1) % 32);
}

template <class T>
void fill_host(std::vector<T>& v, int r, std::size_t offset) {
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<T>(static_cast<float>(value(r, offset + i)));
}

template <class T>
CollectiveResult run(Communicator& comm, CollectiveKind kind, std::size_t bytes, int warmup, int iters,
                     Communicator* in_step) {
  const int n = comm.size(), r = comm.rank();
  const DType dt = DTypeOf<T>::value;
  g_bf16_values = dt == DType::BF16;
  // Element counts: all_gather/reduce_scatter move `bytes` in total, so per-rank blocks.
  const std::size_t total = std::max<std::size_t>(n, bytes / sizeof(T) / n * n);
  const std::size_t block = total / n;
  const std::size_t send_n = kind == CollectiveKind::AllGather ? block : total;
  const std::size_t recv_n = kind == CollectiveKind::ReduceScatter ? block : total;
  Buffer<T> send(send_n, MemCategory::CommBuffers), recv(recv_n, MemCategory::CommBuffers);
  std::vector<T> host(send_n);
  fill_host(host, r, kind == CollectiveKind::AllGather ? r * block : 0);
  Kokkos::deep_copy(send.view(), UView<T, HostMem>(host.data(), host.size()));
  // A broadcast is in place: the root's buffer holds the data once, before the first
  // operation (a broadcast leaves the root's buffer as it was, and overwrites the others'),
  // so the timed loop runs the collective alone -- not a full-buffer device copy beside it.
  if (kind == CollectiveKind::Broadcast) Kokkos::deep_copy(recv.view(), send.view());

  const auto launch = [&] {
    switch (kind) {
      case CollectiveKind::AllGather: return comm.all_gather_async(send.data(), recv.data(), block, dt);
      case CollectiveKind::ReduceScatter:
        return comm.reduce_scatter_async(send.data(), recv.data(), block, dt, ReduceOp::Sum);
      case CollectiveKind::AllReduce: return comm.all_reduce_async(send.data(), recv.data(), total, dt, ReduceOp::Sum);
      case CollectiveKind::Broadcast: return comm.broadcast_async(recv.data(), total, dt, 0);
    }
    return Work();
  };
  const auto one = [&] {
    if (in_step != nullptr) in_step->barrier();
    launch().wait();
  };
  for (int i = 0; i < warmup; ++i) one();
  (in_step != nullptr ? *in_step : comm).barrier();
  Kokkos::fence();
  const double t0 = now_seconds();
  for (int i = 0; i < iters; ++i) one();
  Kokkos::fence();
  const double t = (now_seconds() - t0) / std::max(1, iters);

  // Check the last result against the expected values.
  std::vector<T> out(recv_n);
  Kokkos::deep_copy(UView<T, HostMem>(out.data(), out.size()), recv.view());
  long wrong = 0;
  for (std::size_t i = 0; i < recv_n; ++i) {
    double expect = 0;
    switch (kind) {
      case CollectiveKind::AllGather: expect = value(static_cast<int>(i / block), i); break;
      case CollectiveKind::ReduceScatter:
        for (int q = 0; q < n; ++q) expect += value(q, r * block + i);
        break;
      case CollectiveKind::AllReduce:
        for (int q = 0; q < n; ++q) expect += value(q, i);
        break;
      case CollectiveKind::Broadcast: expect = value(0, i); break;
    }
    if (static_cast<double>(static_cast<float>(out[i])) != expect) ++wrong;
  }
  double times[3] = {t, t, t};
  double mn = 0, mx = 0, sum = 0;
  Buffer<double> dv(1, MemCategory::Workspace);
  // Reductions of the timing over the same communicator (host values via a device scalar).
  const auto reduce = [&](double v, ReduceOp op) {
    Kokkos::deep_copy(dv.view(), v);
    comm.all_reduce(dv.data(), dv.data(), 1, DType::F64, op);
    double o = 0;
    Kokkos::deep_copy(o, Kokkos::subview(dv.view(), 0));
    return o;
  };
  mn = reduce(times[0], ReduceOp::Min);
  mx = reduce(times[1], ReduceOp::Max);
  sum = reduce(times[2], ReduceOp::Sum);
  const double total_wrong = reduce(static_cast<double>(wrong), ReduceOp::Sum);

  CollectiveResult res;
  res.kind = kind;
  res.bytes = total * sizeof(T);
  res.ranks = n;
  res.time_min = mn;
  res.time_max = mx;
  res.time_avg = sum / n;
  res.algbw = res.bytes / mx;
  res.busbw = res.algbw * bus_factor(kind, n);
  res.wrong = static_cast<long>(total_wrong);
  return res;
}

}  // namespace

const char* collective_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::AllGather: return "all_gather";
    case CollectiveKind::ReduceScatter: return "reduce_scatter";
    case CollectiveKind::AllReduce: return "all_reduce";
    case CollectiveKind::Broadcast: return "broadcast";
  }
  return "?";
}

CollectiveKind parse_collective(const std::string& s) {
  if (s == "all_gather") return CollectiveKind::AllGather;
  if (s == "reduce_scatter") return CollectiveKind::ReduceScatter;
  if (s == "all_reduce") return CollectiveKind::AllReduce;
  if (s == "broadcast") return CollectiveKind::Broadcast;
  throw UserError("unknown collective '" + s + "'; use all_gather, reduce_scatter, all_reduce or broadcast");
}

double bus_factor(CollectiveKind k, int n) {
  switch (k) {
    case CollectiveKind::AllGather:
    case CollectiveKind::ReduceScatter: return n > 1 ? static_cast<double>(n - 1) / n : 0.0;
    case CollectiveKind::AllReduce: return n > 1 ? 2.0 * (n - 1) / n : 0.0;
    case CollectiveKind::Broadcast: return 1.0;
  }
  return 1.0;
}

CollectiveResult bench_collective(Communicator& comm, CollectiveKind kind, std::size_t bytes, DType dtype, int warmup,
                                  int iters, Communicator* in_step) {
  if (dtype == DType::BF16) return run<bf16>(comm, kind, bytes, warmup, iters, in_step);
  MESHTRAIN_REQUIRE(dtype == DType::F32, "the collective benchmark supports fp32 and bf16");
  return run<float>(comm, kind, bytes, warmup, iters, in_step);
}

}  // namespace meshtrain
