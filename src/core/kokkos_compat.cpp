#include "core/kokkos_compat.hpp"

#include "core/format.hpp"

namespace meshtrain {

void kokkos_initialize(int device_id, int num_threads) {
#if KOKKOS_VERSION >= 30700
  Kokkos::InitializationSettings settings;
  if (device_id >= 0) settings.set_device_id(device_id);
  if (num_threads > 0) settings.set_num_threads(num_threads);
  settings.set_disable_warnings(true);
  Kokkos::initialize(settings);
#else
  Kokkos::InitArguments args;
  args.device_id = device_id;
  args.num_threads = num_threads;
  args.disable_warnings = true;
  Kokkos::initialize(args);
#endif
}

std::string kokkos_backend_name() { return Kokkos::DefaultExecutionSpace::name(); }

std::string kokkos_version_string() {
  return strprintf("%d.%d.%d", KOKKOS_VERSION / 10000, KOKKOS_VERSION / 100 % 100,
                   KOKKOS_VERSION % 100);
}

int kokkos_visible_devices(std::string* why) {
#if defined(KOKKOS_ENABLE_CUDA)
  // The CUDA runtime directly: Kokkos 3.x spells this Cuda::detect_device_count() (deprecated
  // in 4.x), 4.x Kokkos::num_devices(), and both abort instead of returning when no driver
  // or device is present, which callers here want to report themselves.
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    if (why) *why = strprintf("cudaGetDeviceCount: %s", cudaGetErrorString(rc));
    cudaGetLastError();  // clear the error so later CUDA calls do not see it
    return 0;
  }
  if (n == 0 && why) *why = "cudaGetDeviceCount found no device";
  return n;
#else
  if (why) *why = "host-only build";
  return 0;
#endif
}

}  // namespace meshtrain
