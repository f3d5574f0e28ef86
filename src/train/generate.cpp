#include "comm/collectives.hpp"
#include "train/generate.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/check.hpp"
#include "core/timer.hpp"
#include "parallel/micro_step.hpp"

namespace meshtrain::train {
namespace {

/// The next token from full-vocabulary logits: argmax (temperature 0; the lower id of equal
/// logits) or a draw among the candidates of train/sampling_filter.hpp by their weights.
std::int32_t pick_token(const std::vector<float>& logits, const SamplingSettings& s, std::mt19937_64& gen) {
  if (s.temperature <= 0)
    return static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  const SamplingCandidates c = sampling_candidates(logits, s);
  std::discrete_distribution<int> pick(c.weights.begin(), c.weights.end());
  return c.ids[pick(gen)];
}

/// Host token ids -> device (n) int32.
Buffer<std::int32_t> to_device(const std::int32_t* ids, std::size_t n) {
  Buffer<std::int32_t> dev(n, MemCategory::Workspace);
  Kokkos::deep_copy(dev.view(), UView<const std::int32_t, HostMem>(ids, n));
  return dev;
}

}  // namespace

template <class T>
std::vector<std::int32_t> generate_ids(Session<T>& s, std::vector<std::int32_t> ids, const SamplingOptions& o,
                                       GenerateStats* stats) {
  if (ids.empty()) ids.push_back(o.stop_token >= 0 ? o.stop_token : 0);
  const int window = s.setup().spec.dims.max_seq_len;
  std::mt19937_64 gen(o.seed);
  std::vector<std::int32_t> out;
  GenerateStats st;
  st.prompt_tokens = std::min<int>(window, static_cast<int>(ids.size()));
  // The cache covers positions [0, T_max): the prompt and every token fed back, unless the
  // context outgrows the window first.
  model::KvCache<T> kv;
  if (o.kv_cache && o.max_new_tokens > 0 && static_cast<int>(ids.size()) <= window)
    kv = model::KvCache<T>(s.setup().spec.dims, s.tp(), 1,
                           std::min<int>(window, static_cast<int>(ids.size()) + o.max_new_tokens - 1));
  for (int n = 0; n < o.max_new_tokens; ++n) {
    const double t0 = now_seconds();
    const int len = static_cast<int>(ids.size());
    std::vector<float> logits;
    if (kv.T_max > 0 && len <= kv.T_max) {
      // Positions [0, kv.filled) are cached: feed the rest (the prompt at first, then the
      // one token chosen last) at positions kv.filled .. len-1.
      const int fresh = len - kv.filled;
      Buffer<std::int32_t> dev = to_device(ids.data() + kv.filled, fresh);
      logits = parallel::forward_logits_cached(s.engine(), s.model(), s.context(), dev.data(),
                                               model::BatchShape{1, fresh}, kv);
    } else {
      // No cache, or the context outgrew the window: the last `window` tokens at positions
      // 0 .. window-1, recomputed from scratch.
      const int ctx = std::min(window, len);
      Buffer<std::int32_t> dev = to_device(ids.data() + (len - ctx), ctx);
      logits = parallel::forward_logits(s.engine(), s.model(), s.context(), dev.data(), model::BatchShape{1, ctx},
                                        true);
    }
    std::int32_t next = pick_token(logits, o.sampling, gen);
    // Every rank computed the same logits; rank 0's choice is authoritative anyway.
    next = broadcast_value(s.mesh().world().mpi(), next);
    (n == 0 ? st.first_seconds : st.rest_seconds) += now_seconds() - t0;
    ++st.steps;
    if (next == o.stop_token) break;
    ids.push_back(next);
    out.push_back(next);
    const std::size_t k = o.stop_sequence.size();
    if (k > 0 && out.size() >= k && std::equal(o.stop_sequence.begin(), o.stop_sequence.end(), out.end() - k)) {
      out.resize(out.size() - k);
      break;
    }
  }
  st.new_tokens = static_cast<int>(out.size());
  if (stats) *stats = st;
  return out;
}

template <class T>
std::string sample_text(Session<T>& s, const data::Tokenizer& tok, const std::string& prompt, int n_tokens,
                        const SamplingSettings& sampling, std::uint64_t seed, bool kv_cache, GenerateStats* stats) {
  SamplingOptions o;
  o.max_new_tokens = n_tokens;
  o.sampling = sampling;
  o.seed = seed;
  o.stop_token = tok.eot_id() < s.setup().spec.dims.valid_vocab ? tok.eot_id() : -1;
  o.kv_cache = kv_cache;
  // BOS first when the model expects one, as every training document began: an empty
  // prompt then starts from BOS, not from the end-of-text id.
  const std::vector<std::int32_t> ids = generate_ids(s, tok.encode_sequence(prompt), o, stats);
  return tok.decode(ids);
}

template std::vector<std::int32_t> generate_ids<float>(Session<float>&, std::vector<std::int32_t>,
                                                       const SamplingOptions&, GenerateStats*);
template std::vector<std::int32_t> generate_ids<bf16>(Session<bf16>&, std::vector<std::int32_t>,
                                                      const SamplingOptions&, GenerateStats*);
template std::string sample_text<float>(Session<float>&, const data::Tokenizer&, const std::string&, int,
                                        const SamplingSettings&, std::uint64_t, bool, GenerateStats*);
template std::string sample_text<bf16>(Session<bf16>&, const data::Tokenizer&, const std::string&, int,
                                       const SamplingSettings&, std::uint64_t, bool, GenerateStats*);

}  // namespace meshtrain::train
