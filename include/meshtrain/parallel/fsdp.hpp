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
/// anything for them. With a quantized base (FsdpOptions::base_quant, QLoRA) the shard is
/// kept quantized instead (parallel/quantized_base.hpp: the canonical blocks of the global
/// tensors), all-gathered as its NF4 or int8 payload and dequantized into the gathered T
/// buffer's frozen region in wait_params; 1-D frozen parameters stay in T, whole on every
/// rank. no_shard dequantizes once into its persistent T copy and keeps no payload.
/// model.base_quant=gguf keeps the GGUF base file's own blocks instead
/// (parallel/gguf_base.hpp): the shard is set from the file's bytes (set_frozen_gguf), never
/// from values, and gathered and dequantized the same way. The outer unit (embeddings, final
/// norm, head) is the exception under every strategy: it is kept quantized -- its gathered
/// payload for the step (sharded), its whole payload (no_shard) -- and read through
/// wait_outer(), whose model::OuterParams the embedding and the head dequantize a part at a
/// time (model/outer_params.hpp); its dequantized copy would be the step's largest. With
/// FsdpOptions::base_quant_embeddings false the outer unit is not quantized at all (stored
/// like an unquantized base; a gguf base's loaded as the file's values). Gradient buffers,
/// reductions and UnitState cover the trainable segment only, so a LoRA run holds and moves
/// state for its adapters alone.
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
#include "model/outer_params.hpp"
#include "parallel/device_mesh.hpp"
#include "parallel/gguf_base.hpp"
#include "parallel/quantized_base.hpp"
#include "parallel/reduction_plan.hpp"
#include "parallel/strategy.hpp"

namespace meshtrain::parallel {

struct FsdpOptions {
  Strategy strategy = Strategy::FullShard;
  int prefetch = 1;               ///< block units gathered ahead of the one computing
  DType reduce_dtype = DType::F32;
  int grad_accum = 1;             ///< micro-steps per optimizer step
  /// Forward passes only (eval, generate): the engine holds the parameters and nothing for
  /// training: UnitState::grad, exp_avg and exp_avg_sq stay empty and grad_buffer() must
  /// not be called. Loaded models pay neither the memory nor the first-touch time of state
  /// they never use. With T narrower than fp32 (bf16) the engine is compute-only
  /// (FsdpEngine::compute_only): nothing ever updates the weights, so the trainable values
  /// are held in T alone and the fp32 master exists only while a load writes it.
  bool forward_only = false;
  /// How the frozen segment is stored (model.base_quant): None keeps it in T.
  BaseQuant base_quant = BaseQuant::None;
  /// model.base_quant_embeddings: false keeps the outer unit (embeddings, LM head) in T.
  bool base_quant_embeddings = true;
  /// base_quant=gguf: the block type each frozen matrix keeps (model::ModelDims::base_formats).
  model::BaseFormats base_formats;
};

/// Elements of fp32 frozen values FsdpEngine::set_frozen puts on the device at a time: a
/// Workspace buffer of 1 MiB, the load's only scratch beside the persistent state (SmolLM2's
/// fp32 embedding, staged whole, was 108 MiB above `plan` on one rank). Small enough that
/// the tests' tiny models stage in chunks too; large enough that a copy is not latency-bound.
inline constexpr std::int64_t kFrozenStagingElements = std::int64_t{1} << 18;

/// fp32 state of one unit's trainable segment held by this rank: elements
/// [begin, begin + numel) of the unit buffer (begin >= the layout's trainable_begin()).
struct UnitState {
  std::int64_t begin = 0;
  std::int64_t numel = 0;
  Buffer<float> master;      ///< empty on a compute-only engine outside master_for_write/master_written
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

