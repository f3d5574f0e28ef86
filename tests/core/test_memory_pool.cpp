// MemoryPool: blocks are cached by exact size and handed out again, the counters follow
// every allocate/release, and training steps after the first call the underlying
// allocator (cudaMalloc on GPUs, Kokkos' host allocator on CPUs) zero times, for every
// FSDP strategy and both compute precisions, and with packed rows; nor does anything else
// allocate Kokkos memory in those steps (Kokkos Tools' allocation callback), which on GPUs
// would be a cudaMalloc inside the CUDA graph's capture of a step (gpu.graphs).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <Kokkos_Core.hpp>

#include "app/run_spec_resolve.hpp"
#include "config/config.hpp"
#include "core/fault.hpp"
#include "core/memory.hpp"
#include "plan/run_setup.hpp"
#include "train/session.hpp"
#include "train/step.hpp"
#include "test_support.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_UNDER_ASAN 1
#endif
#endif
#if defined(TEST_UNDER_ASAN)
#include <sanitizer/asan_interface.h>
#endif

using namespace meshtrain;

namespace {

int category(MemCategory c) { return static_cast<int>(c); }

TEST(MemoryPool, ReleasedBlocksAreReusedForTheSameSizeOnly) {
  MemoryPool& pool = MemoryPool::instance();
  pool.trim();
  const MemoryStats s0 = pool.stats();
  void* a = nullptr;
  {
    Buffer<float> b(1000, MemCategory::Workspace);
    a = b.data();
    EXPECT_EQ(pool.stats().in_use[category(MemCategory::Workspace)] - s0.in_use[category(MemCategory::Workspace)],
              4000u);
  }
  EXPECT_EQ(pool.stats().total_in_use, s0.total_in_use);
  EXPECT_EQ(pool.stats().reserved, s0.reserved + 4000) << "a released block stays reserved (cached)";
  const auto calls = pool.stats().device_allocations;
  {
    Buffer<float> same(1000, MemCategory::Activations);  // same bytes, other category
    EXPECT_EQ(same.data(), a) << "the cached block of the same size is handed out again";
    EXPECT_EQ(pool.stats().device_allocations, calls);
    Buffer<float> other(1001, MemCategory::Workspace);  // another size: a new block
    EXPECT_NE(other.data(), a);
    EXPECT_EQ(pool.stats().device_allocations, calls + 1);
    EXPECT_GE(pool.stats().peak_total_in_use, s0.total_in_use + 8004);
  }
  pool.trim();
  EXPECT_EQ(pool.stats().reserved, s0.reserved) << "trim returns every cached block";
}

TEST(MemoryPool, AFailedAllocationReturnsTheCacheAndIsTriedOnceMore) {
  // Blocks are cached by exact size, so cached memory may never be asked for again; an
  // allocation that fails frees the shared cache and is tried once more before the failure
  // is the caller's (core/memory.cpp). The failure: MESHTRAIN_FAULT's pool.allocate, fired once.
  MemoryPool& pool = MemoryPool::instance();
  pool.trim();
  const MemoryStats s0 = pool.stats();
  { Buffer<float> unused(4096, MemCategory::Workspace); }  // 16 KiB cached, of a size asked for no more
  ASSERT_EQ(pool.stats().reserved, s0.reserved + 16384);
  fault::configure("pool.allocate:action=enomem");
  {
    Buffer<float> b(1000, MemCategory::Workspace);
    EXPECT_NE(b.data(), nullptr);
    EXPECT_EQ(pool.stats().cache_flushes, s0.cache_flushes + 1) << "the failure was retried after freeing the cache";
    EXPECT_EQ(pool.stats().reserved, s0.reserved + 4000) << "the cached 16 KiB block went back to the system";
    EXPECT_EQ(pool.stats().total_in_use, s0.total_in_use + 4000);
  }
  // Nothing cached: nothing to free, the allocator's failure is the caller's, nothing counted.
  pool.trim();
  const MemoryStats s1 = pool.stats();
  fault::configure("pool.allocate:action=enomem");
  try {
    Buffer<float> refused(10, MemCategory::Workspace);
    ADD_FAILURE() << "the allocation did not fail";
  } catch (const OutOfDeviceMemory& e) {
    // One message with the request and the pool's state (the command line aborts with it).
    const std::string what = e.what();
    EXPECT_NE(what.find("a block of 40 B (workspace) could not be allocated"), std::string::npos) << what;
    EXPECT_NE(what.find("train.micro_batch"), std::string::npos) << what;
  }
  EXPECT_EQ(pool.stats().cache_flushes, s1.cache_flushes);
  EXPECT_EQ(pool.stats().total_in_use, s1.total_in_use);
  EXPECT_EQ(pool.stats().reserved, s1.reserved);
  // A private pool open (a CUDA graph's capture, which forbids cudaFree): the shared cache
  // stays and the failure propagates.
  { Buffer<float> unused(4096, MemCategory::Workspace); }
  {
    PrivatePool priv;
    pool.open_private(&priv);
    fault::configure("pool.allocate:action=enomem");
    EXPECT_THROW(Buffer<float>(10, MemCategory::Workspace), OutOfDeviceMemory);
    pool.open_private(nullptr);
  }
  EXPECT_EQ(pool.stats().reserved, s1.reserved + 16384) << "the shared cache is kept while a private pool is open";
  EXPECT_EQ(pool.stats().cache_flushes, s1.cache_flushes);
  fault::configure("");
  pool.trim();
}

TEST(MemoryPool, PoisonsExactlyInAnAddressSanitizerBuild) {
  // The build this test is compiled in, and the library's own answer, agree.
#if defined(TEST_UNDER_ASAN)
  EXPECT_TRUE(memory_pool_poisons()) << "an AddressSanitizer build whose pool does not poison";
#else
  EXPECT_FALSE(memory_pool_poisons()) << "only an AddressSanitizer host build poisons";
#endif
}

// Only an AddressSanitizer build (the cpu-asan preset) has this test: elsewhere it would be a
// skip, which makes the whole program report skipped (tests/support/mpi_main.cpp).
#if defined(TEST_UNDER_ASAN)
TEST(MemoryPool, UnderAddressSanitizerACachedBlockAndEveryBlockTailArePoisoned) {
  // The pool's blocks are live allocations to ASan until trim(): without its poisoning a
  // Buffer used after release, or written past its end, would go unreported (core/memory.cpp).
  ASSERT_TRUE(memory_pool_poisons());
  MemoryPool& pool = MemoryPool::instance();
  pool.trim();
  constexpr std::size_t kBytes = 1001 * sizeof(float);  // a tail that starts mid-granule
  char* a = nullptr;
  {
    Buffer<float> b(1001, MemCategory::Workspace);
    a = reinterpret_cast<char*>(b.data());
    EXPECT_EQ(__asan_region_is_poisoned(a, kBytes), nullptr) << "a block in use is addressable";
    EXPECT_TRUE(__asan_address_is_poisoned(a + kBytes)) << "the first byte past its end is poisoned";
    EXPECT_TRUE(__asan_address_is_poisoned(a + kBytes + 63)) << "and so is the rest of its tail";
  }
  EXPECT_EQ(__asan_region_is_poisoned(a, kBytes), a) << "a released block is poisoned from its first byte";
  EXPECT_TRUE(__asan_address_is_poisoned(a + kBytes - 1)) << "to its last";
  {
    Buffer<float> again(1001, MemCategory::Activations);
    ASSERT_EQ(reinterpret_cast<char*>(again.data()), a) << "the cached block is handed out again";
    EXPECT_EQ(__asan_region_is_poisoned(a, kBytes), nullptr) << "handed out again: addressable";
    EXPECT_TRUE(__asan_address_is_poisoned(a + kBytes)) << "its tail still poisoned";
    // A private pool's free list (CUDA graphs' blocks) poisons alike.
    PrivatePool priv;
    pool.open_private(&priv);
    { Buffer<float> in_scope(77, MemCategory::Workspace); a = reinterpret_cast<char*>(in_scope.data()); }
    pool.open_private(nullptr);
    EXPECT_EQ(__asan_region_is_poisoned(a, 77 * sizeof(float)), a) << "released into a private pool: poisoned";
  }
  pool.trim();
}
#endif

TEST(MemoryPool, APrivatePoolKeepsEveryBlockItsScopeTouched) {
  // A CUDA graph replays the addresses its capture used: blocks allocated or released while
  // a private pool is open stay that pool's until it is destroyed (core/memory.hpp).
  MemoryPool& pool = MemoryPool::instance();
  pool.trim();
  const MemoryStats s0 = pool.stats();
  void* cached = nullptr;
  { Buffer<float> b(500, MemCategory::Workspace); cached = b.data(); }  // in the shared cache
  Buffer<float> before(300, MemCategory::Workspace);                    // held across the scope
  void* before_ptr = before.data();
  void *inside = nullptr, *adopted = nullptr;
  auto priv = std::make_unique<PrivatePool>();
  pool.open_private(priv.get());
  {
    Buffer<float> a(500, MemCategory::Activations);
    EXPECT_EQ(a.data(), cached) << "a shared cached block of the size is taken (and becomes the pool's)";
    inside = a.data();
  }
  {
    Buffer<float> again(500, MemCategory::Workspace);
    EXPECT_EQ(again.data(), inside) << "released inside the scope: back to the private pool, handed out again";
  }
  before.reset();  // a block from before the scope, released during it: adopted
  adopted = before_ptr;
  EXPECT_EQ(priv->bytes(), 2000u + 1200u);
  pool.open_private(nullptr);
  {
    Buffer<float> outside(500, MemCategory::Workspace);
    EXPECT_NE(outside.data(), inside) << "a closed private pool's block is not handed to other code";
    Buffer<float> outside2(300, MemCategory::Workspace);
    EXPECT_NE(outside2.data(), adopted);
  }
  // Reopened (the next capture of the same graph), its blocks are handed out again.
  pool.open_private(priv.get());
  {
    Buffer<float> a(500, MemCategory::Workspace);
    EXPECT_EQ(a.data(), inside);
  }
  pool.open_private(nullptr);
  EXPECT_EQ(pool.stats().total_in_use, s0.total_in_use);
  priv.reset();  // destroyed: its blocks are shared again
  {
    Buffer<float> a(500, MemCategory::Workspace), b(300, MemCategory::Workspace);
    const bool shared500 = a.data() == inside, shared300 = b.data() == adopted;
    EXPECT_TRUE(shared500);
    EXPECT_TRUE(shared300);
  }
  pool.trim();
  EXPECT_EQ(pool.stats().reserved, s0.reserved) << "trim returns every cached block, the private ones included";
}

TEST(MemoryPool, ABlockAllocatedInAPrivateScopeAndKeptReturnsToItsPool) {
  // A holder that outlives the scope (state made lazily during a captured step) gives its
  // block back to the private pool, not to the shared cache.
  MemoryPool& pool = MemoryPool::instance();
  pool.trim();
  auto priv = std::make_unique<PrivatePool>();
  pool.open_private(priv.get());
  Buffer<double> kept(77, MemCategory::Workspace);
  void* ptr = kept.data();
  pool.open_private(nullptr);
  kept.reset();
  {
    Buffer<double> other(77, MemCategory::Workspace);
    EXPECT_NE(other.data(), ptr);
  }
  priv.reset();
  {
    Buffer<double> other(77, MemCategory::Workspace);
    const bool shared = other.data() == ptr;
    EXPECT_TRUE(shared);
  }
  pool.trim();
}

Config small_model(const std::string& strategy, const std::string& precision) {
  Config c = test::tiny_model_config("gpt2", 32);
  c.parallel.strategy = choice_of<StrategyChoice>(strategy);
  c.train.micro_batch = 2;
  c.train.grad_accum = 2;  // the accumulation path allocates too
  c.train.precision = choice_of<Precision>(precision);
  c.data.dir = "random";
  c.parallel.memory_limit = "1GiB";
  return c;
}

/// Every Kokkos allocation between construction and stop(), by label, from Kokkos Tools'
/// allocation callback: on GPUs each would be a cudaMalloc, which a CUDA graph's capture of
/// the step refuses (gpu.graphs), beside the pool's own (which counts its calls itself).
class KokkosAllocations {
 public:
  KokkosAllocations() {
    seen().clear();
    Kokkos::Tools::Experimental::set_allocate_data_callback(
        [](Kokkos::Profiling::SpaceHandle, const char* label, const void*, std::uint64_t) {
          seen().emplace_back(label);
        });
  }
  ~KokkosAllocations() { stop(); }
  std::vector<std::string> stop() {
    Kokkos::Tools::Experimental::set_allocate_data_callback(nullptr);
    return seen();
  }

