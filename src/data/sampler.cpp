#include "meshtrain/data/sampler.hpp"

#include "meshtrain/core/error.hpp"
#include "meshtrain/data/hash.hpp"

namespace meshtrain::data {
namespace {

using ull = unsigned long long;

// Number of valid window starts (size - seq_len); UserError when there is none.
std::uint64_t count_starts(const std::shared_ptr<const TokenSource>& source, int seq_len) {
  MESHTRAIN_ASSERT(source != nullptr, "sampler without a token source");
  MESHTRAIN_REQUIRE(seq_len >= 1, "the sequence length must be at least 1, got %d", seq_len);
  MESHTRAIN_REQUIRE(has_window(*source, seq_len),
                    "%s has %llu tokens, too few for one window of seq_len + 1 = %llu tokens; use more "
                    "text or a shorter train.seq_len",
                    source->description().c_str(), static_cast<ull>(source->size()),
                    static_cast<ull>(seq_len) + 1);
  return source->size() - static_cast<std::uint64_t>(seq_len);
}

// Row j of inputs/targets (each (n, seq_len)) = window first + j, starting at start_of(first + j).
template <class StartOf>
void fill_windows(const TokenSource& src, int seq_len, std::uint64_t first, int n,
                  std::int32_t* inputs, std::int32_t* targets, StartOf start_of) {
  for (int j = 0; j < n; ++j) {
    const std::uint64_t s = start_of(first + static_cast<std::uint64_t>(j));
    const std::size_t row = static_cast<std::size_t>(j) * static_cast<std::size_t>(seq_len);
    src.read(s, seq_len, inputs + row);
    src.read(s + 1, seq_len, targets + row);
  }
}

}  // namespace

bool has_window(const TokenSource& source, int seq_len) {
  return seq_len >= 1 && source.size() >= static_cast<std::uint64_t>(seq_len) + 1;
}

Sampler::Sampler(std::shared_ptr<const TokenSource> source, int seq_len, std::uint64_t seed)
    : source_(std::move(source)), seq_len_(seq_len), key_(stream_key(seed, HashStream::TrainWindows)),
      starts_(count_starts(source_, seq_len)) {}

std::uint64_t Sampler::window_start(std::uint64_t w) const { return counter_hash(key_, w) % starts_; }

void Sampler::fill(std::uint64_t first_window, int n_windows, std::int32_t* inputs,
                   std::int32_t* targets) const {
  fill_windows(*source_, seq_len_, first_window, n_windows, inputs, targets,
               [this](std::uint64_t w) { return window_start(w); });
}

EvalSampler::EvalSampler(std::shared_ptr<const TokenSource> source, int seq_len)
    : source_(std::move(source)), seq_len_(seq_len), starts_(count_starts(source_, seq_len)) {}

std::uint64_t EvalSampler::windows_per_pass() const {
  return (source_->size() - 1) / static_cast<std::uint64_t>(seq_len_);
}

std::uint64_t EvalSampler::window_start(std::uint64_t i) const {
  // 128-bit product: i * seq_len may exceed 2^64 for a cursor far into a long eval.
  return static_cast<std::uint64_t>(static_cast<unsigned __int128>(i) * static_cast<unsigned>(seq_len_) % starts_);
}

void EvalSampler::fill(std::uint64_t first_window, int n_windows, std::int32_t* inputs,
                       std::int32_t* targets) const {
  fill_windows(*source_, seq_len_, first_window, n_windows, inputs, targets,
               [this](std::uint64_t i) { return window_start(i); });
}

std::uint64_t rank_first_window(std::uint64_t cursor, int accum_step, int micro, int dp_size, int dp_rank) {
  MESHTRAIN_ASSERT(micro >= 1 && dp_size >= 1 && dp_rank >= 0 && dp_rank < dp_size && accum_step >= 0,
                   "bad window layout: accum_step %d, micro %d, dp rank %d of %d", accum_step, micro, dp_rank,
                   dp_size);
  const auto m = static_cast<std::uint64_t>(micro);
  return cursor + static_cast<std::uint64_t>(accum_step) * m * static_cast<std::uint64_t>(dp_size) +
         static_cast<std::uint64_t>(dp_rank) * m;
}

}  // namespace meshtrain::data
