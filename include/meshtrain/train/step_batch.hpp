#pragma once
/// \brief The inputs of one optimizer step staged for the device in one asynchronous copy:
/// every micro-step's token ids and targets (and document starts for packed rows, DPO's stored
/// reference log-probabilities, and on GPUs the embedding gradient's token index,
/// kernels::token_grad_index, sorted here where the tokens are), and the step's AdamW scalars. The host writes them into page-locked memory
/// (PinnedMem) and upload() copies that to device buffers allocated once, on the compute
/// stream, without waiting: the step's kernels read the device copies at fixed addresses,
/// which is what a CUDA graph replay needs (train/step.hpp).
///
/// Two pinned slots alternate: the host fills one while the copy of the other may still be
/// queued (the trainer runs one step ahead of the device); begin() waits for the copy that
/// last read the slot it is about to fill (a StreamEvent), which the device has normally long
/// passed. Host builds copy at once (device memory is host memory).
///
/// Evaluation and `meshtrain eval` stage their batches with TokenBatch (train/token_batch.hpp).

#include <cstdint>
#include <vector>

#include "core/memory.hpp"
#include "core/stream_event.hpp"
#include "core/views.hpp"
#include "kernels/adamw.hpp"
#include "model/transformer.hpp"

namespace meshtrain::train {

/// The per-step scalars the device reads (train/step.hpp): AdamW's, for the two cases the
/// host cannot tell apart when it queues the step (kernels::adamw_gate): [0] the previous step
/// was skipped, [1] it was applied. `counted_targets`: the global batch's counted targets
/// (StepRunner with a loss mask or packed rows: its gradient scale and loss divisor).
struct StepScalarsIn {
  kernels::AdamWScalars adam[2];
  double counted_targets = 0;
};

class StepBatch {
 public:
  /// `documents`: packed rows (document starts staged too). `token_index`: stage each
  /// micro-step's kernels::token_grad_index for this tp rank's vocabulary slice
  /// [vocab_start, vocab_start + vocab_local) (GPU builds). `reference`: stage DPO's stored
  /// reference log-probabilities, (micro_batch) doubles per micro-step.
  StepBatch(int micro_steps, int micro_batch, int seq_len, bool documents, bool token_index, std::int64_t vocab_start,
            std::int64_t vocab_local, bool reference = false);

  int micro_steps() const { return micro_steps_; }
  /// Starts the host side of the next upload: switches to the other pinned slot, waiting
  /// first for the copy that last read it.
  void begin();
  /// Micro-step `micro`'s (micro_batch, seq_len) host buffers of the slot begin() took.
  std::int32_t* host_in(int micro);
  std::int32_t* host_tgt(int micro);
  std::int32_t* host_doc(int micro);  ///< null without documents
  double* host_ref(int micro);        ///< null without a stored reference
  StepScalarsIn& host_scalars();
  /// The slot is written: each micro-step's token index is made (GPU builds), then the slot
  /// is copied to the device on the compute stream (asynchronously).
  void upload();

  /// Device copies of the last upload.
  const std::int32_t* in(int micro) const;
  const std::int32_t* tgt(int micro) const;
  const double* ref(int micro) const;  ///< null without a stored reference
  const StepScalarsIn* scalars() const;
  /// Micro-step `micro`'s shape: (micro_batch, seq_len), with the device and host (the
  /// pinned slot's) document starts, the fused attention's graph batch (set_ragged_batch)
  /// and the device token index when staged.
  model::BatchShape shape(int micro) const;

  /// Packed rows: the fused attention's graph batch the slot's largest micro-step needs
  /// (kernels::sdpa_ragged_batch of its document count); 0 without documents.
  int ragged_batch_needed();
  /// The graph batch every micro-step's shape carries from now on (model::BatchShape::
  /// ragged_batch; 0: each call's own). A step replayed from a CUDA graph fixes it.
  void set_ragged_batch(int batch) { ragged_batch_ = batch; }

 private:
  std::size_t at(int part, int micro) const;  // byte offset of a part of a micro-step in a slot
  int micro_steps_, micro_batch_, seq_len_;
  bool documents_, token_index_, reference_;
  std::int64_t vocab_start_, vocab_local_;
  std::size_t tokens_ = 0;           // micro_batch * seq_len
  std::size_t part_bytes_[5] = {};   // in, tgt, doc, token index, reference (bytes, 256-aligned)
  std::size_t micro_bytes_ = 0, scalars_at_ = 0, slot_bytes_ = 0;
  Kokkos::View<std::uint8_t*, PinnedMem> host_[2];
  StreamEvent copied_[2];
  int slot_ = 1;                     // the slot begin() took last
  int ragged_batch_ = 0;             // set_ragged_batch
  Buffer<std::uint8_t> device_;
};

}  // namespace meshtrain::train
