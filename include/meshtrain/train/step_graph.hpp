#pragma once
/// \brief gpu.graphs: one training step (its micro-steps' forward and backward, the gradient
/// reduction, the norm, the gate and AdamW) captured into a CUDA graph once, then replayed.
///
/// What makes a replay correct: the step reads everything that changes from step to step
/// from device memory at addresses that do not change -- the staged inputs
/// (train/step_batch.hpp: tokens, targets, the embedding gradient's token index, the AdamW
/// scalars with the learning rate and the bias correction), the gate's flag of the previous
/// step --, passes nothing by value that changes, reads nothing back, and every buffer it
/// allocates comes from a private memory pool that keeps it for the graph
/// (core/memory.hpp, PrivatePool). The host side of the step (the FSDP engine's state, which
/// collectives run) must be the same at every step: the capture is made after
/// kWarmupSteps eager steps, and the engine's host state after the captured step must equal
/// the state before it (FsdpEngine::step_state), else the graph is dropped.
///
/// Whether a run may use graphs at all is decided once, from its settings and build, by the
/// pure function graph_decision (tested on the CPU, tests/train/test_step_graph.cpp); every
/// rank decides the same. A step that must run eagerly (train.inject_nan_steps) runs eagerly;
/// a capture that CUDA refuses (cudaStreamEndCapture or instantiation fails on some rank)
/// makes every rank fall back to eager steps for the rest of the run, with one logged reason.
///
/// Unverified without a GPU (the selfcheck path graphs.step checks it on one): the calls the
/// step makes under capture -- Kokkos kernels (their launches with a functor over 512 bytes
/// would use Kokkos' constant-memory path, whose event synchronisation a capture refuses),
/// cuBLAS/cuBLASLt (CUDA 12.2+ allocates its workspace stream-ordered under capture), cuDNN
/// through the frontend's execute() (its graph_interface.h supports stream capture of
/// execute(), with the host-copy sources kept alive per graph), NCCL (captures supported since
/// 2.9, uniformly on every rank, which the agreement above provides).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/memory.hpp"

namespace meshtrain::train {

/// Eager steps before the capture: the first step after a start or a load differs on the
/// host (the no_shard compute copies are converted from the masters once), and the first
/// launches of Kokkos kernels, cuDNN plans, cuBLAS handles and NCCL channels set themselves
/// up; the second step is the steady state the capture needs.
inline constexpr int kWarmupSteps = 2;

/// What decides, once per run, whether its steps may be replayed from a CUDA graph: settings
/// and build only, the same on every rank.
struct GraphConditions {
  bool requested = true;        ///< gpu.graphs
  bool cuda_build = false;      ///< a CUDA build (MESHTRAIN_WITH_CUDA)
  bool nccl = false;            ///< the step's communicators are NCCL's (device, stream-ordered)
  int world = 1;                ///< ranks of the job
  bool fused_optimizer = true;  ///< gpu.fused_optimizer
  bool fused_loss = true;       ///< gpu.fused_loss
  bool dpo = false;             ///< train.objective = dpo or simpo
  bool documents = false;       ///< packed rows / data.document_mask
  bool profiler = false;        ///< a Kokkos Tools library is loaded
};

struct GraphDecision {
  bool use = false;
  /// Why not (one sentence naming the setting and the fix), or how they are used.
  std::string reason;
};

/// The first reason the conditions rule graphs out, in the order of the fields above.
GraphDecision graph_decision(const GraphConditions& c);

/// \brief One captured step: its executable graph, the private pool that keeps its buffers,
/// and what its capture counted on the host that a replay must count again.
class StepGraph {
 public:
  StepGraph();
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  /// Opens the private pool and starts capturing the compute stream.
  void begin_capture();
  /// Ends the capture; false (with the reason) when CUDA refused it. The pool is closed
  /// either way (its blocks stay the graph's until the StepGraph is destroyed).
  bool end_capture(std::string* why);
  bool ready() const { return exec_ != nullptr; }
  /// Bytes of the buffers kept for the graph.
  std::size_t pool_bytes() const { return pool_.bytes(); }
  /// Queues one replay on the compute stream.
  void launch();

  /// Host counters of the captured step, added again by each replay: collective operations
  /// and bytes (comm_stats), frozen all-gather bytes (the trainer's metrics).
  std::uint64_t comm_operations = 0, comm_bytes = 0, frozen_gather_bytes = 0;

 private:
  PrivatePool pool_;
  void* exec_ = nullptr;  // cudaGraphExec_t
};

}  // namespace meshtrain::train
