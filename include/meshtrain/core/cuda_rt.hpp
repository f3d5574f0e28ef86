#pragma once
/// \brief The few CUDA runtime calls the portable code needs beyond Kokkos (events, stream
/// capture into CUDA graphs, NVTX ranges), behind opaque handles so that no CUDA header is
/// included here. Defined in core/cuda/cuda_rt.cpp: CUDA builds link it into the library and
/// CPU builds with the toolkit compile it into meshtrain_cuda_host (so it is compiled by every
/// build); portable code calls these only under `MESHTRAIN_WITH_CUDA` (core/stream_event.hpp,
/// core/trace.hpp, train/step_graph.hpp are the callers).
///
/// Streams are `cudaStream_t` passed as `void*` (Kokkos' `ExecSpace().cuda_stream()`).

#include <string>

namespace meshtrain::cuda_rt {

// ---- events ----------------------------------------------------------------------------------
/// A new event; `timing` false creates it with cudaEventDisableTiming (ordering only).
void* event_create(bool timing);
void event_destroy(void* event);
void event_record(void* event, void* stream);
/// cudaEventQuery: true when the work before the record has completed; never blocks.
bool event_done(void* event);
/// The host waits until the event has completed.
void event_synchronize(void* event);
/// Seconds between two completed timing events recorded on one stream.
double event_seconds(void* start, void* stop);
/// `stream` waits (stream-ordered, the host does not) for the work before `event`'s record.
void stream_wait(void* stream, void* event);

// ---- CUDA graphs (stream capture) ------------------------------------------------------------
/// True while `stream` is being captured (cudaStreamIsCapturing: active, or invalidated by an
/// illegal call that cudaStreamEndCapture will report).
bool stream_capturing(void* stream);
/// Starts capturing `stream` in cudaStreamCaptureModeThreadLocal: this thread may make no
/// call that is unsafe during a capture; other threads (MPI progress, the watchdog, an
/// asynchronous checkpoint writer) are not restricted.
void begin_capture(void* stream);
/// Ends the capture started by begin_capture and instantiates the graph. Returns the
/// executable graph, or nullptr with the CUDA error (invalidated capture, a stream not
/// joined back, an instantiation failure) in `*why`. Never aborts: the caller falls back to
/// running the step without a graph.
void* end_capture(void* stream, std::string* why);
/// Launches an instantiated graph on `stream` (asynchronous).
void graph_launch(void* exec, void* stream);
void graph_destroy(void* exec);

/// \brief While alive, this thread's capture mode is relaxed: a device allocation
/// (cudaMalloc, which stream capture neither records nor allows in the other modes) may be
/// made while the stream is captured. The memory pool uses it for a block it has to allocate
/// during a capture (core/memory.hpp, MemoryPool::PrivateScope).
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode();
  ~RelaxedCaptureMode();
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  int previous_ = 0;
};

// ---- NVTX (nvtx3, header-only) ---------------------------------------------------------------
void nvtx_push(const char* name);
void nvtx_pop();

}  // namespace meshtrain::cuda_rt
