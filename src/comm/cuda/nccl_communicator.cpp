#include "comm/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <deque>
#include <vector>

#include "core/check.hpp"
#include "core/format.hpp"
#include "core/timer.hpp"

namespace meshtrain {
namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::BF16: return ncclBfloat16;
    case DType::F64: return ncclFloat64;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    case DType::U8: return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  return ncclSum;
}

}  // namespace

struct NcclCommunicator::Impl final : IntervalLedger::Clock {
  ncclComm_t comm = nullptr;
  cudaStream_t compute = nullptr;
  cudaStream_t comm_stream = nullptr;
  // Events are recycled, so that steady-state steps create none: ready/done events for
  // ordering (no timing), and (start, stop) pairs of timing events, each pair an interval of
  // the ledger -- a collective on the comm stream (busy) or the compute stream waiting for
  // one (exposed) --, returned to their pool once the ledger has read them.
  std::vector<cudaEvent_t> free_events;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> pairs;  // interval id -> its events
  std::vector<int> free_pairs;
  IntervalLedger ledger;

  cudaEvent_t event() {
    if (!free_events.empty()) {
      cudaEvent_t e = free_events.back();
      free_events.pop_back();
      return e;
    }
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }

  /// A free interval (its two timing events).
  int interval() {
    if (!free_pairs.empty()) {
      const int id = free_pairs.back();
      free_pairs.pop_back();
      return id;
    }
    cudaEvent_t a, b;
    CUDA_CHECK(cudaEventCreateWithFlags(&a, cudaEventDefault));
    CUDA_CHECK(cudaEventCreateWithFlags(&b, cudaEventDefault));
    pairs.emplace_back(a, b);
    return static_cast<int>(pairs.size()) - 1;
  }

  /// While the compute stream is captured into a CUDA graph (train/step_graph.hpp), nothing
  /// is timed and no event is queried: an event recorded during a capture marks a node of
  /// the graph, not work that will complete, and querying it is an error. A replayed step's
  /// communication is therefore not timed (the trainer reports it as not measured).
  bool capturing() const {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(compute, &status));
    return status != cudaStreamCaptureStatusNone;
  }

  // IntervalLedger::Clock
  bool done(int id) override {
    const cudaError_t q = cudaEventQuery(pairs[static_cast<std::size_t>(id)].second);
    if (q == cudaErrorNotReady) return false;
    CUDA_CHECK(q);
    return true;
  }
  double seconds(int id) override {
    float ms = 0;
    const auto& [a, b] = pairs[static_cast<std::size_t>(id)];
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    return 1e-3 * static_cast<double>(ms);
  }
  void recycle(int id) override { free_pairs.push_back(id); }

  /// Accounts every completed interval into comm_stats().device (per step tag); never blocks.
  double drain() { return capturing() ? 0.0 : ledger.drain(*this, comm_stats().device); }
};

namespace {
/// Work handle: `done` is recorded on the comm stream after the collective.
class NcclWork final : public WorkImpl {
 public:
  NcclWork(NcclCommunicator::Impl* impl, cudaEvent_t done, bool captured)
      : impl_(impl), done_(done), captured_(captured) {}
  ~NcclWork() override {
    if (done_) impl_->free_events.push_back(done_);
  }
  // A collective captured into a CUDA graph has nothing the host could query: its order is
  // the graph's.
  bool test() override { return captured_ || cudaEventQuery(done_) == cudaSuccess; }
  void wait() override {
    // Stream-ordered wait: later compute-stream kernels start after the collective; the
    // host does not block. The compute stream's idle time at this wait is the exposed
    // communication: timing events just before and just after it (both on the compute
    // stream) bracket exactly the time it stood still waiting.
    const bool timed = !captured_ && !impl_->capturing();
    int id = -1;
    if (timed) {
      id = impl_->interval();
      CUDA_CHECK(cudaEventRecord(impl_->pairs[static_cast<std::size_t>(id)].first, impl_->compute));
    }
    CUDA_CHECK(cudaStreamWaitEvent(impl_->compute, done_, 0));
    if (timed) {
      CUDA_CHECK(cudaEventRecord(impl_->pairs[static_cast<std::size_t>(id)].second, impl_->compute));
      impl_->ledger.add(id, IntervalLedger::Kind::Exposed, comm_stats().tag);
    }
  }

 private:
  NcclCommunicator::Impl* impl_;
  cudaEvent_t done_;
  bool captured_;
};
}  // namespace