  /// A forward-only engine computing in bf16 (eval, generate with train.precision=bf16):
  /// its trainable values live in T alone -- sharded strategies: this rank's shard;
  /// no_shard: the persistent compute copy -- and hold what a training engine's gather
  /// would cast from the master, so the forward reads the same values. No fp32 master of
  /// the whole model exists: bf16 inference needs half of fp32's parameter memory.
  bool compute_only() const { return compute_only_; }
  /// The fp32 master of unit u, to be written (checkpoint loads, init_parameters). A
  /// compute-only engine allocates it (zeroed) here and frees it in master_written(u), so
  /// a load holds one unit's fp32 master at a time.
  Buffer<float>& master_for_write(int u);
  /// Unit u's master has been written: a compute-only engine casts it into the T values
  /// the forward reads and frees it; other engines leave it (params_updated refreshes).
  void master_written(int u);

  // ---- step protocol -------------------------------------------------------------------
  void begin_step();
  void begin_micro(int micro);
  /// Starts the all-gather of unit u if it is not alive or in flight. `prefetch` requests
  /// are skipped when `parallel.prefetch` blocks are already alive.
  void gather(int u, bool prefetch = false);
  /// Gathered parameters of unit u (waits for the gather). Not for a unit kept quantized.
  const T* wait_params(int u);
  /// The outer unit's parameters (unit 0; waits for its gather): wait_params(0)'s buffer, or
  /// -- kept quantized (outer_kept_quantized()) -- its gathered payload and 1-D parameters,
  /// valid until the unit is released like a gathered buffer (after_forward/after_backward).
  model::OuterParams<T> wait_outer();
  /// True when the outer unit's frozen segment stays quantized while it is gathered.
  bool outer_kept_quantized() const { return kept_quantized(0); }
  void after_forward(int u);
  /// Gradient buffer of unit u's trainable segment for this micro-step, in acc_t<T> (fp32 for
  /// bf16 and fp32 compute): element i is unit element trainable_begin() + i (zeroed on first
  /// use); nullptr when nothing is trainable. The micro-step buffer of a strategy reducing
  /// every micro-step, or the fp32 accumulation itself (ReductionRecipe::micro_grads_buffer).
  acc_t<T>* grad_buffer(int u);
  /// Unit u's backward is done for this micro-step: frees parameters and launches the
  /// gradient reduction when it is due (every micro-step for full/hybrid, last otherwise).
  void after_backward(int u);
  /// Waits for every reduction of the step, sums over dp_replicate, releases buffers.
  void finish_step();
  /// Drives in-flight collectives and completes finished reductions.
  void progress();
  /// The host-side state a step starts from and leaves behind, as numbers (per unit: alive,
  /// in flight, stale, started, which buffers exist and where; pending reductions). A CUDA
  /// graph of a step is only valid when the step leaves the state it found
  /// (train/step_graph.hpp): the host decisions it captured are then those of every step.
  std::vector<std::int64_t> step_state() const;
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
  /// How unit u's frozen segment is stored: FsdpOptions::base_quant, except the outer unit
  /// with base_quant_embeddings false (parallel::unit_base_quant).
  BaseQuant unit_quant(int u) const;
  /// True when some parameter is frozen (LoRA).
  bool has_frozen() const { return has_frozen_; }
  /// Elements [frozen_begin(u), frozen_begin(u) + frozen_numel(u)) of unit u are this
  /// rank's frozen values (its shard, or the whole segment without sharding).
  std::int64_t frozen_begin(int u) const { return frozen_[u].begin; }
  std::int64_t frozen_numel(int u) const { return frozen_[u].numel; }
  /// Replaces this rank's frozen values of unit u with `values` (host, frozen_numel(u)
  /// fp32 elements), rounded to T -- or quantized with a quantized base, which makes it
  /// collective over the world (the NF4 group maxima span ranks; the 1-D parameters are
  /// summed over dp_shard): every rank calls it for the same units in the same order. Not
  /// for a unit kept in GGUF blocks (unit_quant(u) == Gguf: set_frozen_gguf). No fp32 copy
  /// of the shard reaches the device (a Llama-8B embedding's on one rank is 2.1 GB, which
  /// `plan` does not count): a base in T is staged kFrozenStagingElements at a time and
  /// rounded by the cast kernel, a quantized base is encoded on the host.
  void set_frozen(int u, const float* values);
  /// unit_quant(u) == Gguf: which of the file's blocks unit u's shards hold.
  const GgufMap& gguf_map(int u) const { return frozen_[u].gguf; }
  /// model.base_quant=gguf: the shard of the frozen segments this rank holds (its dp_shard
  /// rank; 0 without sharding, where the one shard is the whole segment).
  int frozen_shard() const;
  /// unit_quant(u) == Gguf: this rank's frozen values of unit u, as the file stores them:
  /// `payload` (host, gguf_map(u).stride bytes: the blocks of shard frozen_shard() in map
  /// order, zeros after them) and `dense` (host, gguf_map(u).dense_numel() floats: the 1-D
  /// parameters of the whole segment, in map order). Not collective.
  void set_frozen_gguf(int u, const std::uint8_t* payload, const float* dense);
  /// Bytes of the quantized frozen payload one rank sends per all-gather of unit u (0 when
  /// the base is not quantized or not sharded).
  std::int64_t frozen_payload_bytes(int u) const;
  /// Bytes this rank has received in all-gathers of frozen segments since construction
  /// ((dp_shard - 1) x what each rank sends, per gather): the quantized base's saving on
  /// the wire, measured (`meshtrain plan` predicts it per step).
  std::uint64_t frozen_gather_bytes() const { return frozen_gather_bytes_; }

