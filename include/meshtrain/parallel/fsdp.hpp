#pragma once
/// \brief The FSDP engine: flat parameter units, sharded fp32 master weights, gradients and
/// AdamW moments, async all-gather (with prefetch) and reduce-scatter / all-reduce of
/// gradients, for every strategy (full_shard, shard_grad_op, no_shard, hybrid_shard).
///
/// Unit u's buffer holds its TP-local parameters (model::UnitLayout). With sharding, rank
/// s of the dp_shard group owns elements [s*shard_numel, (s+1)*shard_numel) of the fp32
/// master, gradient and moments; `wait_params(u)` returns the all-gathered buffer in the
/// compute type T, whose parameters are views (no copy-out). Without sharding (no_shard)
/// every rank holds everything and gradients are all-reduced over the dp group.
///
/// Frozen parameters (the base model under LoRA) form the unit's frozen segment
/// (model::UnitLayout): the rank keeps its shard of them in the compute type T only, with
/// no fp32 master, gradient or moments, gathers them like the rest, and never reduces
/// anything for them. Gradient buffers, reductions and UnitState cover the trainable
/// segment only, so a LoRA run holds and moves state for its adapters alone.
///
/// Per micro-step the runner calls, per unit: gather/prefetch -> wait_params -> forward ->
/// after_forward -> (backward) wait_params -> grad_buffer -> after_backward; then
/// finish_step() after the last micro-step.

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "comm/communicator.hpp"
#include "core/memory.hpp"
#include "model/layout.hpp"
#include "parallel/device_mesh.hpp"
#include "parallel/reduction_plan.hpp"
#include "parallel/strategy.hpp"

namespace meshtrain::parallel {

struct FsdpOptions {
  Strategy strategy = Strategy::FullShard;
  int prefetch = 1;               ///< block units gathered ahead of the one computing
  DType reduce_dtype = DType::F32;
  int grad_accum = 1;             ///< micro-steps per optimizer step
  /// Forward passes only (eval, generate): the engine holds the parameters (fp32 master
  /// shards, frozen values) and nothing for training: UnitState::grad, exp_avg and
  /// exp_avg_sq stay empty and grad_buffer() must not be called. Loaded models pay
  /// neither the memory nor the first-touch time of state they never use.
  bool forward_only = false;
};

/// fp32 state of one unit's trainable segment held by this rank: elements
/// [begin, begin + numel) of the unit buffer (begin >= the layout's trainable_begin()).
struct UnitState {
  std::int64_t begin = 0;
  std::int64_t numel = 0;
  Buffer<float> master;
  Buffer<float> grad;        ///< reduced gradient (valid after finish_step); empty when forward_only
  Buffer<float> exp_avg;     ///< empty when forward_only
  Buffer<float> exp_avg_sq;  ///< empty when forward_only
};

template <class T>
class FsdpEngine {
 public:
  /// `specs` split for `mesh.tp()`; the engine keeps a reference to `mesh`, which must
  /// outlive it. Everything mesh-dependent (tp size and rank, shard, replica) comes from it.
  FsdpEngine(std::vector<model::ParamSpec> specs, int n_units, const DeviceMesh& mesh, const FsdpOptions& options);
  ~FsdpEngine();

  const std::vector<model::ParamSpec>& specs() const { return specs_; }
  const std::vector<model::UnitLayout>& layouts() const { return layouts_; }
  int num_units() const { return static_cast<int>(layouts_.size()); }
  const FsdpOptions& options() const { return opt_; }
  int tp_size() const { return mesh_.tp().size(); }
  int tp_rank() const { return mesh_.tp().rank(); }

  /// Mesh-independent initial values (model::init_unit_range) into the master state.
  void init_parameters(std::uint64_t seed);

