#include "train/step_graph.hpp"

#include "core/views.hpp"

#if defined(MESHTRAIN_WITH_CUDA)
#include "core/cuda_rt.hpp"
#endif

namespace meshtrain::train {

GraphDecision graph_decision(const GraphConditions& c) {
  const auto no = [](const char* why) { return GraphDecision{false, why}; };
  if (!c.requested) return no("gpu.graphs=false: every step is launched kernel by kernel");
  if (!c.cuda_build) return no("a host build: CUDA graphs need a CUDA build (cmake --preset cuda)");
  if (!c.nccl && c.world > 1)
    return no("the step's collectives are MPI's, which the host waits for inside the step (CUDA graphs need NCCL)");
  if (!c.fused_optimizer)
    return no("gpu.fused_optimizer=false reads the gradient norm back before AdamW; set it to true for CUDA graphs");
  if (!c.fused_loss)
    return no("gpu.fused_loss=false reads the loss back after every LM-head chunk; set it to true for CUDA graphs");
  if (c.dpo)
    return no("train.objective=dpo/simpo reads each micro-step's sequence log-probabilities back to scale the head's "
              "gradient");
  if (c.documents)
    return no("packed rows (document masks): the attention's variable-length batch, and with it the cuDNN graph, "
              "changes with each step's documents");
  if (c.profiler)
    return no("a Kokkos Tools library is loaded (KOKKOS_TOOLS_LIBS), which fences around every kernel; unset it for "
              "CUDA graphs");
  return {true, "one step captured into a CUDA graph after the first eager steps, then replayed"};
}

StepGraph::StepGraph() = default;

StepGraph::~StepGraph() {
#if defined(MESHTRAIN_WITH_CUDA)
  if (exec_) {
    ExecSpace().fence();  // no replay may still use the blocks the pool is about to share
    cuda_rt::graph_destroy(exec_);
  }
#endif
}

void StepGraph::begin_capture() {
  MemoryPool::instance().open_private(&pool_);
#if defined(MESHTRAIN_WITH_CUDA)
  cuda_rt::begin_capture(ExecSpace().cuda_stream());
#endif
}

bool StepGraph::end_capture(std::string* why) {
#if defined(MESHTRAIN_WITH_CUDA)
  exec_ = cuda_rt::end_capture(ExecSpace().cuda_stream(), why);
#else
  if (why) *why = "a host build has no CUDA graphs";
#endif
  MemoryPool::instance().open_private(nullptr);
  return exec_ != nullptr;
}

void StepGraph::launch() {
#if defined(MESHTRAIN_WITH_CUDA)
  cuda_rt::graph_launch(exec_, ExecSpace().cuda_stream());
#endif
}

}  // namespace meshtrain::train
