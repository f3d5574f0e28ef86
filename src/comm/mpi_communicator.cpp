#include "comm/mpi_communicator.hpp"

#include <algorithm>
#include <climits>
#include <cstring>

#include "comm/watchdog.hpp"
#include "core/bf16.hpp"
#include "core/check.hpp"
#include "core/fault.hpp"
#include "core/timer.hpp"

namespace meshtrain {
namespace {

double g_timeout_seconds = 0.0;

// ---- bf16 reductions: MPI has no bfloat16, so reduce uint16 payloads in float ----------
template <class F>
void bf16_reduce(void* in, void* inout, int* len, F f) {
  auto* a = static_cast<const bf16*>(in);
  auto* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = bf16(f(static_cast<float>(a[i]), static_cast<float>(b[i])));
}
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  bf16_reduce(in, inout, len, [](float x, float y) { return x + y; });
}
void bf16_max(void* in, void* inout, int* len, MPI_Datatype*) {
  bf16_reduce(in, inout, len, [](float x, float y) { return std::max(x, y); });
}
void bf16_min(void* in, void* inout, int* len, MPI_Datatype*) {
  bf16_reduce(in, inout, len, [](float x, float y) { return std::min(x, y); });
}

struct Bf16Ops {
  MPI_Op sum, max, min;
};
const Bf16Ops& bf16_ops() {
  static const Bf16Ops ops = [] {
    Bf16Ops o{};
    MPI_CHECK(MPI_Op_create(&bf16_sum, 1, &o.sum));
    MPI_CHECK(MPI_Op_create(&bf16_max, 1, &o.max));
    MPI_CHECK(MPI_Op_create(&bf16_min, 1, &o.min));
    return o;
  }();
  return ops;
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::BF16: return MPI_UINT16_T;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::U8: return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op, DType t) {
  if (t == DType::BF16) {
    const Bf16Ops& o = bf16_ops();
    return op == ReduceOp::Max ? o.max : op == ReduceOp::Min ? o.min : o.sum;
  }
  return op == ReduceOp::Max ? MPI_MAX : op == ReduceOp::Min ? MPI_MIN : MPI_SUM;
}

int checked_count(std::size_t count) {
  MESHTRAIN_ASSERT(count <= static_cast<std::size_t>(INT_MAX),
                   "collective of %zu elements exceeds MPI's int count", count);
  return static_cast<int>(count);
}

void scale_in_place(void* data, std::size_t n, DType t, double factor) {
  switch (t) {
    case DType::F32: {
      auto* p = static_cast<float*>(data);
      const float f = static_cast<float>(factor);
      for (std::size_t i = 0; i < n; ++i) p[i] *= f;
      break;
    }
    case DType::F64: {
      auto* p = static_cast<double*>(data);
      for (std::size_t i = 0; i < n; ++i) p[i] *= factor;
      break;
    }
    case DType::BF16: {
      auto* p = static_cast<bf16*>(data);
      const float f = static_cast<float>(factor);
      for (std::size_t i = 0; i < n; ++i) p[i] = bf16(static_cast<float>(p[i]) * f);
      break;
    }
    default:
      MESHTRAIN_ASSERT(false, "ReduceOp::Avg is only defined for floating-point types");
  }
}

}  // namespace

void set_collective_timeout(double seconds) { g_timeout_seconds = seconds; }
double collective_timeout() { return g_timeout_seconds; }

struct MpiCommunicator::Pending {
  MpiCommunicator* owner = nullptr;
  const char* what = "";
  MPI_Request request = MPI_REQUEST_NULL;
  void* result = nullptr;  // Avg post-scaling target
  std::size_t result_count = 0;
  const void* relocate_from = nullptr;  // in-place reduce_scatter: result to move into place
  DType dtype = DType::F32;
  ReduceOp op = ReduceOp::Sum;
  double posted_at = 0;
  bool complete = false;
  std::uint64_t sequence = 0;

  bool poll() {
    if (complete) return true;
    int flag = 0;
    MPI_CHECK(MPI_Test(&request, &flag, MPI_STATUS_IGNORE));
    if (flag) mark_complete();
    return complete;
  }
  void mark_complete() {
    complete = true;
    comm_stats().busy_seconds += now_seconds() - posted_at;
    watchdog_leave(owner->name_, sequence);
  }
};

