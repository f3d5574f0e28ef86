#pragma once
/// \brief Device memory accounting and a caching pool.
///
/// Every long-lived or per-step buffer comes from here, tagged with a category, so that
/// (a) the allocation counter can report per-rank bytes by component (what `plan`
/// predicts), and (b) per-step buffers are recycled instead of calling
/// cudaMalloc/cudaFree (or malloc/free) every step.

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "core/views.hpp"

namespace meshtrain {

enum class MemCategory : int {
  Params = 0,       ///< fp32 master parameter shards (or replicated params for no_shard)
  Grads,            ///< persistent gradient buffers (shards or full, by strategy)
  Optimizer,        ///< AdamW moments
  GatheredParams,   ///< all-gathered (unsharded) parameters in compute precision
  Activations,      ///< saved activations for backward
  CommBuffers,      ///< staging buffers for collectives
  Workspace,        ///< scratch
  Count
};
const char* category_name(MemCategory c);
inline constexpr int kNumMemCategories = static_cast<int>(MemCategory::Count);

struct MemoryStats {
  std::array<std::size_t, kNumMemCategories> in_use{};
  std::array<std::size_t, kNumMemCategories> peak_in_use{};
  std::size_t total_in_use = 0;
  std::size_t peak_total_in_use = 0;
  std::size_t reserved = 0;       ///< in use + cached by the pool
  std::size_t peak_reserved = 0;
  std::uint64_t device_allocations = 0;  ///< calls to the underlying allocator
  std::uint64_t cache_flushes = 0;       ///< failed allocations retried after freeing the cache
};

class MemoryPool;

/// \brief The pool's allocator refused a block even after the shared cache was returned
/// (MemoryPool::allocate): what() names the request, the bytes in use by category and what
/// the pool holds (facts()), then the settings that lower a run's memory (ways_out). The pool
/// does not know the run's settings, so it lists them all; the trainer, which does, throws
/// it again with only those its run can still change (train::memory_ways_out). A
/// std::bad_alloc, so code that handles allocation failures still does; the command line
/// aborts the job with it.
class OutOfDeviceMemory : public std::bad_alloc {
 public:
  /// `ways_out` empty: every setting that lowers a run's memory.
  explicit OutOfDeviceMemory(std::string facts, const std::string& ways_out = {});
  const char* what() const noexcept override { return message_.c_str(); }
  const std::string& facts() const noexcept { return facts_; }

 private:
  std::string facts_, message_;
};

/// \brief Blocks kept for a run's CUDA graphs (train/step_graph.hpp). A graph replays the device
/// addresses its capture saw, so every block the captured step used must stay the graph's
/// for as long as the graph exists: while a PrivatePool is open (MemoryPool::open_private),
/// every block allocated or released belongs to it from then on -- a released one goes to
/// this pool's free list, never back to the shared cache where other code (an evaluation, a
/// checkpoint) could be handed it between two replays. An allocation takes a free block of
/// this pool first, then one of the shared cache, then a new one (under a relaxed capture
/// mode, since a capture forbids cudaMalloc otherwise), and it stays this pool's. Closing
/// the scope keeps the blocks; destroying the pool returns its free blocks to the shared
/// cache, and a block still held by its owner goes there when the owner releases it.
class PrivatePool {
 public:
  PrivatePool() = default;
  ~PrivatePool();
  PrivatePool(const PrivatePool&) = delete;
  PrivatePool& operator=(const PrivatePool&) = delete;
  /// Bytes of the blocks that belong to this pool (free or in use).
  std::size_t bytes() const { return bytes_; }

 private:
  friend class MemoryPool;
  std::map<std::size_t, std::vector<void*>> free_;  // exact size -> free blocks
  std::size_t bytes_ = 0;
};

/// \brief Process-wide allocator: tracks bytes per category; caches freed blocks by
/// exact size (sizes recur every step) so steady-state steps do not allocate. Under
/// AddressSanitizer (host builds with MESHTRAIN_SANITIZE=address) a cached block is poisoned
/// until it is handed out again and every block has a poisoned tail, so a use after release
/// or an overrun is reported (memory_pool_poisons()).
class MemoryPool {
 public:
  static MemoryPool& instance();

