#pragma once
/// \brief Execution/memory spaces and view aliases used across meshtrain. Tensors are
/// flat, row-major 1-D views with their shapes stated in comments at each use.

#include <cstddef>

#include <Kokkos_Core.hpp>

#include "core/bf16.hpp"

namespace meshtrain {

using ExecSpace = Kokkos::DefaultExecutionSpace;
using DeviceMem = ExecSpace::memory_space;
using HostMem = Kokkos::HostSpace;
/// Page-locked host memory where the device has its own (the source of asynchronous
/// host-to-device copies: a copy from pageable memory is staged by the driver, which may
/// make the host wait for the stream); plain host memory on host builds.
#if defined(KOKKOS_ENABLE_CUDA)
using PinnedMem = Kokkos::CudaHostPinnedSpace;
#else
using PinnedMem = Kokkos::HostSpace;
#endif

/// Non-owning 1-D view over memory owned elsewhere (a pool block, a flat parameter buffer).
template <class T, class MemSpace = DeviceMem>
using UView = Kokkos::View<T*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

/// Owning 1-D view (Kokkos-managed; used for small, long-lived buffers).
template <class T, class MemSpace = DeviceMem>
using View1 = Kokkos::View<T*, MemSpace>;

/// Range policy over the default execution space.
using Range = Kokkos::RangePolicy<ExecSpace>;

/// True when device memory is host-accessible (Serial/OpenMP builds).
inline constexpr bool kDeviceIsHost =
    Kokkos::SpaceAccessibility<Kokkos::HostSpace, DeviceMem>::accessible;

}  // namespace meshtrain
