#include "train/step_batch.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "kernels/embedding.hpp"
#include "kernels/sdpa_ragged.hpp"

namespace meshtrain::train {
namespace {
enum Part { kIn = 0, kTgt, kDoc, kIndex, kRef, kParts };
std::size_t aligned(std::size_t bytes) { return (bytes + 255) / 256 * 256; }
}  // namespace

StepBatch::StepBatch(int micro_steps, int micro_batch, int seq_len, bool documents, bool token_index,
                     std::int64_t vocab_start, std::int64_t vocab_local, bool reference)
    : micro_steps_(micro_steps), micro_batch_(micro_batch), seq_len_(seq_len), documents_(documents),
      token_index_(token_index), reference_(reference), vocab_start_(vocab_start), vocab_local_(vocab_local) {
  tokens_ = static_cast<std::size_t>(micro_batch) * static_cast<std::size_t>(seq_len);
  const std::size_t ids = aligned(tokens_ * sizeof(std::int32_t));
  part_bytes_[kIn] = ids;
  part_bytes_[kTgt] = ids;
  part_bytes_[kDoc] = documents ? ids : 0;
  part_bytes_[kIndex] =
      token_index ? aligned(static_cast<std::size_t>(kernels::token_grad_index_elems(static_cast<int>(tokens_))) *
                            sizeof(std::int32_t))
                  : 0;
  part_bytes_[kRef] = reference ? aligned(static_cast<std::size_t>(micro_batch) * sizeof(double)) : 0;
  micro_bytes_ = 0;
  for (int p = 0; p < kParts; ++p) micro_bytes_ += part_bytes_[p];
  scalars_at_ = micro_bytes_ * static_cast<std::size_t>(micro_steps);
  slot_bytes_ = scalars_at_ + aligned(sizeof(StepScalarsIn));
  for (auto& h : host_) h = Kokkos::View<std::uint8_t*, PinnedMem>("meshtrain::step_batch", slot_bytes_);
  device_ = Buffer<std::uint8_t>(slot_bytes_, MemCategory::Workspace);
}

std::size_t StepBatch::at(int part, int micro) const {
  std::size_t off = micro_bytes_ * static_cast<std::size_t>(micro);
  for (int p = 0; p < part; ++p) off += part_bytes_[p];
  return off;
}

void StepBatch::begin() {
  slot_ = 1 - slot_;
  copied_[slot_].synchronize();  // the copy that read this slot two uploads ago
}

std::int32_t* StepBatch::host_in(int micro) {
  return reinterpret_cast<std::int32_t*>(host_[slot_].data() + at(kIn, micro));
}
std::int32_t* StepBatch::host_tgt(int micro) {
  return reinterpret_cast<std::int32_t*>(host_[slot_].data() + at(kTgt, micro));
}
std::int32_t* StepBatch::host_doc(int micro) {
  return documents_ ? reinterpret_cast<std::int32_t*>(host_[slot_].data() + at(kDoc, micro)) : nullptr;
}
double* StepBatch::host_ref(int micro) {
  return reference_ ? reinterpret_cast<double*>(host_[slot_].data() + at(kRef, micro)) : nullptr;
}
StepScalarsIn& StepBatch::host_scalars() {
  return *reinterpret_cast<StepScalarsIn*>(host_[slot_].data() + scalars_at_);
}

void StepBatch::upload() {
  if (token_index_)
    for (int a = 0; a < micro_steps_; ++a)
      kernels::token_grad_index(host_in(a), static_cast<int>(tokens_), vocab_start_, vocab_local_,
                                reinterpret_cast<std::int32_t*>(host_[slot_].data() + at(kIndex, a)));
  Kokkos::deep_copy(ExecSpace(), device_.view(), UView<const std::uint8_t, PinnedMem>(host_[slot_].data(), slot_bytes_));
  copied_[slot_].record();
}

const std::int32_t* StepBatch::in(int micro) const {
  return reinterpret_cast<const std::int32_t*>(device_.data() + at(kIn, micro));
}
const std::int32_t* StepBatch::tgt(int micro) const {
  return reinterpret_cast<const std::int32_t*>(device_.data() + at(kTgt, micro));
}
const double* StepBatch::ref(int micro) const {
  return reference_ ? reinterpret_cast<const double*>(device_.data() + at(kRef, micro)) : nullptr;
}
const StepScalarsIn* StepBatch::scalars() const {
  return reinterpret_cast<const StepScalarsIn*>(device_.data() + scalars_at_);
}

int StepBatch::ragged_batch_needed() {
  int batch = 0;
  if (!documents_) return batch;
  for (int a = 0; a < micro_steps_; ++a)
    batch = std::max(batch, kernels::sdpa_ragged_batch(kernels::sdpa_ragged_documents(host_doc(a), micro_batch_, seq_len_)));
  return batch;
}

model::BatchShape StepBatch::shape(int micro) const {
  model::BatchShape s{micro_batch_, seq_len_};
  if (documents_) {
    s.doc_start = reinterpret_cast<const std::int32_t*>(device_.data() + at(kDoc, micro));
    s.doc_start_host = reinterpret_cast<const std::int32_t*>(host_[slot_].data() + at(kDoc, micro));
    s.ragged_batch = ragged_batch_;
  }
  if (token_index_) s.token_grad_index = reinterpret_cast<const std::int32_t*>(device_.data() + at(kIndex, micro));
  return s;
}

}  // namespace meshtrain::train