  /// A cached block of exactly `bytes`, else a new one; when the underlying allocator fails,
  /// the shared cache is returned to it and the allocation tried once more (not while a
  /// private pool is open) before OutOfDeviceMemory is thrown.
  void* allocate(std::size_t bytes, MemCategory category);
  void release(void* ptr, std::size_t bytes, MemCategory category);
  /// Returns cached blocks to the system (end of run, after start-up measurements, tests).
  /// Blocks of a private pool are not in the shared cache and stay.
  void trim();
  /// Opens `pool` (nullptr: closes the open one): allocations and releases go through it
  /// until it is closed (PrivatePool). One at a time.
  void open_private(PrivatePool* pool);

  const MemoryStats& stats() const { return stats_; }
  /// Resets peaks to current values (start of a measured phase).
  void reset_peaks();

 private:
  MemoryPool() = default;
  ~MemoryPool();
  friend class PrivatePool;
  void forget_private(PrivatePool* pool);
  /// trim() with the mutex held; the bytes freed.
  std::size_t free_cached_locked();
  /// OutOfDeviceMemory's facts for a request of `bytes` that failed with `cause`.
  std::string out_of_memory_message(std::size_t bytes, MemCategory category, const char* cause, bool returned) const;
  struct Impl;
  Impl* impl();
  Impl* impl_ = nullptr;
  MemoryStats stats_;
};

/// Whether the pool poisons cached blocks and block tails for AddressSanitizer (an ASan
/// host build).
bool memory_pool_poisons();

/// \brief Owning, move-only device buffer of `n` elements from the pool. Contents are
/// uninitialised unless `zero()` is called.
template <class T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(std::size_t n, MemCategory category) : n_(n), category_(category) {
    if (n_ > 0) ptr_ = static_cast<T*>(MemoryPool::instance().allocate(n_ * sizeof(T), category_));
  }
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept { swap(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      swap(o);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void reset() {
    if (ptr_) MemoryPool::instance().release(ptr_, n_ * sizeof(T), category_);
    ptr_ = nullptr;
    n_ = 0;
  }
  T* data() const { return ptr_; }
  std::size_t size() const { return n_; }
  std::size_t bytes() const { return n_ * sizeof(T); }
  bool empty() const { return n_ == 0; }
  UView<T> view() const { return UView<T>(ptr_, n_); }
  UView<T> view(std::size_t offset, std::size_t count) const { return UView<T>(ptr_ + offset, count); }
  /// Sets every element to zero: a fill queued on the default execution space (the compute
  /// stream on GPUs), ordered before the kernels queued after it, without waiting for the
  /// device (a deep_copy without a space fences everything, on several GPUs also the
  /// collectives' stream). Host reads of device memory go through deep_copy, which fences.
  void zero() {
    if (n_) Kokkos::deep_copy(ExecSpace(), view(), T{});
  }

 private:
  void swap(Buffer& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(n_, o.n_);
    std::swap(category_, o.category_);
  }
  T* ptr_ = nullptr;
  std::size_t n_ = 0;
  MemCategory category_ = MemCategory::Workspace;
};

/// Peak resident set size of this process in bytes (host memory, from getrusage).
std::size_t host_peak_rss_bytes();
/// Total physical memory of this node in bytes.
std::size_t host_total_memory_bytes();
/// Memory this node can still give without swapping (MemAvailable of /proc/meminfo; free
/// pages where that is missing), in bytes; 0 when unknown.
std::size_t host_available_memory_bytes();
/// \brief UserError when `bytes` of host memory are more than this node has available:
/// "WHAT needs N of memory, more than the M available on this host". Sizes a user gives
/// (bench sizes, a text file) are checked with it before anything is allocated, so an
/// absurd one is a message instead of std::bad_alloc or the OOM killer.
void require_host_memory(double bytes, const std::string& what);
/// Memory of this rank's device in bytes (0 on host-only builds).
std::size_t device_memory_bytes();

}  // namespace meshtrain