 private:
  static std::vector<std::string>& seen() {
    static std::vector<std::string> labels;
    return labels;
  }
};

/// Four steps of one StepRunner, as the trainer runs them (packed rows: documents of 8
/// tokens): after the first, no call of the pool's allocator and no Kokkos allocation.
template <class T>
void expect_steady_state(const Config& cfg, bool documents) {
  const plan::RunSetup setup = app::resolve_run(cfg, test::runtime().topology());
  train::Session<T> s(test::runtime(), setup);
  s.engine().init_parameters(7);
  const train::StepSettings settings = train::step_settings(setup);
  const int rank = test::runtime().topology().world_rank;
  const int tokens = cfg.train.micro_batch * cfg.train.seq_len;
  const train::BatchFiller fill = [&](int micro, std::int32_t* in, std::int32_t* tgt) {
    for (int i = 0; i < tokens; ++i) {
      in[i] = (i * 7 + micro * 3 + rank) % 251;
      tgt[i] = (i * 5 + micro + rank) % 251;
    }
  };
  const train::DocFiller docs = [&](int, std::int32_t* doc_start) {
    for (int i = 0; i < tokens; ++i) doc_start[i] = (i % cfg.train.seq_len) / 8 * 8;
  };
  train::StepRunner<T> runner(s, settings, documents);
  int updates = 0;
  const auto step = [&](int n) {
    train::StepInput in;
    in.step = n;
    in.fill = &fill;
    in.docs = documents ? &docs : nullptr;
    runner.launch(in, updates);
    if (runner.collect().applied) ++updates;
  };
  step(0);  // first step: every buffer size appears
  const auto after_first = MemoryPool::instance().stats().device_allocations;
  KokkosAllocations kokkos;
  for (int n = 1; n < 4; ++n) step(n);
  const std::vector<std::string> labels = kokkos.stop();
  const std::string run = std::string(choice_name(cfg.parallel.strategy)) + ", " + choice_name(cfg.train.precision) +
                          (documents ? ", packed rows" : "");
  EXPECT_EQ(MemoryPool::instance().stats().device_allocations, after_first)
      << "steps 2-4 called the device allocator (" << run << ")";
  EXPECT_TRUE(labels.empty()) << "steps 2-4 allocated Kokkos views (" << run
                              << "): " << ::testing::PrintToString(labels);
  EXPECT_EQ(updates, 4);
}

TEST(MemoryPool, NoAllocatorCallsAfterTheFirstStep) {
  for (const char* strategy : {"no_shard", "full_shard", "shard_grad_op"}) {
    SCOPED_TRACE(strategy);
    expect_steady_state<float>(small_model(strategy, "fp32"), false);
    expect_steady_state<bf16>(small_model(strategy, "bf16"), false);
    expect_steady_state<bf16>(small_model(strategy, "bf16"), true);
  }
}

}  // namespace
