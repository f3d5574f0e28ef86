#pragma once
/// \brief One optimizer step: grad_accum micro-batches of forward/backward, gradient
/// reduction, the global gradient norm, the non-finite check, clipping and AdamW.

#include <cstdint>
#include <functional>

#include "optim/adamw.hpp"
#include "optim/schedule.hpp"
#include "train/dpo.hpp"
#include "train/session.hpp"

namespace meshtrain::train {

struct StepSettings {
  optim::LrSchedule schedule;
  optim::AdamWSettings adam;
  double grad_clip = 1.0;               ///< 0 = no clipping
  bool activation_checkpointing = false;
  bool fused_optimizer = true;          ///< gpu.fused_optimizer: optim::FusedStep
  bool dpo = false;                     ///< train.objective = dpo (train/dpo.hpp)
  double dpo_beta = 0.1;                ///< train.dpo_beta
};

StepSettings step_settings(const plan::RunSetup& setup);

struct StepResult {
  double loss = 0;       ///< mean loss over the counted targets of the global batch (same on every rank)
  double grad_norm = 0;  ///< true global norm before clipping
  double lr = 0;
  bool applied = false;  ///< false: non-finite loss or norm, optimizer state untouched
  DpoMetrics dpo;        ///< train.objective = dpo: the means over the global batch's pairs (dpo.loss = loss)
};

/// Writes this rank's micro-batch of micro-step `micro_step` into host buffers (micro_batch x
/// seq_len each).
using BatchFiller = std::function<void(int micro_step, std::int32_t* inputs, std::int32_t* targets)>;
/// Document-masked batches (packed rows, data.document_mask): fills micro-step's
/// (micro_batch, seq_len) document starts (model::BatchShape::doc_start).
using DocFiller = std::function<void(int micro_step, std::int32_t* doc_start)>;
/// DPO without LoRA: the stored reference log-probabilities of micro-step's sequences, (B).
using ReferenceFiller = std::function<const std::vector<double>*(int micro_step)>;

/// Runs optimizer step `step` (0-based). `updates` counts applied updates (AdamW bias
/// correction) and is incremented when the step is applied. `poison` sets this rank's
/// gradients to NaN before the norm (the train.inject_nan_steps debug option).
/// `counted_targets`: the number of targets >= 0 in the whole global batch (all ranks, all
/// micro-batches) when the batch has masked (-1) targets, the loss-mask of instruction/chat
/// data; the loss and its gradient are then the mean over those targets, whatever the mesh
/// and grad_accum. 0 (text data): every target counts, global_batch * seq_len.
/// With settings.dpo the micro-batches hold preference pairs and the loss is DPO's, the mean
/// over the global batch's pairs (counted_targets is not used); its reference is the base with
/// the adapters off, or with `reference` the stored log-probabilities (no LoRA).
/// `local` summed over the world (each tp group's pairs once); the same on every rank.
template <class T>
DpoSums global_dpo_sums(const Session<T>& session, const DpoSums& local);

template <class T>
StepResult train_step(Session<T>& session, const StepSettings& settings, int step, int& updates,
                      const BatchFiller& fill, bool poison = false, double counted_targets = 0,
                      const DocFiller* docs = nullptr, const ReferenceFiller* reference = nullptr);

}  // namespace meshtrain::train