NcclCommunicator::NcclCommunicator(const MpiComm& group, std::string name, void* compute_stream)
    : impl_(std::make_unique<Impl>()), name_(std::move(name)) {
  rank_ = group.rank();
  size_ = group.size();
  ncclUniqueId id;
  if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, group.get()));
  NCCL_CHECK(ncclCommInitRank(&impl_->comm, size_, id, rank_));
  impl_->compute = static_cast<cudaStream_t>(compute_stream);
  CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->comm_stream, cudaStreamNonBlocking));
}

NcclCommunicator::~NcclCommunicator() {
  if (!impl_) return;
  cudaStreamSynchronize(impl_->comm_stream);
  for (cudaEvent_t e : impl_->free_events) cudaEventDestroy(e);
  for (auto& [a, b] : impl_->pairs) {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  ncclCommDestroy(impl_->comm);
  cudaStreamDestroy(impl_->comm_stream);
}

template <class Launch>
static Work enqueue(NcclCommunicator::Impl* impl, std::size_t bytes, Launch launch) {
  const bool captured = impl->capturing();
  if (!captured) impl->drain();  // account finished intervals, recycle their events
  // 1) the comm stream waits for everything already queued on the compute stream (under a
  //    capture this forks the comm stream into the graph; its done event joins it back)
  cudaEvent_t ready = impl->event();
  CUDA_CHECK(cudaEventRecord(ready, impl->compute));
  CUDA_CHECK(cudaStreamWaitEvent(impl->comm_stream, ready, 0));
  impl->free_events.push_back(ready);  // safe to reuse: the wait captured its state
  // 2) the collective, bracketed by timing events (not under a capture)
  const int id = captured ? -1 : impl->interval();
  if (!captured) CUDA_CHECK(cudaEventRecord(impl->pairs[static_cast<std::size_t>(id)].first, impl->comm_stream));
  launch(impl->comm_stream);
  if (!captured) {
    CUDA_CHECK(cudaEventRecord(impl->pairs[static_cast<std::size_t>(id)].second, impl->comm_stream));
    impl->ledger.add(id, IntervalLedger::Kind::Busy, comm_stats().tag);
  }
  // 3) completion event for Work::wait
  cudaEvent_t done = impl->event();
  CUDA_CHECK(cudaEventRecord(done, impl->comm_stream));
  comm_stats().bytes += bytes;
  comm_stats().operations += 1;
  return Work(std::make_unique<NcclWork>(impl, done, captured));
}

Work NcclCommunicator::all_gather_async(const void* send, void* recv, std::size_t count,
                                        DType dtype) {
  return enqueue(impl_.get(), count * dtype_size(dtype) * size_, [&](cudaStream_t s) {
    NCCL_CHECK(ncclAllGather(send, recv, count, nccl_type(dtype), impl_->comm, s));
  });
}

Work NcclCommunicator::reduce_scatter_async(const void* send, void* recv, std::size_t count,
                                            DType dtype, ReduceOp op) {
  return enqueue(impl_.get(), count * dtype_size(dtype) * size_, [&](cudaStream_t s) {
    NCCL_CHECK(ncclReduceScatter(send, recv, count, nccl_type(dtype), nccl_op(op), impl_->comm, s));
  });
}

Work NcclCommunicator::all_reduce_async(const void* send, void* recv, std::size_t count,
                                        DType dtype, ReduceOp op) {
  return enqueue(impl_.get(), 2 * count * dtype_size(dtype), [&](cudaStream_t s) {
    NCCL_CHECK(ncclAllReduce(send, recv, count, nccl_type(dtype), nccl_op(op), impl_->comm, s));
  });
}

Work NcclCommunicator::broadcast_async(void* buffer, std::size_t count, DType dtype, int root) {
  return enqueue(impl_.get(), count * dtype_size(dtype), [&](cudaStream_t s) {
    NCCL_CHECK(ncclBroadcast(buffer, buffer, count, nccl_type(dtype), root, impl_->comm, s));
  });
}

void NcclCommunicator::barrier() {
  // NCCL has no barrier: a one-element all-reduce, then the host waits for it.
  float* flag = nullptr;
  CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&flag), sizeof(float), impl_->comm_stream));
  CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(float), impl_->comm_stream));
  NCCL_CHECK(ncclAllReduce(flag, flag, 1, ncclFloat32, ncclSum, impl_->comm, impl_->comm_stream));
  CUDA_CHECK(cudaFreeAsync(flag, impl_->comm_stream));
  const double t0 = now_seconds();
  CUDA_CHECK(cudaStreamSynchronize(impl_->comm_stream));
  comm_stats().exposed_seconds += now_seconds() - t0;
}

double NcclCommunicator::drain_busy_seconds() { return impl_->drain(); }

void NcclCommunicator::progress() { impl_->drain(); }

std::string nccl_version_string() {
  return strprintf("%d.%d.%d", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
}

}  // namespace meshtrain
