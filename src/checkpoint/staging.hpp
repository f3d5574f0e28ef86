#pragma once
// Host staging of the engine's fp32 device state: HDF5, mmap and file I/O see host memory
// only, so every transfer goes through a host vector (a copy on CPU builds, a
// device<->host transfer on GPU builds).

#include <cstdint>
#include <vector>

#include "core/memory.hpp"

namespace meshtrain::checkpoint {

/// Elements [offset, offset + n) of a device buffer as a host vector.
inline std::vector<float> stage_to_host(const Buffer<float>& b, std::int64_t offset, std::int64_t n) {
  std::vector<float> host(static_cast<std::size_t>(n));
  if (n > 0)
    Kokkos::deep_copy(UView<float, HostMem>(host.data(), host.size()),
                      b.view(static_cast<std::size_t>(offset), static_cast<std::size_t>(n)));
  return host;
}

/// Overwrites the whole device buffer with `host` (same size).
inline void stage_to_device(const std::vector<float>& host, Buffer<float>& b) {
  if (!host.empty())
    Kokkos::deep_copy(b.view(), UView<float, HostMem>(const_cast<float*>(host.data()), host.size()));
}

}  // namespace meshtrain::checkpoint
