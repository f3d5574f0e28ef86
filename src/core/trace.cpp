#include "core/trace.hpp"

#include <Kokkos_Core.hpp>

#if defined(MESHTRAIN_WITH_CUDA)
#include <cstdio>

#include "core/cuda_rt.hpp"
#endif

namespace meshtrain {

TraceRange::TraceRange(const char* phase, int index) {
  Kokkos::Profiling::pushRegion(phase);
#if defined(MESHTRAIN_WITH_CUDA)
  if (index < 0) {
    cuda_rt::nvtx_push(phase);
  } else {
    char name[96];
    std::snprintf(name, sizeof name, "%s %d", phase, index);
    cuda_rt::nvtx_push(name);
  }
#else
  (void)index;
#endif
}

TraceRange::~TraceRange() {
#if defined(MESHTRAIN_WITH_CUDA)
  cuda_rt::nvtx_pop();
#endif
  Kokkos::Profiling::popRegion();
}

}  // namespace meshtrain
