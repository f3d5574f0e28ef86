#pragma once
/// \brief One optimizer step: grad_accum micro-batches of forward/backward, gradient
/// reduction, the global gradient norm, the non-finite check, clipping and AdamW.
///
/// On GPUs the host queues a step and goes on without reading anything back (StepRunner):
/// the step's inputs are staged in pinned memory and copied once, asynchronously
/// (train/step_batch.hpp); the loss stays on the device, summed over the LM head's chunks and
/// the micro-steps, then over the world; with gpu.fused_optimizer the gradient norm, the clip
/// coefficient, the decision to skip a non-finite step (kernels::adamw_gate) and AdamW's
/// learning rate and bias correction are device values too. The step's scalars (loss, norm,
/// applied) come back by one asynchronous copy into pinned memory, read when the trainer
/// collects the step -- one step late: the trainer queues step s + 1 before it collects step
/// s, so the host prepares the next batch while the device computes (train/trainer.cpp). With
/// gpu.graphs the queued step is a CUDA graph replay where the run allows it
/// (train/step_graph.hpp).

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>

#include "comm/interval_ledger.hpp"
#include "core/stream_event.hpp"
#include "optim/adamw.hpp"
#include "optim/schedule.hpp"
#include "train/dpo.hpp"
#include "train/session.hpp"
#include "train/step_batch.hpp"
#include "train/step_graph.hpp"

namespace meshtrain::train {

struct StepSettings {
  optim::LrSchedule schedule;
  optim::AdamWSettings adam;
  double grad_clip = 1.0;               ///< 0 = no clipping
  bool activation_checkpointing = false;
  bool fused_optimizer = true;          ///< gpu.fused_optimizer: optim::FusedStep
  bool graphs = true;                   ///< gpu.graphs: replay steps from a CUDA graph where allowed
  bool preference = false;              ///< train.objective = dpo or simpo (train/dpo.hpp)
  PreferenceLoss pair_loss;             ///< which, with its beta (and SimPO's gamma)
};

StepSettings step_settings(const plan::RunSetup& setup);

struct StepResult {
  int step = -1;         ///< 0-based
  double loss = 0;       ///< mean loss over the counted targets of the global batch (same on every rank)
  double grad_norm = 0;  ///< true global norm before clipping
  double lr = 0;
  bool applied = false;  ///< false: non-finite loss or norm, optimizer state untouched
  DpoMetrics dpo;        ///< train.objective = dpo, simpo: the means over the global batch's pairs (dpo.loss = loss)
  /// Bytes this rank received in all-gathers of frozen segments during the step.
  std::uint64_t frozen_gather_bytes = 0;
  bool graph = false;    ///< replayed from a CUDA graph (the capture step included)
  /// CUDA builds: the step's time on the compute stream, from events (from the previous
  /// step's end when the two were queued back to back, else from its own start); NaN on
  /// host builds, where the trainer times the host.
  double device_seconds = NAN;
  /// NCCL: the step's device-timed communication (comm/interval_ledger.hpp), read with it;
  /// not measured (false) for a step replayed from a CUDA graph.
  DeviceCommTimes comm;
  bool comm_timed = true;
};

/// Writes this rank's micro-batch of micro-step `micro_step` into host buffers (micro_batch x
/// seq_len each).
using BatchFiller = std::function<void(int micro_step, std::int32_t* inputs, std::int32_t* targets)>;
/// Document-masked batches (packed rows, data.document_mask): fills micro-step's
/// (micro_batch, seq_len) document starts (model::BatchShape::doc_start).
using DocFiller = std::function<void(int micro_step, std::int32_t* doc_start)>;
/// DPO without LoRA: the stored reference log-probabilities of micro-step's sequences, (B).
using ReferenceFiller = std::function<const std::vector<double>*(int micro_step)>;

/// What a step is given. `poison` sets this rank's gradients to NaN before the norm (the
/// train.inject_nan_steps debug option). `counted_targets`: the number of targets >= 0 in the
/// whole global batch (all ranks, all micro-batches) when the batch has masked (-1) targets,
/// the loss-mask of instruction/chat data; the loss and its gradient are then the mean over
/// those targets, whatever the mesh and grad_accum. 0 (text data): every target counts,
/// global_batch * seq_len. With StepSettings::dpo the micro-batches hold preference pairs and
/// the loss is DPO's, the mean over the global batch's pairs (counted_targets is not used);
/// its reference is the base with the adapters off, or with `reference` the stored
/// log-probabilities (no LoRA).
struct StepInput {
  int step = 0;  ///< 0-based
  const BatchFiller* fill = nullptr;
  const DocFiller* docs = nullptr;
  const ReferenceFiller* reference = nullptr;
  bool poison = false;
  /// Run this step kernel by kernel even where a CUDA graph would replay it: a step with an
  /// injected NaN on any rank (the same on every rank: NCCL requires a collective to be
  /// captured on all of its ranks or on none). Implied by `poison`.
  bool eager = false;
  double counted_targets = 0;
};

/// \brief Runs the steps of one session: launch() queues a step, collect() returns the
/// oldest queued step's results, waiting for that step only. At most one step is queued and
/// not collected when the next is launched. Owns the staged inputs, the device scalars and,
/// with gpu.graphs, the CUDA graphs (one per step key, train/step_graph.hpp).
template <class T>
class StepRunner {
 public:
  /// `documents`: the run's batches are packed rows (every StepInput has `docs`). `counted`:
  /// the loss counts only some targets (a loss mask, or packed rows): the gradient scale and
  /// the loss's divisor, 1 / the global batch's counted targets (StepInput::counted_targets),
  /// reach the kernels through the step's uploaded scalars, so a replayed CUDA graph reads each
  /// step's own.
  StepRunner(Session<T>& session, const StepSettings& settings, bool documents, bool counted = false);
  ~StepRunner();

