#include "meshtrain/train/generate.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "meshtrain/core/check.hpp"
#include "meshtrain/parallel/micro_step.hpp"

namespace meshtrain::train {

template <class T>
std::vector<std::int32_t> generate_ids(Session<T>& s, std::vector<std::int32_t> ids, const SamplingOptions& o) {
  if (ids.empty()) ids.push_back(o.stop_token >= 0 ? o.stop_token : 0);
  const int window = s.setup().dims.max_seq_len;
  std::mt19937_64 gen(o.seed);
  std::vector<std::int32_t> out;
  for (int n = 0; n < o.max_new_tokens; ++n) {
    const int len = std::min<int>(window, static_cast<int>(ids.size()));
    std::vector<std::int32_t> ctx(ids.end() - len, ids.end());
    Buffer<std::int32_t> dev(ctx.size(), MemCategory::Workspace);
    Kokkos::deep_copy(dev.view(), UView<std::int32_t, HostMem>(ctx.data(), ctx.size()));
    std::vector<float> logits =
        parallel::forward_logits(s.engine(), s.model(), s.context(), dev.data(), model::BatchShape{1, len}, true);
    std::int32_t next = 0;
    if (o.temperature <= 0) {
      next = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    } else {
      std::vector<int> order(logits.size());
      std::iota(order.begin(), order.end(), 0);
      const int k = o.top_k > 0 ? std::min<int>(o.top_k, static_cast<int>(order.size())) : static_cast<int>(order.size());
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
      std::vector<double> p(k);
      const double mx = logits[order[0]];
      for (int i = 0; i < k; ++i) p[i] = std::exp((logits[order[i]] - mx) / o.temperature);
      std::discrete_distribution<int> pick(p.begin(), p.end());
      next = order[pick(gen)];
    }
    // Every rank computed the same logits; rank 0's choice is authoritative anyway.
    MPI_CHECK(MPI_Bcast(&next, 1, MPI_INT32_T, 0, s.mesh().world().get()));
    if (next == o.stop_token) break;
    ids.push_back(next);
    out.push_back(next);
  }
  return out;
}

template <class T>
std::string sample_text(Session<T>& s, const data::Tokenizer& tok, const std::string& prompt, int n_tokens,
                        double temperature, int top_k, std::uint64_t seed, int* generated) {
  SamplingOptions o;
  o.max_new_tokens = n_tokens;
  o.temperature = temperature;
  o.top_k = top_k;
  o.seed = seed;
  o.stop_token = tok.eot_id() < s.setup().dims.valid_vocab ? tok.eot_id() : -1;
  const std::vector<std::int32_t> ids = generate_ids(s, tok.encode(prompt), o);
  if (generated) *generated = static_cast<int>(ids.size());
  return tok.decode(ids);
}

template std::vector<std::int32_t> generate_ids<float>(Session<float>&, std::vector<std::int32_t>, const SamplingOptions&);
template std::vector<std::int32_t> generate_ids<bf16>(Session<bf16>&, std::vector<std::int32_t>, const SamplingOptions&);
template std::string sample_text<float>(Session<float>&, const data::Tokenizer&, const std::string&, int, double, int,
                                        std::uint64_t, int*);
template std::string sample_text<bf16>(Session<bf16>&, const data::Tokenizer&, const std::string&, int, double, int,
                                       std::uint64_t, int*);

}  // namespace meshtrain::train
