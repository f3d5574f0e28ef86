// The parameter registry: HF names and shapes, TP slicing, and the local->global box
// mapping that checkpoints and initialisation rely on.
#include <gtest/gtest.h>

#include <set>

#include "model/init.hpp"
#include "model/layout.hpp"
#include "test_support.hpp"

using namespace meshtrain;
using namespace meshtrain::model;

namespace {
ModelDims dims(const char* family, int kv = -1) {
  model::ModelSettings c;
  c.family = choice_of<ModelFamily>(family);
  c.vocab_size = 64;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = kv;
  c.ffn_dim = 64;
  c.max_seq_len = 16;
  c.tie_embeddings = std::string(family) == "gpt2";
  return resolve_dims(c);
}
}  // namespace

TEST(ParamSpec, Gpt2NamesAndShapesFollowHuggingFace) {
  const auto specs = build_param_specs(dims("gpt2"));
  std::map<std::string, std::vector<std::int64_t>> by_name;
  for (const auto& p : specs) by_name[p.name] = p.shape;
  EXPECT_EQ(by_name.at("transformer.wte.weight"), (std::vector<std::int64_t>{64, 32}));
  EXPECT_EQ(by_name.at("transformer.h.1.attn.c_attn.weight"), (std::vector<std::int64_t>{32, 96}));  // Conv1D (in, out)
  EXPECT_EQ(by_name.at("transformer.h.0.mlp.c_proj.weight"), (std::vector<std::int64_t>{64, 32}));
  EXPECT_EQ(by_name.count("lm_head.weight"), 0u);  // tied
}

TEST(ParamSpec, LlamaGqaSplitsOrReplicatesKv) {
  const auto split = build_param_specs(dims("llama", 2), 2);
  const auto repl = build_param_specs(dims("llama", 2), 4);
  for (const auto& p : split)
    if (p.role == "self_attn.k_proj.weight") EXPECT_EQ(p.split_dim, 0);
  for (const auto& p : repl)
    if (p.role == "self_attn.k_proj.weight") {
      EXPECT_EQ(p.split_dim, -1);
      EXPECT_TRUE(p.grad_tp_sum);
    }
}

// Every logical element of every parameter is covered exactly once by the union over tp
// ranks and shards of the mapped runs (counted ranks only), for fused and plain splits.
TEST(ParamSpec, RunsCoverEachLogicalElementOnce) {
  for (const char* fam : {"gpt2", "llama"}) {
    for (int tp : {1, 2, 4}) {
      const ModelDims d = dims(fam, std::string(fam) == "llama" ? 2 : -1);
      const auto specs = build_param_specs(d, tp);
      for (int shards : {1, 3}) {
        const auto layouts = build_layouts(specs, num_units(d), tp, shards);
        std::map<std::string, std::vector<int>> hits;
        for (const auto& p : specs) hits[p.name].assign(static_cast<std::size_t>(p.numel()), 0);
        for (int r = 0; r < tp; ++r)
          for (const auto& L : layouts)
            for (int s = 0; s < shards; ++s)
              for_each_global_run(specs, L, tp, r, s * L.shard_numel, (s + 1) * L.shard_numel,
                                  [&](const ParamSlot& slot, std::int64_t, std::int64_t row, std::int64_t col,
                                      std::int64_t n) {
                                    const ParamSpec& p = specs[slot.spec];
                                    if (!counted_on_tp_rank(p, r)) return;
                                    for (std::int64_t c = 0; c < n; ++c) hits[p.name][row * p.cols() + col + c]++;
                                  });
        for (const auto& [name, h] : hits)
          for (std::size_t i = 0; i < h.size(); ++i)
            ASSERT_EQ(h[i], 1) << fam << " tp=" << tp << " shards=" << shards << " " << name << " element " << i;
      }
    }
  }
}

TEST(ParamSpec, InitialValuesDoNotDependOnTheMesh) {
  const ModelDims d = dims("gpt2");
  const auto specs1 = build_param_specs(d, 1);
  const auto specs2 = build_param_specs(d, 2);
  const auto L1 = build_layouts(specs1, num_units(d), 1, 1);
  const auto L2 = build_layouts(specs2, num_units(d), 2, 2);
  // unit 1 element values by logical position must agree between tp=1 and tp=2 x 2 shards.
  std::map<std::pair<std::string, std::int64_t>, float> ref;
  std::vector<float> v(L1[1].padded());
  init_unit_range(specs1, L1[1], 1, 0, 0, L1[1].padded(), 5, v.data());
  for_each_global_run(specs1, L1[1], 1, 0, 0, L1[1].padded(),
                      [&](const ParamSlot& s, std::int64_t pos, std::int64_t row, std::int64_t col, std::int64_t n) {
                        for (std::int64_t c = 0; c < n; ++c)
                          ref[{specs1[s.spec].name, row * specs1[s.spec].cols() + col + c}] = v[pos + c];
                      });
  for (int r = 0; r < 2; ++r)
    for (int s = 0; s < 2; ++s) {
      const auto b = s * L2[1].shard_numel, e = (s + 1) * L2[1].shard_numel;
      std::vector<float> w(e - b);
      init_unit_range(specs2, L2[1], 2, r, b, e, 5, w.data());
      for_each_global_run(specs2, L2[1], 2, r, b, e,
                          [&](const ParamSlot& sl, std::int64_t pos, std::int64_t row, std::int64_t col, std::int64_t n) {
                            for (std::int64_t c = 0; c < n; ++c)
                              EXPECT_EQ(w[pos + c], (ref[{specs2[sl.spec].name, row * specs2[sl.spec].cols() + col + c}]));
                          });
    }
}