  /// Queues `in.step`. `updates`: the applied updates of the steps collected so far (AdamW's
  /// bias correction is that + 1, or + 2 when the step still queued turns out applied: the
  /// device picks, kernels::adamw_gate).
  void launch(const StepInput& in, int updates);
  /// The oldest launched step's results (waits for it; the trainer then counts the update).
  StepResult collect();
  /// Steps launched and not collected.
  int pending() const;
  /// The run's CUDA graph decision (gpu.graphs), and whether a capture has been dropped since.
  const GraphDecision& graph_decision() const { return decision_; }
  /// Destroys the captured graphs and returns their buffers to the shared pool (before an
  /// evaluation, which then reuses them); the next step captures again. No step may be
  /// pending. Nothing to do without graphs.
  void release_graphs();

 private:
  struct Pending;
  void run_body(const StepInput& in, Pending& p);
  void capture_and_launch(const StepInput& in, Pending& p, int key);
  /// DPO/SimPO: the pair sums (kPairSums) summed over the world, on the device.
  void world_pair_sums();
  /// The step's graph key (train/step_graph.hpp): with keyed_steps_, the fused attention's
  /// graph batch of the largest micro-step over the ranks, which every micro-step then uses
  /// (with or without graphs); else 0.
  int step_key();

  Session<T>& session_;
  StepSettings st_;
  bool documents_;
  bool counted_;                      // StepRunner(): the scale comes from the step's counted targets
  StepBatch batch_;
  double global_tokens_ = 0;          // text data: every target of the global batch counts
  Buffer<double> dev_;                // the step's device scalars (StepScalar in step.cpp)
  Buffer<float> row_scale_;           // (micro_batch x seq_len) per-row gradient scale, filled on the device:
                                      // counted_: 1 / counted targets; DPO/SimPO: each sequence's coefficient
  Buffer<float> pair_coef_;           // DPO/SimPO: (micro_batch) each sequence's coefficient
  Buffer<double> lengths_;            // SimPO: (micro_batch) each sequence's counted targets
  Buffer<double> zero_reference_;     // SimPO: (micro_batch) zeros, its reference (none is computed)
  Buffer<kernels::AdamWScalars> current_;  // the AdamW scalars adamw_gate chose
  Kokkos::View<double*, PinnedMem> readback_;  // kSlots x kReadback
  StreamEvent start_[3], end_[3];
  int next_slot_ = 0;
  std::deque<Pending> pending_;
  GraphDecision decision_;
  bool keyed_steps_ = false;          // packed rows on cuDNN's attention: step keys, one graph per key
  GraphSchedule schedule_;
  std::unique_ptr<PrivatePool> graph_pool_;  // every graph's buffers; declared before graphs_, which it outlives
  std::map<int, std::unique_ptr<StepGraph>> graphs_;  // step key -> its captured step
  bool told_full_ = false;            // the "no more graphs" line was logged
  bool told_release_ = false;         // the release_graphs line was logged
  bool last_applied_ = false;         // the last collected step's flag (host mirror of the gate's)
};

/// `local` summed over the world (each tp group's pairs once); the same on every rank.
template <class T>
DpoSums global_dpo_sums(const Session<T>& session, const DpoSums& local);

/// One step, launched and collected at once (tests, the reference dump). `updates` counts
/// applied updates (AdamW bias correction) and is incremented when the step is applied.
template <class T>
StepResult train_step(Session<T>& session, const StepSettings& settings, int step, int& updates,
                      const BatchFiller& fill, bool poison = false, double counted_targets = 0,
                      const DocFiller* docs = nullptr, const ReferenceFiller* reference = nullptr);

}  // namespace meshtrain::train
