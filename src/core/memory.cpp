#include "core/memory.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <vector>

#include "core/error.hpp"
#include "core/format.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif

namespace meshtrain {

const char* category_name(MemCategory c) {
  switch (c) {
    case MemCategory::Params: return "params";
    case MemCategory::Grads: return "grads";
    case MemCategory::Optimizer: return "optimizer";
    case MemCategory::GatheredParams: return "gathered_params";
    case MemCategory::Activations: return "activations";
    case MemCategory::CommBuffers: return "comm_buffers";
    case MemCategory::Workspace: return "workspace";
    default: return "unknown";
  }
}

struct MemoryPool::Impl {
  std::mutex mutex;
  std::map<std::size_t, std::vector<void*>> cached;  // exact size -> free blocks
  std::size_t cached_bytes = 0;
};

MemoryPool& MemoryPool::instance() {
  static MemoryPool pool;
  return pool;
}

MemoryPool::Impl* MemoryPool::impl() {
  if (!impl_) impl_ = new Impl();
  return impl_;
}

MemoryPool::~MemoryPool() {
  // Kokkos is finalized before static destruction; cached blocks are released by
  // Runtime via trim() before Kokkos::finalize, so nothing is left to free here.
  delete impl_;
}

void* MemoryPool::allocate(std::size_t bytes, MemCategory category) {
  Impl* p = impl();
  std::lock_guard<std::mutex> lock(p->mutex);
  void* ptr = nullptr;
  auto it = p->cached.find(bytes);
  if (it != p->cached.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    p->cached_bytes -= bytes;
  } else {
    ptr = Kokkos::kokkos_malloc<DeviceMem>("meshtrain::pool", bytes);
    MESHTRAIN_ASSERT(ptr != nullptr, "device allocation of %zu bytes failed", bytes);
    stats_.device_allocations++;
    stats_.reserved += bytes;
    if (stats_.reserved > stats_.peak_reserved) stats_.peak_reserved = stats_.reserved;
  }
  const int c = static_cast<int>(category);
  stats_.in_use[c] += bytes;
  stats_.total_in_use += bytes;
  if (stats_.in_use[c] > stats_.peak_in_use[c]) stats_.peak_in_use[c] = stats_.in_use[c];
  if (stats_.total_in_use > stats_.peak_total_in_use) stats_.peak_total_in_use = stats_.total_in_use;
  return ptr;
}

void MemoryPool::release(void* ptr, std::size_t bytes, MemCategory category) {
  Impl* p = impl();
  std::lock_guard<std::mutex> lock(p->mutex);
  const int c = static_cast<int>(category);
  stats_.in_use[c] -= bytes;
  stats_.total_in_use -= bytes;
  p->cached[bytes].push_back(ptr);
  p->cached_bytes += bytes;
}

void MemoryPool::trim() {
  Impl* p = impl();
  std::lock_guard<std::mutex> lock(p->mutex);
  for (auto& [bytes, blocks] : p->cached) {
    for (void* b : blocks) {
      Kokkos::kokkos_free<DeviceMem>(b);
      stats_.reserved -= bytes;
    }
    blocks.clear();
  }
  p->cached.clear();
  p->cached_bytes = 0;
}

void MemoryPool::reset_peaks() {
  std::lock_guard<std::mutex> lock(impl()->mutex);
  stats_.peak_in_use = stats_.in_use;
  stats_.peak_total_in_use = stats_.total_in_use;
  stats_.peak_reserved = stats_.reserved;
}

std::size_t host_peak_rss_bytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::size_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

std::size_t host_total_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) : 0;
}

std::size_t host_available_memory_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f) {
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof line, f)) found = std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
    std::fclose(f);
    if (found) return static_cast<std::size_t>(kib) * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) : 0;
}

void require_host_memory(double bytes, const std::string& what) {
  const std::size_t avail = host_available_memory_bytes();
  if (avail == 0 || bytes <= static_cast<double>(avail)) return;
  throw UserError(strprintf("%s needs %s of memory, more than the %s available on this host", what.c_str(),
                            format_bytes(bytes).c_str(), format_bytes(static_cast<double>(avail)).c_str()));
}

}  // namespace meshtrain

namespace meshtrain {
std::size_t device_memory_bytes() {
#if defined(KOKKOS_ENABLE_CUDA)
  std::size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return 0;
  return total;
#else
  return 0;
#endif
}
}  // namespace meshtrain
