// GGUF -> model mapping pieces that the end-to-end test (gguf_eval.sh) exercises only on
// SmolLM2: llama.cpp's q/k row permutation is undone for every head size and head count,
// names map one to one, and half floats convert exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "../../src/checkpoint/gguf_import.hpp"
#include "formats/gguf_dequant.hpp"
#include "formats/half.hpp"
#include "model/param_spec.hpp"

namespace meshtrain::test {
namespace {

/// llama.cpp's convert_hf_to_gguf permute(): w.reshape(n_head, 2, hd/2, C).swapaxes(1, 2):
/// gguf row (h, i, j) at h*hd + 2i + j holds HF row h*hd + j*hd/2 + i.
std::vector<std::int64_t> llama_cpp_permute(int n_head, int hd) {
  std::vector<std::int64_t> gguf_to_hf(static_cast<std::size_t>(n_head) * hd);
  for (int h = 0; h < n_head; ++h)
    for (int i = 0; i < hd / 2; ++i)
      for (int j = 0; j < 2; ++j) gguf_to_hf[h * hd + 2 * i + j] = h * hd + j * (hd / 2) + i;
  return gguf_to_hf;
}

TEST(GgufImport, QkRowOrderIsTheInverseOfLlamaCppsPermutation) {
  for (int hd : {2, 8, 64, 128})
    for (int heads : {1, 3, 9}) {
      const std::vector<std::int64_t> g2h = llama_cpp_permute(heads, hd);
      for (std::int64_t r = 0; r < heads * hd; ++r)
        ASSERT_EQ(g2h[checkpoint::gguf_qk_row(r, hd)], r) << "hd " << hd << " heads " << heads << " row " << r;
    }
}

TEST(GgufImport, EveryLlamaParameterHasOneGgufName) {
  model::ModelDims d;
  d.family = model::Family::Llama;
  d.vocab = d.valid_vocab = 64;
  d.d_model = 16;
  d.n_layers = 3;
  d.n_heads = 4;
  d.n_kv_heads = 2;
  d.head_dim = 4;
  d.ffn_dim = 32;
  d.max_seq_len = 8;
  d.tied = false;
  std::set<std::string> names;
  for (const model::ParamSpec& p : model::build_param_specs(d, 1)) {
    const std::string g = checkpoint::gguf_tensor_name(p.name);
    ASSERT_FALSE(g.empty()) << p.name;
    EXPECT_TRUE(names.insert(g).second) << g << " twice";
  }
  EXPECT_EQ(checkpoint::gguf_tensor_name("model.layers.2.self_attn.k_proj.weight"), "blk.2.attn_k.weight");
  EXPECT_EQ(checkpoint::gguf_tensor_name("lm_head.weight"), "output.weight");
  EXPECT_EQ(checkpoint::gguf_tensor_name("model.layers.0.self_attn.q_proj.lora_A.weight"), "");
}

TEST(GgufImport, HalfToFloatIsExactForEveryHalf) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float f = formats::half_to_float(static_cast<std::uint16_t>(h));
    const std::uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
    const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, static_cast<int>(e) - 25);
    if (e == 0x1F) {
      EXPECT_TRUE(m ? std::isnan(f) : std::isinf(f)) << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), (h & 0x8000) ? -mag : mag) << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << h;
    }
  }
}

}  // namespace
}  // namespace meshtrain::test
