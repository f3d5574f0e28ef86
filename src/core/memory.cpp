#include "core/memory.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <exception>
#include <iterator>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/error.hpp"
#include "core/fault.hpp"
#include "core/format.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif
#if defined(MESHTRAIN_WITH_CUDA)
#include "core/cuda_rt.hpp"
#endif

// AddressSanitizer in a host build (MESHTRAIN_SANITIZE=address, the cpu-asan preset).
#if !defined(KOKKOS_ENABLE_CUDA) && defined(__SANITIZE_ADDRESS__)
#define MESHTRAIN_POOL_POISONS 1
#elif !defined(KOKKOS_ENABLE_CUDA) && defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MESHTRAIN_POOL_POISONS 1
#endif
#endif
#if defined(MESHTRAIN_POOL_POISONS)
#include <sanitizer/asan_interface.h>
#endif

namespace meshtrain {
namespace {
// To AddressSanitizer every block of the pool is one live allocation from the moment it is
// made until trim(), so by itself it would miss the two errors a pool invites: a Buffer's
// block used after its release (the block waits in a cache, still allocated, for the next
// Buffer of its size) and a write past a block's end into whatever the allocator put after
// it. Under ASan the pool therefore poisons a block while it is cached, from its release
// until it is handed out again, and gives every block a poisoned tail of at least kRedzoneBytes.
// Nothing changes in other builds (kRedzoneBytes 0, no-op calls); the statistics count the
// blocks' own bytes either way.
#if defined(MESHTRAIN_POOL_POISONS)
constexpr std::size_t kRedzoneBytes = 64;
void poison(void* p, std::size_t bytes) { ASAN_POISON_MEMORY_REGION(p, bytes); }
void unpoison(void* p, std::size_t bytes) { ASAN_UNPOISON_MEMORY_REGION(p, bytes); }
#else
constexpr std::size_t kRedzoneBytes = 0;
void poison(void*, std::size_t) {}
void unpoison(void*, std::size_t) {}
#endif
/// Bytes allocated for a block of `bytes`: with a tail, rounded so that the tail ends on one
/// of ASan's 8-byte granules (a poisoned region that ends inside a granule leaves that
/// granule addressable; one that starts inside it is fine).
std::size_t allocated_bytes(std::size_t bytes) {
  return kRedzoneBytes == 0 ? bytes : (bytes + 7) / 8 * 8 + kRedzoneBytes;
}
}  // namespace

bool memory_pool_poisons() { return kRedzoneBytes > 0; }

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
  PrivatePool* open = nullptr;                         // open_private
  std::unordered_map<void*, PrivatePool*> owner;       // blocks that belong to a private pool
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

namespace {
/// The last free block of `bytes` in `free` (removed), or nullptr.
void* take(std::map<std::size_t, std::vector<void*>>& free, std::size_t bytes) {
  auto it = free.find(bytes);
  if (it == free.end() || it->second.empty()) return nullptr;
  void* ptr = it->second.back();
  it->second.pop_back();
  return ptr;
}
}  // namespace

std::size_t MemoryPool::free_cached_locked() {
  Impl* p = impl();
  const std::size_t freed = p->cached_bytes;
  for (auto& [bytes, blocks] : p->cached) {
    for (void* b : blocks) {
      unpoison(b, allocated_bytes(bytes));
      Kokkos::kokkos_free<DeviceMem>(b);
      stats_.reserved -= bytes;
    }
    blocks.clear();
  }
  p->cached.clear();
  p->cached_bytes = 0;
  return freed;
}

OutOfDeviceMemory::OutOfDeviceMemory(std::string facts, const std::string& ways_out)
    : facts_(std::move(facts)),
      message_(facts_ + ". To need less: " +
               (ways_out.empty() ? "a smaller train.micro_batch, train.activation_checkpointing=true, more sharding "
                                   "(parallel.strategy=full_shard) or more ranks"
                                 : ways_out) +
               "; `meshtrain plan` shows what each choice needs") {}

std::string MemoryPool::out_of_memory_message(std::size_t bytes, MemCategory category, const char* cause,
                                              bool returned) const {
  // The allocator's own words, first line only (Kokkos appends a traceback notice).
  std::string why = cause != nullptr ? cause : "";
  why = why.substr(0, why.find('\n'));
  std::string use;
  for (int c = 0; c < kNumMemCategories; ++c)
    if (stats_.in_use[static_cast<std::size_t>(c)] > 0)
      use += strprintf("%s%s %s", use.empty() ? "" : ", ", category_name(static_cast<MemCategory>(c)),
                       format_bytes(static_cast<double>(stats_.in_use[static_cast<std::size_t>(c)])).c_str());
  return strprintf(
      "out of %s memory: a block of %s (%s) could not be allocated (%s); in use %s (%s), %s held by the pool "
      "in all%s",
      kDeviceIsHost ? "host" : "device", format_bytes(static_cast<double>(bytes)).c_str(), category_name(category),
      why.empty() ? "no reason given" : why.c_str(), format_bytes(static_cast<double>(stats_.total_in_use)).c_str(),
      use.empty() ? "nothing" : use.c_str(), format_bytes(static_cast<double>(stats_.reserved)).c_str(),
      returned ? ", after its cache of blocks no longer in use was returned and the allocation tried again" : "");
}

void* MemoryPool::allocate(std::size_t bytes, MemCategory category) {
  Impl* p = impl();
  std::lock_guard<std::mutex> lock(p->mutex);
  PrivatePool* priv = p->open;
  void* ptr = priv ? take(priv->free_, bytes) : nullptr;
  if (ptr == nullptr) {
    ptr = take(p->cached, bytes);
    if (ptr) p->cached_bytes -= bytes;
  }
  if (ptr) unpoison(ptr, bytes);
  if (ptr == nullptr) {
    {
#if defined(MESHTRAIN_WITH_CUDA)
      // A block a captured step needs beyond what the shared cache holds: cudaMalloc is not
      // recorded by a capture, and allowed during one only in the relaxed mode.
      std::optional<cuda_rt::RelaxedCaptureMode> relaxed;
      if (priv) relaxed.emplace();
#endif
      try {
        if (fault::pass(fault::Point::PoolAllocate) == ENOMEM) throw std::bad_alloc();
        ptr = Kokkos::kokkos_malloc<DeviceMem>("meshtrain::pool", allocated_bytes(bytes));
      } catch (const std::exception& first) {
        // Blocks are cached by exact size, so the cache can hold memory no later request
        // will take (a start-up measurement's operands, an evaluation's batch). Before an
        // out-of-memory error, as PyTorch's caching allocator does, give the shared cache
        // back and try once more. A private pool's blocks belong to its CUDA graph and stay,
        // and nothing is freed while one is open (a capture forbids cudaFree). Kokkos
        // reports the failure as a std::bad_alloc, in some versions a std::runtime_error.
        const std::size_t returned = priv == nullptr ? free_cached_locked() : 0;
        if (returned == 0) throw OutOfDeviceMemory(out_of_memory_message(bytes, category, first.what(), false));
        stats_.cache_flushes++;
        try {
          ptr = Kokkos::kokkos_malloc<DeviceMem>("meshtrain::pool", allocated_bytes(bytes));
        } catch (const std::exception& again) {
          throw OutOfDeviceMemory(out_of_memory_message(bytes, category, again.what(), true));
        }
      }
    }
    MESHTRAIN_ASSERT(ptr != nullptr, "device allocation of %zu bytes failed", bytes);
    poison(static_cast<char*>(ptr) + bytes, allocated_bytes(bytes) - bytes);
    stats_.device_allocations++;
    stats_.reserved += bytes;
    if (stats_.reserved > stats_.peak_reserved) stats_.peak_reserved = stats_.reserved;
  }
  if (priv && p->owner.emplace(ptr, priv).second) priv->bytes_ += bytes;
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
  poison(ptr, bytes);  // cached from here on, in whichever free list (ASan builds)
  // A block of a private pool goes back to it, open or not; while one is open, a block
  // released into it becomes its own (the captured step may have used it).
  auto it = p->owner.find(ptr);
  PrivatePool* priv = it != p->owner.end() ? it->second : p->open;
  if (priv) {
    if (it == p->owner.end()) {
      p->owner.emplace(ptr, priv);
      priv->bytes_ += bytes;
    }
    priv->free_[bytes].push_back(ptr);
    return;
  }
  p->cached[bytes].push_back(ptr);
  p->cached_bytes += bytes;
}

void MemoryPool::open_private(PrivatePool* pool) {
  Impl* p = impl();
  std::lock_guard<std::mutex> lock(p->mutex);
  MESHTRAIN_ASSERT(pool == nullptr || p->open == nullptr, "a private memory pool is already open");
  p->open = pool;
}

void MemoryPool::forget_private(PrivatePool* pool) {
  Impl* p = impl();
  std::lock_guard<std::mutex> lock(p->mutex);
  if (p->open == pool) p->open = nullptr;
  for (auto& [bytes, blocks] : pool->free_) {
    for (void* b : blocks) {
      p->owner.erase(b);
      p->cached[bytes].push_back(b);
      p->cached_bytes += bytes;
    }
  }
  pool->free_.clear();
  // Blocks still in use by their holders: shared again once released.
  for (auto it = p->owner.begin(); it != p->owner.end();) it = it->second == pool ? p->owner.erase(it) : std::next(it);
  pool->bytes_ = 0;
}

PrivatePool::~PrivatePool() { MemoryPool::instance().forget_private(this); }

void MemoryPool::trim() {
  std::lock_guard<std::mutex> lock(impl()->mutex);
  free_cached_locked();
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
