#include "core/cuda_rt.hpp"

#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include "core/check.hpp"
#include "core/format.hpp"

namespace meshtrain::cuda_rt {
namespace {
cudaEvent_t ev(void* e) { return static_cast<cudaEvent_t>(e); }
cudaStream_t st(void* s) { return static_cast<cudaStream_t>(s); }
}  // namespace

void* event_create(bool timing) {
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}

void event_destroy(void* event) {
  if (event) cudaEventDestroy(ev(event));  // at exit the context may be gone: no check
}

void event_record(void* event, void* stream) { CUDA_CHECK(cudaEventRecord(ev(event), st(stream))); }

bool event_done(void* event) {
  const cudaError_t q = cudaEventQuery(ev(event));
  if (q == cudaErrorNotReady) return false;
  CUDA_CHECK(q);
  return true;
}

void event_synchronize(void* event) { CUDA_CHECK(cudaEventSynchronize(ev(event))); }

double event_seconds(void* start, void* stop) {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, ev(start), ev(stop)));
  return 1e-3 * static_cast<double>(ms);
}

void stream_wait(void* stream, void* event) { CUDA_CHECK(cudaStreamWaitEvent(st(stream), ev(event), 0)); }

bool stream_capturing(void* stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(st(stream), &status));
  return status != cudaStreamCaptureStatusNone;
}

void begin_capture(void* stream) { CUDA_CHECK(cudaStreamBeginCapture(st(stream), cudaStreamCaptureModeThreadLocal)); }

void* end_capture(void* stream, std::string* why) {
  cudaGraph_t graph = nullptr;
  const cudaError_t e = cudaStreamEndCapture(st(stream), &graph);
  if (e != cudaSuccess || graph == nullptr) {
    // An illegal call during the capture invalidates it; the error it returned then is
    // sticky for cudaGetLastError but not for the device: clear it so later calls work.
    (void)cudaGetLastError();
    if (why) *why = strprintf("cudaStreamEndCapture: %s", cudaGetErrorString(e));
    if (graph) cudaGraphDestroy(graph);
    return nullptr;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t ie = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);  // the executable graph keeps what it needs
  if (ie != cudaSuccess) {
    (void)cudaGetLastError();
    if (why) *why = strprintf("cudaGraphInstantiate: %s", cudaGetErrorString(ie));
    return nullptr;
  }
  return exec;
}

void graph_launch(void* exec, void* stream) {
  CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), st(stream)));
}

void graph_destroy(void* exec) {
  if (exec) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
}

RelaxedCaptureMode::RelaxedCaptureMode() {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  previous_ = static_cast<int>(mode);
}

RelaxedCaptureMode::~RelaxedCaptureMode() {
  cudaStreamCaptureMode mode = static_cast<cudaStreamCaptureMode>(previous_);
  cudaThreadExchangeStreamCaptureMode(&mode);
}

void nvtx_push(const char* name) { nvtxRangePushA(name); }
void nvtx_pop() { nvtxRangePop(); }

}  // namespace meshtrain::cuda_rt
