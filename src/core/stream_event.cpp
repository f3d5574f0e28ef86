#include "core/stream_event.hpp"

#include <utility>

#include "core/timer.hpp"
#include "core/views.hpp"

#if defined(MESHTRAIN_WITH_CUDA)
#include "core/cuda_rt.hpp"
#endif

namespace meshtrain {

StreamEvent::StreamEvent() {
#if defined(MESHTRAIN_WITH_CUDA)
  event_ = cuda_rt::event_create(true);
#endif
}

StreamEvent::~StreamEvent() {
#if defined(MESHTRAIN_WITH_CUDA)
  cuda_rt::event_destroy(event_);
#endif
}

StreamEvent::StreamEvent(StreamEvent&& o) noexcept
    : event_(std::exchange(o.event_, nullptr)), host_time_(o.host_time_), recorded_(o.recorded_) {}

StreamEvent& StreamEvent::operator=(StreamEvent&& o) noexcept {
  std::swap(event_, o.event_);
  std::swap(host_time_, o.host_time_);
  std::swap(recorded_, o.recorded_);
  return *this;
}

void StreamEvent::record() {
#if defined(MESHTRAIN_WITH_CUDA)
  cuda_rt::event_record(event_, ExecSpace().cuda_stream());
#else
  ExecSpace().fence();  // host spaces: already complete; the fence is the documented order
  host_time_ = now_seconds();
#endif
  recorded_ = true;
}

bool StreamEvent::done() const {
#if defined(MESHTRAIN_WITH_CUDA)
  return !recorded_ || cuda_rt::event_done(event_);
#else
  return true;
#endif
}

void StreamEvent::synchronize() const {
#if defined(MESHTRAIN_WITH_CUDA)
  if (recorded_) cuda_rt::event_synchronize(event_);
#endif
}

double StreamEvent::seconds(const StreamEvent& a, const StreamEvent& b) {
#if defined(MESHTRAIN_WITH_CUDA)
  return cuda_rt::event_seconds(a.event_, b.event_);
#else
  return b.host_time_ - a.host_time_;
#endif
}

}  // namespace meshtrain
