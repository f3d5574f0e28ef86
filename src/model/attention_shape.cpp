// model::attention_shape (model/transformer.hpp): one definition of how a block's heads map
// onto the attention kernels, for both families and for the cost model.
#include <cmath>

#include "model/transformer.hpp"

namespace meshtrain::model {

kernels::AttentionShape attention_shape(const ModelDims& d, const TpDims& t, BatchShape s, kernels::AttentionPath path) {
  kernels::AttentionShape as;
  as.B = s.B;
  as.T = s.T;
  as.Hq = t.heads;
  as.Hkv = t.kv_heads;  // GPT-2: n_kv_heads = n_heads, so its own query heads
  as.hd = d.head_dim;
  as.group = d.n_heads / d.n_kv_heads;
  as.q_head_offset = t.q_head_offset;
  as.kv_head_offset = t.kv_head_offset;
  as.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.head_dim)));
  as.doc_start = s.doc_start;
  as.doc_start_host = s.doc_start_host;
  as.ragged_batch = s.ragged_batch;
  as.path = path;
  return as;
}

}  // namespace meshtrain::model
