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

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t compute = nullptr;
  cudaStream_t comm_stream = nullptr;
  // Events are recycled, so that steady-state steps create none: ready/done events for
  // ordering (no timing), and (start, stop) pairs that time each collective on the comm
  // stream, returned to their pool once read.
  std::vector<cudaEvent_t> free_events;
  std::vector<cudaEvent_t> free_timed;
  std::deque<std::pair<cudaEvent_t, cudaEvent_t>> timing;  // pending pairs, in issue order

  cudaEvent_t event(bool timed) {
    std::vector<cudaEvent_t>& pool = timed ? free_timed : free_events;
    if (!pool.empty()) {
      cudaEvent_t e = pool.back();
      pool.pop_back();
      return e;
    }
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, timed ? cudaEventDefault : cudaEventDisableTiming));
    return e;
  }

  /// Adds the comm-stream time of every completed collective to comm_stats().busy_seconds
  /// and recycles its events; stops at the first pending one (never blocks).
  double drain() {
    double total = 0;
    while (!timing.empty()) {
      auto [t0, t1] = timing.front();
      const cudaError_t q = cudaEventQuery(t1);
      if (q == cudaErrorNotReady) break;
      CUDA_CHECK(q);
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
      total += ms * 1e-3;
      free_timed.push_back(t0);
      free_timed.push_back(t1);
      timing.pop_front();
    }
    comm_stats().busy_seconds += total;
    return total;
  }
};

namespace {
/// Work handle: `done` is recorded on the comm stream after the collective.
class NcclWork final : public WorkImpl {
 public:
  NcclWork(NcclCommunicator::Impl* impl, cudaEvent_t done) : impl_(impl), done_(done) {}
  ~NcclWork() override {
    if (done_) impl_->free_events.push_back(done_);
  }
  bool test() override { return cudaEventQuery(done_) == cudaSuccess; }
  void wait() override {
    // Stream-ordered wait: later compute-stream kernels start after the collective;
    // the host does not block.
    CUDA_CHECK(cudaStreamWaitEvent(impl_->compute, done_, 0));
  }

 private:
  NcclCommunicator::Impl* impl_;
  cudaEvent_t done_;
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
  for (cudaEvent_t e : impl_->free_timed) cudaEventDestroy(e);
  for (auto& [a, b] : impl_->timing) {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  ncclCommDestroy(impl_->comm);
  cudaStreamDestroy(impl_->comm_stream);
}

template <class Launch>
static Work enqueue(NcclCommunicator::Impl* impl, std::size_t bytes, Launch launch) {
  impl->drain();  // account finished collectives, recycle their timing events
  // 1) the comm stream waits for everything already queued on the compute stream
  cudaEvent_t ready = impl->event(false);
  CUDA_CHECK(cudaEventRecord(ready, impl->compute));
  CUDA_CHECK(cudaStreamWaitEvent(impl->comm_stream, ready, 0));
  impl->free_events.push_back(ready);  // safe to reuse: the wait captured its state
  // 2) the collective, bracketed by timing events
  cudaEvent_t t0 = impl->event(true), t1 = impl->event(true);
  CUDA_CHECK(cudaEventRecord(t0, impl->comm_stream));
  launch(impl->comm_stream);
  CUDA_CHECK(cudaEventRecord(t1, impl->comm_stream));
  impl->timing.emplace_back(t0, t1);
  // 3) completion event for Work::wait
  cudaEvent_t done = impl->event(false);
  CUDA_CHECK(cudaEventRecord(done, impl->comm_stream));
  comm_stats().bytes += bytes;
  comm_stats().operations += 1;
  return Work(std::make_unique<NcclWork>(impl, done));
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
