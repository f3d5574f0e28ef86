#pragma once
/// \brief Sampling text from a model on any mesh (every rank runs the same forward; the
/// token choice is made from identical logits with an identically seeded generator).

#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/data/tokenizer.hpp"
#include "meshtrain/train/session.hpp"

namespace meshtrain::train {

struct SamplingOptions {
  int max_new_tokens = 100;
  double temperature = 0.8;  ///< 0 = greedy
  int top_k = 40;            ///< 0 = whole vocabulary
  std::uint64_t seed = 1;
  std::int32_t stop_token = -1;
};

/// Continues `prompt` (token ids; may be empty: starts from the stop token if any, else 0).
template <class T>
std::vector<std::int32_t> generate_ids(Session<T>& session, std::vector<std::int32_t> prompt,
                                       const SamplingOptions& options);

/// Decoded continuation of `prompt` text; `generated` (optional) receives the number of
/// tokens produced, fewer than `n_tokens` when the model emitted end-of-text.
template <class T>
std::string sample_text(Session<T>& session, const data::Tokenizer& tokenizer, const std::string& prompt,
                        int n_tokens, double temperature, int top_k, std::uint64_t seed, int* generated = nullptr);

}  // namespace meshtrain::train
