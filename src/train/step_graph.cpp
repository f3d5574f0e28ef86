#include "train/step_graph.hpp"

#include <algorithm>

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
  if (c.profiler)
    return no("a Kokkos Tools library is loaded (KOKKOS_TOOLS_LIBS), which fences around every kernel; unset it for "
              "CUDA graphs");
  return {true, "one step captured into a CUDA graph after the first eager steps, then replayed"};
}

GraphAction GraphSchedule::next(int key, bool graphable) {
  full_ = false;
  const bool seen = std::find(seen_.begin(), seen_.end(), key) != seen_.end();
  if (graphable) {
    if (std::find(graphs_.begin(), graphs_.end(), key) != graphs_.end()) return GraphAction::Replay;
    if (eager_steps_ >= kWarmupSteps && seen) {
      if (graphs() < max_graphs_) return GraphAction::Capture;
      full_ = true;
    }
  }
  ++eager_steps_;
  if (!seen) seen_.push_back(key);
  return GraphAction::Eager;
}

StepGraph::StepGraph(PrivatePool& pool) : pool_(pool) {}

StepGraph::~StepGraph() {
#if defined(MESHTRAIN_WITH_CUDA)
  if (exec_) {
    ExecSpace().fence();  // no replay may still be running when its graph goes
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
