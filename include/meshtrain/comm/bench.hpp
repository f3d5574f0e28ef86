#pragma once
/// \brief Collective benchmark (as nccl-tests): time, algorithm bandwidth and bus bandwidth
/// of one collective at one size, min/avg/max across ranks, with the result data checked.
///
///   algbw = bytes / time, where bytes = the full buffer (all_gather: the gathered output;
///           reduce_scatter: the full input; all_reduce, broadcast: the buffer)
///   busbw = algbw * factor: all_gather, reduce_scatter (n-1)/n; all_reduce 2(n-1)/n;
///           broadcast 1 — the bandwidth each link must sustain (derivation in doc/perf.md).

#include <cstddef>
#include <string>

#include "comm/communicator.hpp"

namespace meshtrain {

enum class CollectiveKind { AllGather, ReduceScatter, AllReduce, Broadcast };
const char* collective_name(CollectiveKind k);
CollectiveKind parse_collective(const std::string& name);
/// Bus-bandwidth factor for n ranks.
double bus_factor(CollectiveKind k, int n);

struct CollectiveResult {
  CollectiveKind kind = CollectiveKind::AllGather;
  std::size_t bytes = 0;        ///< full buffer size (see above)
  int ranks = 1;
  double time_min = 0, time_avg = 0, time_max = 0;  ///< seconds per operation, across ranks (avg of iterations)
  double algbw = 0, busbw = 0;  ///< bytes/s, from the slowest rank's time
  long wrong = 0;               ///< elements with a wrong value, summed over ranks
};

/// Runs `warmup` + `iters` operations of `bytes` (fp32 or bf16 elements) and checks the
/// result of the last one. Collective over `comm`. With `in_step` (a communicator over all
/// ranks running the benchmark, `comm`'s group among several), every operation starts after
/// a barrier over it: the mesh's groups of one kind move their bytes at the same moment, as
/// in training where a tensor-parallel all-reduce between two reductions lines them up. The
/// time then includes the barrier.
CollectiveResult bench_collective(Communicator& comm, CollectiveKind kind, std::size_t bytes, DType dtype, int warmup,
                                  int iters, Communicator* in_step = nullptr);

}  // namespace meshtrain
