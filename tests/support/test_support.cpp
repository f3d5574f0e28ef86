#include "test_support.hpp"

#include <algorithm>
#include <cmath>

namespace meshtrain::test {
namespace {
Runtime* g_runtime = nullptr;
}

void set_runtime(Runtime* rt) { g_runtime = rt; }
Runtime& runtime() { return *g_runtime; }
const MpiComm& world() { return g_runtime->world(); }

Config tiny_model_config(const std::string& family, int seq_len, int vocab_size) {
  Config c;
  c.model.family = choice_of<ModelFamily>(family);
  c.model.vocab_size = vocab_size;
  c.model.d_model = 64;
  c.model.n_layers = 2;
  c.model.n_heads = 4;
  c.model.max_seq_len = seq_len;
  c.model.tie_embeddings = family == "gpt2";
  c.train.seq_len = seq_len;
  return c;
}

namespace {
/// ModelDims of a family from the settings the helpers below take (n_kv_heads -1: n_heads).
model::ModelDims dims_of(ModelFamily family, int vocab_size, int d_model, int n_layers, int n_heads, int n_kv_heads,
                         int max_seq_len) {
  model::ModelSettings c;
  c.family = family;
  c.vocab_size = vocab_size;
  c.d_model = d_model;
  c.n_layers = n_layers;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.max_seq_len = max_seq_len;
  return model::resolve_dims(c);
}
}  // namespace

model::ModelDims gpt2_dims(int vocab_size, int d_model, int n_layers, int n_heads, int max_seq_len) {
  return dims_of(ModelFamily::Gpt2, vocab_size, d_model, n_layers, n_heads, -1, max_seq_len);
}

model::ModelDims llama_dims(int vocab_size, int d_model, int n_layers, int n_heads, int n_kv_heads, int max_seq_len) {
  return dims_of(ModelFamily::Llama, vocab_size, d_model, n_layers, n_heads, n_kv_heads, max_seq_len);
}

std::vector<double> random_normal(std::size_t n, std::uint64_t seed, double stddev) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist(0.0, stddev);
  std::vector<double> out(n);
  for (auto& x : out) x = dist(gen);
  return out;
}

double rel_err(double a, double b, double floor) {
  return std::fabs(a - b) / std::max({std::fabs(a), std::fabs(b), floor});
}

}  // namespace meshtrain::test
