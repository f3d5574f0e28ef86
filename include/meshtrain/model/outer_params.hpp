#pragma once
/// \brief The outer unit's parameters (embeddings, final norm, LM head) as the model reads
/// them: the gathered unit buffer in the compute dtype, or -- with a quantized base
/// (model.base_quant, QLoRA), whose outer unit the FSDP engine keeps quantized for the whole
/// step -- the segment's quantized payload, of which the embedding dequantizes only the rows
/// a micro-batch looks up and the LM head one chunk at a time just before its GEMM
/// (model/transformer.cpp), and its 1-D parameters (the final norm) in T.
///
/// Why: the outer unit is gathered at the step's start (the embedding) and needed again at
/// its end (the head), so it is held through every block's forward. Dequantized whole it is
/// the largest compute-dtype copy of a QLoRA step (a 128256 x 2048 tied embedding: 0.49 GiB
/// in bf16 against 0.13 GiB of NF4).

#include <cstdint>
#include <vector>

#include "core/error.hpp"
#include "kernels/dequant.hpp"

namespace meshtrain::model {

/// A 1-D parameter of a frozen segment kept in the compute dtype beside its quantized
/// payload: unit elements [offset, offset + numel).
struct DenseSlot {
  std::int64_t offset = 0, numel = 0;
};

template <class T>
struct OuterParams {
  /// The gathered unit buffer (element i = unit element i); nullptr when kept quantized.
  const T* unit = nullptr;
  /// Kept quantized: the unit's frozen segment (the whole unit: the outer unit of a LoRA run
  /// has nothing trainable), as kernels::dequantize_rect / dequantize_gather_rows read it.
  kernels::QuantSegment quant;
  /// Kept quantized: the segment's 1-D parameters in T, each slot's values after the previous
  /// ones' in `dense_slots` order.
  const T* dense = nullptr;
  const std::vector<DenseSlot>* dense_slots = nullptr;

  OuterParams() = default;
  /// The plain form: the unit buffer in T.
  OuterParams(const T* unit_buffer) : unit(unit_buffer) {}  // NOLINT(google-explicit-constructor)

  bool quantized() const { return unit == nullptr; }
  /// The T values of the parameter that starts at unit element `offset`: in the unit buffer,
  /// or (kept quantized) a 1-D parameter's copy.
  const T* at(std::int64_t offset) const {
    if (unit != nullptr) return unit + offset;
    MESHTRAIN_ASSERT(dense_slots != nullptr, "a quantized outer unit without its 1-D parameters");
    std::int64_t at = 0;
    for (const DenseSlot& d : *dense_slots) {
      if (offset >= d.offset && offset < d.offset + d.numel) return dense + at + (offset - d.offset);
      at += d.numel;
    }
    MESHTRAIN_ASSERT(false, "unit element %lld is quantized: it has no compute-dtype copy", static_cast<long long>(offset));
    return nullptr;
  }
};

}  // namespace meshtrain::model
