#pragma once
/// \brief Sampling text from a model on any mesh (every rank runs the same forward; the
/// token choice is made from identical logits with an identically seeded generator).
///
/// With the KV cache (default) the prompt runs through the model once (prefill) and each
/// new token then costs one position's forward against the cached keys/values. Without it
/// every token recomputes the whole context. Both give the same tokens up to the rounding
/// of a different summation order; greedy decoding gives identical tokens unless two
/// logits tie to within that rounding. Past model.max_seq_len tokens of context, positions
/// shift with every token (the window slides), so each token then recomputes the last
/// max_seq_len tokens, with or without the cache.

#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.hpp"
#include "train/sampling_filter.hpp"
#include "train/session.hpp"

namespace meshtrain::train {

struct SamplingOptions {
  int max_new_tokens = 100;
  /// Temperature, top-k, top-p, min-p (train/sampling_filter.hpp); temperature 0 = greedy.
  SamplingSettings sampling;
  std::uint64_t seed = 1;
  std::int32_t stop_token = -1;
  bool kv_cache = true;      ///< false: recompute the whole context per token (for comparison)
  /// Also stop when the output ends with these ids, which are then dropped from it (a chat
  /// template's end-of-turn marker; several ids when the tokenizer has no token for it).
  std::vector<std::int32_t> stop_sequence;
};

/// Where generate_ids spent its time (seconds, wall clock on this rank).
struct GenerateStats {
  int prompt_tokens = 0;     ///< context fed at the first step (after the window cut)
  int new_tokens = 0;        ///< tokens returned (the stop token and stop sequence not counted)
  int steps = 0;             ///< forwards run (one per token drawn)
  double first_seconds = 0;  ///< the first token: the prompt's forward (prefill with the cache)
  double rest_seconds = 0;   ///< every later token
};

/// Continues `prompt` (token ids; may be empty: starts from the stop token if any, else 0).
template <class T>
std::vector<std::int32_t> generate_ids(Session<T>& session, std::vector<std::int32_t> prompt,
                                       const SamplingOptions& options, GenerateStats* stats = nullptr);

/// Decoded continuation of `prompt` text; `generated` (optional) receives the number of
/// tokens produced, fewer than `n_tokens` when the model emitted end-of-text.
template <class T>
std::string sample_text(Session<T>& session, const data::Tokenizer& tokenizer, const std::string& prompt,
                        int n_tokens, const SamplingSettings& sampling, std::uint64_t seed, bool kv_cache = true,
                        GenerateStats* stats = nullptr);

}  // namespace meshtrain::train