  /// Bytes of persistent state (master or compute-only bf16 shard + grads + moments + frozen values) on this rank.
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
    // Quantized base, sharded strategies, and the outer unit kept quantized under no_shard
    // (whose shard is the whole segment); other no_shard units keep only their dequantized
    // gathered copy (map, runs and group maxima, no payload):
    QuantMap map;                          ///< the unit's blocks on this tp rank
    Buffer<std::uint8_t> payload;          ///< this rank's shard, payload_bytes(quant, numel)
    Buffer<kernels::QuantRun> runs;        ///< map.runs on the device
    Buffer<float> group_max;               ///< map.groups NF4 group maxima (the whole unit's)
    Buffer<T> dense;                       ///< the 1-D parameters of the whole segment, in T
    // Kept in GGUF blocks (payload and dense as above, the payload gguf.stride bytes; no_shard
    // keeps them for the outer unit only, the others' dequantized copy for the rest):
    GgufMap gguf;                          ///< the unit's blocks on this tp rank
    Buffer<kernels::GgufRun> gguf_runs;    ///< gguf.runs on the device
  };
  /// Bytes of unit u's frozen payload that each shard sends (quantized bases, sharded).
  std::int64_t payload_stride(int u) const;
  T* frozen_storage(int u);
  /// Unit u's quantized frozen segment stays quantized when gathered (the outer unit).
  bool kept_quantized(int u) const;
  /// Waits for unit u's gather (starting it if needed) and marks it alive.
  void wait_gathered(int u);
  /// Frees unit u's gathered buffers (the T copy and a kept payload).
  void release_gathered(int u);
  void set_frozen_quantized(int u, const float* values);
  /// Dequantizes the gathered payload `all` (every shard's) into gathered's frozen region.
  void dequantize_frozen(int u, const std::uint8_t* all, std::int64_t stride, std::int64_t shard_numel, T* gathered);
  std::vector<UnitState> state_;
  /// Compute-only engines: true, and under a sharded strategy held_[u] is this rank's
  /// shard of unit u's trainable segment in T (state_[u]'s range; no_shard keeps it inside
  /// the persistent gathered copy instead).
  bool compute_only_ = false;
  std::vector<Buffer<T>> held_;
  std::vector<Frozen> frozen_;
  bool has_frozen_ = false;
  std::uint64_t frozen_gather_bytes_ = 0;
  std::vector<std::int64_t> owned_begin_, owned_numel_;
  std::vector<StepBuffers> step_buffers_;
  std::deque<std::unique_ptr<Reduction>> pending_;
};

}  // namespace meshtrain::parallel