  // ---- step protocol -------------------------------------------------------------------
  void begin_step();
  void begin_micro(int micro);
  /// Starts the all-gather of unit u if it is not alive or in flight. `prefetch` requests
  /// are skipped when `parallel.prefetch` blocks are already alive.
  void gather(int u, bool prefetch = false);
  /// Gathered parameters of unit u (waits for the gather).
  const T* wait_params(int u);
  void after_forward(int u);
  /// Gradient buffer of unit u's trainable segment for this micro-step: element i is unit
  /// element trainable_begin() + i (zeroed on first use); nullptr when nothing is trainable.
  T* grad_buffer(int u);
  /// Unit u's backward is done for this micro-step: frees parameters and launches the
  /// gradient reduction when it is due (every micro-step for full/hybrid, last otherwise).
  void after_backward(int u);
  /// Waits for every reduction of the step, sums over dp_replicate, releases buffers.
  void finish_step();
  /// Drives in-flight collectives and completes finished reductions.
  void progress();
  /// Frees every gathered (transient) parameter buffer (after evaluation).
  void release_all();

  // ---- optimizer / checkpoint view -----------------------------------------------------
  UnitState& state(int u) { return state_[u]; }
  const UnitState& state(int u) const { return state_[u]; }
  /// Range of unit u (subset of the state range) whose values this rank counts in global
  /// sums and writes to checkpoints: each logical element is owned by exactly one rank
  /// (replicated-over-tp parameters are additionally filtered by counted_on_tp_rank).
  std::int64_t owned_begin(int u) const { return owned_begin_[u]; }
  std::int64_t owned_numel(int u) const { return owned_numel_[u]; }
  /// Master weights changed (optimizer step, checkpoint load): persistent gathered copies
  /// are refreshed at the next gather.
  void params_updated();
  /// The compute-dtype copy of unit u's trainable segment that no_shard keeps between steps
  /// (inside the replicated gathered buffer; element i is master element i), when it exists
  /// and is not the master itself (fp32 without a frozen segment); else nullptr. The fused
  /// optimizer writes it in its AdamW pass instead of a separate cast at the next gather.
  T* persistent_compute_copy(int u);
  /// Like params_updated, after an update that also wrote every non-null
  /// persistent_compute_copy: those copies stay fresh, the others are refreshed.
  void params_updated_in_place();

  // ---- frozen segment ------------------------------------------------------------------
  /// True when some parameter is frozen (LoRA).
  bool has_frozen() const { return has_frozen_; }
  /// Elements [frozen_begin(u), frozen_begin(u) + frozen_numel(u)) of unit u are this
  /// rank's frozen values (its shard, or the whole segment without sharding).
  std::int64_t frozen_begin(int u) const { return frozen_[u].begin; }
  std::int64_t frozen_numel(int u) const { return frozen_[u].numel; }
  /// Replaces this rank's frozen values of unit u with `values` (device, frozen_numel(u)
  /// fp32 elements), rounded to T.
  void set_frozen(int u, const float* values);
  /// This rank's frozen values of unit u in T (device).
  const T* frozen_values(int u) const;

  /// Bytes of persistent state (master + grads + moments + frozen values) on this rank.
  std::size_t persistent_bytes() const;

 private:
  struct StepBuffers;
  struct Reduction;
  void launch_reduction(int u);
  void complete(Reduction& r);
  template <class G>
  void sum_replicated_grads_over_tp(int u, G* grads);

  std::vector<model::ParamSpec> specs_;
  std::vector<model::UnitLayout> layouts_;
  const DeviceMesh& mesh_;
  FsdpOptions opt_;
  StrategyTraits traits_;
  /// What launch_reduction does for micro-step 0 and later ones (parallel/reduction_plan.hpp),
  /// made once from the strategy, T and the reduce dtype: the planner sizes its buffers
  /// from the same recipes.
  ReductionPlan reduction_;
  int micro_ = 0;
  bool last_micro_ = false;
  struct Frozen {
    std::int64_t begin = 0, numel = 0;
    Buffer<T> values;  ///< sharded strategies: this rank's shard (no_shard: inside the gathered copy)
  };
  T* frozen_storage(int u);
  std::vector<UnitState> state_;
  std::vector<Frozen> frozen_;
  bool has_frozen_ = false;
  std::vector<std::int64_t> owned_begin_, owned_numel_;
  std::vector<StepBuffers> step_buffers_;
  std::deque<std::unique_ptr<Reduction>> pending_;
};

}  // namespace meshtrain::parallel
