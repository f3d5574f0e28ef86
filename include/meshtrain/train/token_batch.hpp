#pragma once
/// \brief Host-to-device staging of one micro-batch of token ids: the sampler fills the
/// host vectors, upload() copies them to the device buffers the model reads (a blocking
/// copy). The trainer's evaluation and `meshtrain eval` stage their tokens here; a training
/// step stages all of its micro-batches at once, asynchronously (train/step_batch.hpp).

#include <cstdint>
#include <vector>

#include "core/memory.hpp"
#include "model/transformer.hpp"

namespace meshtrain::train {

/// Targets the loss counts: those >= 0 (a loss mask, or padding, writes -1 for the others).
double counted_targets(const std::vector<std::int32_t>& targets);

struct TokenBatch {
  int micro_batch = 0, seq_len = 0;
  std::vector<std::int32_t> host_in, host_tgt;  ///< (micro_batch, seq_len) each, row-major
  /// Document-masked batches only (packed rows, data.document_mask): each token's document
  /// start (model::BatchShape::doc_start), same shape; empty otherwise.
  std::vector<std::int32_t> host_doc;
  Buffer<std::int32_t> in, tgt, doc;            ///< device copies, same shape

  TokenBatch(int micro_batch, int seq_len, bool documents = false);
  /// Copies host_in/host_tgt (and host_doc) to in/tgt (and doc).
  void upload();
  /// The model's shape of this batch: (micro_batch, seq_len), with doc_start when masked.
  model::BatchShape shape() const;
  /// counted_targets(host_tgt).
  double counted_targets() const;
};

}  // namespace meshtrain::train
