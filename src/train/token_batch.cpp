#include "train/token_batch.hpp"

#include <algorithm>

#include "core/views.hpp"

namespace meshtrain::train {

TokenBatch::TokenBatch(int micro_batch, int seq_len, bool documents)
    : micro_batch(micro_batch), seq_len(seq_len), host_in(static_cast<std::size_t>(micro_batch) * seq_len), host_tgt(host_in.size()),
      host_doc(documents ? host_in.size() : 0), in(host_in.size(), MemCategory::Workspace),
      tgt(host_in.size(), MemCategory::Workspace), doc(host_doc.size(), MemCategory::Workspace) {}

void TokenBatch::upload() {
  Kokkos::deep_copy(in.view(), UView<std::int32_t, HostMem>(host_in.data(), host_in.size()));
  Kokkos::deep_copy(tgt.view(), UView<std::int32_t, HostMem>(host_tgt.data(), host_tgt.size()));
  if (!host_doc.empty()) Kokkos::deep_copy(doc.view(), UView<std::int32_t, HostMem>(host_doc.data(), host_doc.size()));
}

model::BatchShape TokenBatch::shape() const {
  model::BatchShape s{micro_batch, seq_len};
  if (!host_doc.empty()) {
    s.doc_start = doc.data();
    s.doc_start_host = host_doc.data();
  }
  return s;
}

double counted_targets(const std::vector<std::int32_t>& targets) {
  return static_cast<double>(std::count_if(targets.begin(), targets.end(), [](std::int32_t t) { return t >= 0; }));
}

double TokenBatch::counted_targets() const { return train::counted_targets(host_tgt); }

}  // namespace meshtrain::train