namespace {
class MpiWork final : public WorkImpl {
 public:
  explicit MpiWork(MpiCommunicator::Pending* p, std::vector<MpiCommunicator::Pending*>* list)
      : p_(p), list_(list) {}
  ~MpiWork() override { delete p_; }
  bool test() override { return p_->poll(); }
  void wait() override {
    if (!p_->complete) {
      const double t0 = now_seconds();
      watchdog_wait(p_->what, p_->owner->name(), p_->sequence, p_->owner->mpi_comm(), [this] {
        return p_->poll();
      });
      comm_stats().exposed_seconds += now_seconds() - t0;
    }
    if (p_->relocate_from) {
      std::memmove(p_->result, p_->relocate_from, p_->result_count * dtype_size(p_->dtype));
      p_->relocate_from = nullptr;
    }
    if (p_->op == ReduceOp::Avg && p_->result)
      scale_in_place(p_->result, p_->result_count, p_->dtype, 1.0 / p_->owner->size());
    p_->result = nullptr;
    list_->erase(std::remove(list_->begin(), list_->end(), p_), list_->end());
  }

 private:
  MpiCommunicator::Pending* p_;
  std::vector<MpiCommunicator::Pending*>* list_;
};
}  // namespace

MpiCommunicator::MpiCommunicator(MpiComm comm, std::string name)
    : comm_(std::move(comm)), name_(std::move(name)) {
  rank_ = comm_.rank();
  size_ = comm_.size();
  bf16_ops();
}

MpiCommunicator::~MpiCommunicator() = default;

Work MpiCommunicator::post(const char* what, MPI_Request request, void* result,
                           std::size_t result_count, DType dtype, ReduceOp op, std::size_t bytes) {
  auto* p = new Pending();
  p->owner = this;
  p->what = what;
  p->request = request;
  p->result = result;
  p->result_count = result_count;
  p->dtype = dtype;
  p->op = op;
  p->posted_at = now_seconds();
  p->sequence = watchdog_enter(name_);
  comm_stats().bytes += bytes;
  comm_stats().operations += 1;
  in_flight_.push_back(p);
  fault::pass(fault::Point::Collective);  // a rank dying or stalling inside a collective (tests)
  return Work(std::make_unique<MpiWork>(p, &in_flight_));
}

Work MpiCommunicator::all_gather_async(const void* send, void* recv, std::size_t count,
                                       DType dtype) {
  const std::size_t esize = dtype_size(dtype);
  const void* src = send;
  if (send == static_cast<const char*>(recv) + rank_ * count * esize) src = MPI_IN_PLACE;
  MPI_Request req;
  MPI_CHECK(MPI_Iallgather(src, checked_count(count), mpi_type(dtype), recv, checked_count(count),
                           mpi_type(dtype), comm_.get(), &req));
  return post("all_gather", req, nullptr, 0, dtype, ReduceOp::Sum, count * esize * size_);
}

Work MpiCommunicator::reduce_scatter_async(const void* send, void* recv, std::size_t count,
                                           DType dtype, ReduceOp op) {
  const std::size_t esize = dtype_size(dtype);
  // In place (NCCL's convention): recv is this rank's block of send. MPI's in-place form
  // reduces the whole buffer and leaves the result at its start, so the result is moved
  // to this rank's block when the operation completes.
  const bool in_place = count > 0 && recv == static_cast<const char*>(send) + rank_ * count * esize;
  MPI_Request req;
  if (in_place) {
    void* whole = const_cast<void*>(send);
    MPI_CHECK(MPI_Ireduce_scatter_block(MPI_IN_PLACE, whole, checked_count(count), mpi_type(dtype),
                                        mpi_op(op, dtype), comm_.get(), &req));
  } else {
    MPI_CHECK(MPI_Ireduce_scatter_block(send, recv, checked_count(count), mpi_type(dtype),
                                        mpi_op(op, dtype), comm_.get(), &req));
  }
  Work w = post("reduce_scatter", req, recv, count, dtype, op, count * esize * size_);
  if (in_place && rank_ != 0) in_flight_.back()->relocate_from = send;
  return w;
}

Work MpiCommunicator::all_reduce_async(const void* send, void* recv, std::size_t count, DType dtype,
                                       ReduceOp op) {
  const void* src = send == recv ? MPI_IN_PLACE : send;
  MPI_Request req;
  MPI_CHECK(MPI_Iallreduce(src, recv, checked_count(count), mpi_type(dtype), mpi_op(op, dtype),
                           comm_.get(), &req));
  return post("all_reduce", req, recv, count, dtype, op, 2 * count * dtype_size(dtype));
}

Work MpiCommunicator::broadcast_async(void* buffer, std::size_t count, DType dtype, int root) {
  MPI_Request req;
  MPI_CHECK(MPI_Ibcast(buffer, checked_count(count), mpi_type(dtype), root, comm_.get(), &req));
  return post("broadcast", req, nullptr, 0, dtype, ReduceOp::Sum, count * dtype_size(dtype));
}

void MpiCommunicator::barrier() {
  MPI_Request req;
  MPI_CHECK(MPI_Ibarrier(comm_.get(), &req));
  post("barrier", req, nullptr, 0, DType::U8, ReduceOp::Sum, 0).wait();
}

void MpiCommunicator::progress() {
  for (Pending* p : in_flight_) p->poll();
}

}  // namespace meshtrain
