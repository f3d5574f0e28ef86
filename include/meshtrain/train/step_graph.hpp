#pragma once
/// \brief gpu.graphs: one training step (its micro-steps' forward and backward, the gradient
/// reduction, the norm, the gate and AdamW) captured into a CUDA graph once, then replayed.
///
/// What makes a replay correct: the step reads everything that changes from step to step
/// from device memory at addresses that do not change -- the staged inputs
/// (train/step_batch.hpp: tokens, targets, document starts, DPO's stored reference
/// log-probabilities, the embedding gradient's token index, the AdamW scalars with the
/// learning rate and the bias correction, the counted targets), the gate's flag of the previous
/// step --, passes nothing by value that changes, reads nothing back, and every buffer it
/// allocates comes from a private memory pool that keeps it for the graph
/// (core/memory.hpp, PrivatePool). The host side of the step (the FSDP engine's state, which
/// collectives run) must be the same at every step: the capture is made after
/// kWarmupSteps eager steps, and the engine's host state after the captured step must equal
/// the state before it (FsdpEngine::step_state), else the graph is dropped.
///
/// Packed rows: cuDNN's variable-length attention fixes its graph batch (the document count
/// rounded up to a power of two, kernels/sdpa_ragged.hpp), so one captured step serves only
/// the steps with its batch. Such a step's key is the graph batch of its largest micro-step,
/// the largest over the ranks (every rank must replay the same graph: it holds collectives),
/// and every micro-step of it runs with that batch (kernels::AttentionShape::ragged_batch;
/// with gpu.graphs=false too, so that turning graphs off changes no number);
/// the runner keeps one graph per key (GraphSchedule), at most kMaxStepGraphs, all sharing
/// one private pool -- they replay one after another on one stream, so the blocks of one
/// are free while another runs. Other runs have one key, 0.
///
/// The graphs keep the whole step's transient buffers (activations included) while they exist,
/// so the trainer releases them before an evaluation (StepRunner::release_graphs): the
/// evaluation then reuses those blocks, as it would between eager steps, instead of adding its
/// own to the device's peak, and the next step captures again.
///
/// Whether a run may use graphs at all is decided once, from its settings and build, by the
/// pure function graph_decision (tested on the CPU, tests/train/test_step_graph.cpp); every
/// rank decides the same. A step that must run eagerly (train.inject_nan_steps) runs eagerly;
/// a capture that CUDA refuses (cudaStreamEndCapture or instantiation fails on some rank)
/// makes every rank fall back to eager steps for the rest of the run, with one logged reason.
///
/// Kokkos kernels are captured as kernel nodes only when their functor is the kernel's
/// parameter (under 512 bytes): a larger one goes through Kokkos' constant-memory staging,
/// whose event wait a capture refuses and whose host buffer a replay would read anew.
/// perf/gpu/launch_check.sh finds such kernels in a CUDA build's symbols, and pack.sh refuses
/// to pack a build that has one.
/// Unverified without a GPU (the selfcheck path graphs.step checks it on one): the other
/// calls the step makes under capture -- cuBLAS/cuBLASLt (CUDA 12.2+ allocates its workspace
/// stream-ordered under capture), cuDNN through the frontend's execute() (its
/// graph_interface.h supports stream capture of execute(), with the host-copy sources kept
/// alive per graph), NCCL (captures supported since 2.9, uniformly on every rank, which the
/// agreement above provides).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/memory.hpp"

namespace meshtrain::train {

/// Eager steps before the first capture: the first step after a start or a load differs on
/// the host (the no_shard compute copies are converted from the masters once), and the first
/// launches of Kokkos kernels, cuDNN plans, cuBLAS handles and NCCL channels set themselves
/// up; the second step is the steady state the capture needs.
inline constexpr int kWarmupSteps = 2;
/// Captured steps a run keeps at most (packed rows: one per graph batch that occurs; the
/// document counts of a run's micro-batches rarely span more than two powers of two).
inline constexpr int kMaxStepGraphs = 6;

/// What decides, once per run, whether its steps may be replayed from a CUDA graph: settings
/// and build only, the same on every rank.
struct GraphConditions {
  bool requested = true;        ///< gpu.graphs
  bool cuda_build = false;      ///< a CUDA build (MESHTRAIN_WITH_CUDA)
  bool nccl = false;            ///< the step's communicators are NCCL's (device, stream-ordered)
  int world = 1;                ///< ranks of the job
  bool fused_optimizer = true;  ///< gpu.fused_optimizer
  bool fused_loss = true;       ///< gpu.fused_loss
  bool profiler = false;        ///< a Kokkos Tools library is loaded
};

struct GraphDecision {
  bool use = false;
  /// Why not (one sentence naming the setting and the fix), or how they are used.
  std::string reason;
};

/// The first reason the conditions rule graphs out, in the order of the fields above.
GraphDecision graph_decision(const GraphConditions& c);

/// What the runner does with one step (GraphSchedule::next).
enum class GraphAction { Eager, Capture, Replay };

/// \brief When a run captures and replays, per step key (see above): a step that may not be
/// replayed (the run's decision, or a step marked eager) runs eagerly; a key with a graph
/// replays it; a key without one is captured once the run has had kWarmupSteps eager steps
/// and this key one of them (its cuDNN graphs and workspaces are then built outside any
/// capture), while fewer than `max_graphs` are kept; otherwise the step runs eagerly. Pure
/// host bookkeeping, the same on every rank given the same keys (tests/train/test_step_graph).
class GraphSchedule {
 public:
  explicit GraphSchedule(int max_graphs = kMaxStepGraphs) : max_graphs_(max_graphs) {}
  /// The action for the next step; an Eager one is counted as run.
  GraphAction next(int key, bool graphable);
  /// The capture of `key` succeeded on every rank (its later steps replay it); a failed one
  /// turns graphs off for the run (the runner's decision), so it is not recorded.
  void captured(int key) { graphs_.push_back(key); }
  /// The graphs were released (StepRunner::release_graphs): a key's next step captures it
  /// again, at once (its cuDNN plans exist already).
  void forget_graphs() { graphs_.clear(); }
  int graphs() const { return static_cast<int>(graphs_.size()); }
  int max_graphs() const { return max_graphs_; }
  /// Whether the last Eager answer was for a key that would have been captured had fewer
  /// graphs been kept (the runner says so once).
  bool last_eager_was_full() const { return full_; }

 private:
  int max_graphs_;
  int eager_steps_ = 0;
  std::vector<int> graphs_, seen_;  // keys with a graph; keys run eagerly at least once
  bool full_ = false;
};

/// \brief One captured step: its executable graph, and what its capture counted on the host
/// that a replay must count again. Its buffers are kept by the PrivatePool it was captured
/// into, which must outlive it.
class StepGraph {
 public:
  explicit StepGraph(PrivatePool& pool);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  /// Opens the private pool and starts capturing the compute stream.
  void begin_capture();
  /// Ends the capture; false (with the reason) when CUDA refused it. The pool is closed
  /// either way (its blocks stay its graphs' until the pool is destroyed).
  bool end_capture(std::string* why);
  bool ready() const { return exec_ != nullptr; }
  /// Queues one replay on the compute stream.
  void launch();

  /// Host counters of the captured step, added again by each replay: collective operations
  /// and bytes (comm_stats), frozen all-gather bytes (the trainer's metrics).
  std::uint64_t comm_operations = 0, comm_bytes = 0, frozen_gather_bytes = 0;

 private:
  PrivatePool& pool_;
  void* exec_ = nullptr;  // cudaGraphExec_t
};

}  // namespace meshtrain::train
