#include "comm/collectives.hpp"
#include "train/trainer.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <cstdlib>
#include <deque>
#include <optional>
#include <set>

#include "checkpoint/async_save.hpp"
#include "checkpoint/checkpoint.hpp"
#include "checkpoint/tokenizer_ref.hpp"
#include "comm/agree.hpp"
#include "comm/watchdog.hpp"
#include "core/check.hpp"
#include "core/error.hpp"
#include "core/fault.hpp"
#include "core/file_io.hpp"
#include "formats/json.hpp"
#include "core/log.hpp"
#include "core/memory.hpp"
#include "core/process_start.hpp"
#include "core/timer.hpp"
#include "data/dataset.hpp"
#include "data/sampler.hpp"
#include "kernels/attention.hpp"
#include "linalg/peak.hpp"
#include "model/step_flops.hpp"
#include "parallel/micro_step.hpp"
#include "plan/cost_model.hpp"
#include "train/checkpoint_meta.hpp"
#include "train/earlier_run.hpp"
#include "train/evaluate.hpp"
#include "train/generate.hpp"
#include "train/memory_ways_out.hpp"
#include "train/metrics.hpp"
#include "train/peers_lost_record.hpp"
#include "train/preflight.hpp"
#include "train/reference_logps.hpp"
#include "train/resume_settings.hpp"
#include "train/run_lock.hpp"
#include "train/run_record.hpp"
#include "train/same_run.hpp"
#include "train/session.hpp"
#include "train/setting_warnings.hpp"
#include "train/step.hpp"
#include "train/stop_policy.hpp"
#include "train/token_batch.hpp"

namespace meshtrain::train {
namespace {

struct StepTimes {
  double step = 0, exposed_comm = 0, busy_comm = 0, io = 0;
  /// False for a step replayed from a CUDA graph: its collectives are not timed (its
  /// exposed and busy times are reported as not measured, and the whole step as compute).
  bool comm_measured = true;
  double compute() const { return comm_measured ? std::max(0.0, step - exposed_comm) : step; }
};

/// How many steps the trainer runs ahead of the step it logs: 1 where the device runs
/// asynchronously (the host queues step s + 1, then reads step s back: train/step.hpp), 0 on
/// host builds (a step has run when it is launched). MESHTRAIN_STEP_LAG=0|1 overrides it (the
/// CPU suite runs the lagged bookkeeping with 1: tests/train/step_lag.sh).
int step_lag() {
  if (const char* e = std::getenv("MESHTRAIN_STEP_LAG")) {
    const std::string v = e;
    MESHTRAIN_REQUIRE(v == "0" || v == "1", "MESHTRAIN_STEP_LAG=%s: use 0 or 1", e);
    return v == "1" ? 1 : 0;
  }
  return kDeviceIsHost ? 0 : 1;
}

template <class T>
class Trainer {
 public:
  Trainer(const Runtime& rt, const plan::RunSetup& setup)
      : rt_(rt), setup_(setup), spec_(setup.spec), session_(rt, setup), root_(rt.topology().world_rank == 0),
        token_batch_(setup.batch.micro_batch, setup.batch.seq_len) {}

  int run();

 private:
  // The phases of run(), in order.
  void load_inputs();
  void probe_and_lock_outputs();
  /// Every rank runs the same settings on the same data (same_run.hpp).
  void require_same_run();
  void log_start();
  void begin_writing(int first_step);
  int train_loop(int first_step, const StopPolicy& stop);
  void print_sample();
  /// Reads step `step`'s batch and queues it (StepRunner::launch).
  void launch_step(int step);
  /// Collects the oldest queued step and does what follows it: the skipped-step count, and
  /// at a `boundary` (a step the loop waited for: evaluation, checkpoint, stop or the last)
  /// evaluation, checkpoint and the stop decision (`why`, when the caller already made it;
  /// else made here), then its metrics line. Returns the exit status, or -1 to go on.
  int finish_step(bool boundary, const StopPolicy& stop, std::optional<StopReason> why = std::nullopt);
  double evaluate();
  /// train.objective=dpo: decides what the reference is (kDpoReferenceSetting) and, when it
  /// is stored, the initial policy's log-probability of every train and val row, computed
  /// (a fresh run, written by begin_writing) or read back (a resume).
  void prepare_reference(int first_step);
  std::vector<double> row_logps(const std::shared_ptr<const data::TokenSource>& rows,
                                const std::shared_ptr<const data::MaskFile>& mask);
  void log_step(int step, double loss, double gnorm, double lr, const StepTimes& t, double val_loss);
  void write_summary();
  // Checkpoints: resume / init_from at start, saves every checkpoint.every steps and at the end.
  int restore_or_init();
  EvalWindows eval_windows(bool* clamped = nullptr) const;
  void require_same_run_settings(const std::string& path);
  bool checkpoint_due(int step, bool last) const;
  /// Saves at `step`; with checkpoint.async the save is started, and waited for when `wait`
  /// (the final save, a stop's save).
  void save_checkpoint(int step, bool wait);
  /// checkpoint.async: completes a save in flight when every rank has written its part
  /// (poll, at each step boundary) or now (`wait`), and reports it.
  void complete_async_save(bool wait);
  void report_save(const checkpoint::IoStats& io);
  void lock_directories(const std::string& out_dir, const std::string& ckpt_dir);

  const Runtime& rt_;
  const plan::RunSetup& setup_;
  const plan::RunSpec& spec_;
  /// Rank 0: output.dir's lock and checkpoint.dir's (unless they are one directory); held
  /// until the trainer is gone (the run has written its last file). Released in reverse
  /// order: the checkpoint.dir lock, often inside output.dir, goes first, so that output.dir
  /// is empty when its lock removes the directories it made.
  struct RunDirLocks {
    std::vector<std::unique_ptr<RunDirLock>> held;
    ~RunDirLocks() {
      while (!held.empty()) held.pop_back();
    }
  } locks_;
  /// Rank 0: another run's checkpoints in checkpoint.dir that this run does not continue;
  /// checkpoint.overwrite deletes them once the inputs are valid (earlier_run.hpp).
  EarlierCheckpoints earlier_;
  /// output.dir's record of a run whose checkpoints are elsewhere (earlier_run.hpp).
  EarlierRecord earlier_record_;
  Session<T> session_;
  /// checkpoint.async: the save in flight. Declared after the session: destroyed first, it
  /// waits for its background write, which reads staging buffers of its own only.
  checkpoint::AsyncSave async_save_;
  bool root_;
  TokenBatch token_batch_;
  data::Dataset data_;
  std::unique_ptr<data::Sampler> sampler_;
  std::unique_ptr<data::EvalSampler> eval_sampler_;
  std::unique_ptr<MetricsWriter> metrics_;
  StepSettings settings_;
  std::unique_ptr<StepRunner<T>> runner_;
  /// The host side of the step queued last: its host time and host-measured communication.
  struct Queued {
    double host_seconds = 0, exposed = 0, busy = 0, counted = 0;
    double attention_fraction = 1.0;  ///< of the attention of whole rows, what packed rows ran (MFU)
    std::uint64_t cursor = 0;  ///< training windows consumed after the step (its metrics line's tokens)
  };
  std::deque<Queued> queued_;
  double last_step_seconds_ = 0;  ///< the last collected step's time (the stop policy's estimate)
  std::uint64_t logged_cursor_ = 0;  ///< windows consumed after the step being logged
  bool logged_graph_ = false;        ///< the step being logged was replayed from a CUDA graph
  std::set<long> nan_steps_;
  std::vector<std::int32_t> step_in_, step_tgt_, step_doc_;
  ///< this rank's windows of one step: (grad_accum, B, T) each
  double last_counted_ = 0;  ///< targets the last step's loss counted (global batch)
  bool warned_no_targets_ = false;  ///< a step without a counted target was reported (once a run)
  /// Packed rows: the fraction of the whole rows' attention the last step's kernels ran (MFU);
  /// attention_work_rows_: the query rows they process as one block (kernels::attention_work_rows).
  double last_attention_fraction_ = 1.0;
  int attention_work_rows_ = 1;
  bool warned_mfu_over_peak_ = false;
  double peak_flops_ = 0;
  std::uint64_t cursor_ = 0;      ///< training windows consumed (global)
  int updates_ = 0;               ///< optimizer updates applied (bias correction)
  std::uint64_t frozen_gather_step_bytes_ = 0;  ///< the last step's frozen all-gathers, bytes received (rank 0's)
  /// LoRA: the frozen base weights this run's checkpoints refer to (init_from, or the
  /// train.seed initialisation without it).
  checkpoint::BaseRef base_;
  /// The model's tokenizer, recorded in every checkpoint (checkpoint/tokenizer_ref.hpp).
  checkpoint::TokenizerRef tokenizer_;
  /// What a resume of this run must keep, recorded in every checkpoint (resume_settings.hpp).
  RunSettings run_settings_;
  /// The checkpoint this run resumed from ("" for a fresh start) and its step: the run's
  /// config.ini names it (run_record.hpp).
  std::string resumed_from_;
  int resumed_step_ = 0;
  int skipped_ = 0;
  double total_compute_ = 0, total_exposed_ = 0, total_busy_ = 0, total_io_ = 0;
  double last_loss_ = NAN, last_val_ = NAN;
  DpoMetrics last_dpo_, last_val_dpo_;
  /// train.objective=dpo whose reference is the initial policy's stored log-probabilities
  /// (kDpoReferenceStored: full fine-tuning, or LoRA adapters continued from init_from)
  /// rather than the base with the adapters off.
  bool stored_reference_ = false;
  /// A fresh run's checkpoint.init_from held LoRA adapters, which the run continues.
  bool init_adapters_loaded_ = false;
  /// A resume: the settings its checkpoint recorded (empty when it predates the record).
  RunSettings resumed_settings_;
  bool write_reference_ = false;  ///< computed by this (fresh) run: begin_writing writes it
  ReferenceLogps reference_;
  std::vector<std::vector<double>> step_ref_;  ///< per micro-step of a step: its sequences' reference values  ///< train.objective=dpo: the last step's and evaluation's pair means
  double loop_seconds_ = 0, loop_tokens_ = 0;  ///< the training loop's wall time and tokens (summary.json)
  double ckpt_save_s_ = NAN, ckpt_save_gbps_ = NAN;  ///< last save/load, reported with the next step
  double ckpt_save_held_s_ = NAN;                     ///< checkpoint.async: what the last save held training
  double ckpt_save_background_cpu_s_ = NAN;           ///< checkpoint.async: the busiest background thread's CPU
  double ckpt_load_s_ = NAN, ckpt_load_gbps_ = NAN;
  MemoryStats load_memory_;  ///< the pool after restore_or_init; peaks: over it, above what was in use before
};

template <class T>
int Trainer<T>::run() {
  // Start-up validates everything the run reads (config and mesh in resolve_run, the
  // dataset and its vocabulary here, the checkpoint or init_from weights in
  // restore_or_init) and probes every directory it writes, before anything is written:
  // a user error found now leaves output.dir and checkpoint.dir exactly as they were, and
  // a failed resume never rewrites the earlier run's records.
  load_inputs();
  probe_and_lock_outputs();
  require_same_run();
  log_start();
  // The load's own peaks above what was in use before it (summary.json: load_peak_by_category).
  MemoryPool::instance().reset_peaks();
  const MemoryStats before_load = MemoryPool::instance().stats();
  const int first_step = restore_or_init();
  fault::pass(fault::Point::TrainStartup);  // a rank held at a known place of the start-up (tests)
  load_memory_ = MemoryPool::instance().stats();
  for (int c = 0; c < kNumMemCategories; ++c)
    load_memory_.peak_in_use[static_cast<std::size_t>(c)] -= before_load.in_use[static_cast<std::size_t>(c)];
  load_memory_.peak_total_in_use -= before_load.total_in_use;
  if (!resumed_from_.empty() && first_step >= spec_.train.steps) {
    // A finished run rerun (its config.ini, a requeued job) or train.steps below the
    // checkpoint's step: nothing to train, and its records (summary.json, metrics.jsonl,
    // config.ini) stay those of the run that got there.
    log::info("nothing left to train: %s is at step %d, train.steps=%d; nothing was written (raise train.steps to "
              "continue the run)",
              resumed_from_.c_str(), first_step, spec_.train.steps);
    return 0;
  }
  prepare_reference(first_step);
  begin_writing(first_step);
  // train.time_limit counts from the process's start (main's first statement, before MPI_Init),
  // like a scheduler's limit: the start-up above -- a large checkpoint's load, the checks,
  // the measurements -- is inside it.
  const StopPolicy stop(spec_.train.time_limit, spec_.train.time_limit_margin, process_start_seconds(), rt_.world());
  log::info("%s", stop.describe().c_str());
  // The deadline is decided at step boundaries, the first after step 1: a start-up that left
  // less than the margin still trains that step, so that each requeued job makes progress.
  if (root_ && stop.seconds_left() < spec_.train.time_limit_margin && first_step + 1 < spec_.train.steps)
    log::warn("the start-up took %.0f s, and %.0f s of the wall-clock limit are left, less than "
              "train.time_limit_margin=%g s: the run trains step %d, saves it and exits with status %d",
              stop.startup_seconds(), std::max(stop.seconds_left(), 0.0), spec_.train.time_limit_margin,
              first_step + 1, kExitPreempted);
  // A SIGUSR1/SIGTERM that came during the start-up (the handlers are installed before it:
  // command_train) is agreed on here as at a step boundary, whichever rank got it: no step
  // is trained, and there is nothing new to save (the state is that of the checkpoint just
  // resumed, or the initial weights: no checkpoint yet). Exit 75 all the same, so that the
  // job is requeued and the next start resumes (or starts) the run.
  if (stop.any_rank_signalled()) {
    if (root_)
      log::warn("stopping before step %d (SIGUSR1/SIGTERM received during start-up): no step trained, nothing new to "
                "save (%s); exiting with status %d so the job can be requeued and resumed",
                first_step + 1,
                resumed_from_.empty() ? "no checkpoint yet: the requeued job starts the run"
                                      : strprintf("the run resumes from %s again", resumed_from_.c_str()).c_str(),
                kExitPreempted);
    return kExitPreempted;
  }
  // What start-up left in the pool's cache (the GEMM peak's operands, the load's staging) is
  // not what the steps allocate: returned, so that the run's reserved memory and its
  // peak_mem_bytes are the training's own.
  MemoryPool::instance().trim();
  MemoryPool::instance().reset_peaks();
  const double loop_t0 = now_seconds();
  const std::uint64_t loop_cursor0 = cursor_;
  const int status = train_loop(first_step, stop);
  // The loop's wall time: every step with its evaluations and checkpoint saves (a benchmark
  // of checkpoint costs reads summary.json's loop_tokens_per_s; the per-step tok/s leave
  // the saves out).
  loop_seconds_ = now_seconds() - loop_t0;
  loop_tokens_ = static_cast<double>(cursor_ - loop_cursor0) * setup_.batch.seq_len;
  if (status == 0 && spec_.train.sample_tokens > 0) print_sample();
  write_summary();
  return status;
}

/// The dataset, the tokenizer the checkpoints record, the samplers and the settings a
/// resume must keep (UserError on every rank alike).
template <class T>
void Trainer<T>::load_inputs() {
  const plan::TrainSpec& tc = spec_.train;
  const plan::BatchSpec& batch = setup_.batch;
  agree_on_errors(rt_.world(), [&] {
    data_ = data::Dataset::load(spec_.data, spec_.dims.valid_vocab, tc.seed);
    // The checkpoints record the model's tokenizer: init_from's when it brings one, else the
    // dataset's (a dataset made with another tokenizer than init_from's is refused here).
    const std::string& init_from = spec_.checkpoint.init_from;
    checkpoint::TokenizerRef model;
    try {
      model = checkpoint::source_tokenizer(init_from);
    } catch (const UserError& e) {
      // Weights whose tokenizer meshtrain cannot read train on data that records none
      // (random tokens) as before; their checkpoints then record no tokenizer.
      if (!checkpoint::tokenizer_ref_of(data_.meta).known()) {
        if (root_) log::warn("the checkpoints will record no tokenizer: %s", e.what());
      } else {
        throw;
      }
    }
    tokenizer_ = checkpoint::run_tokenizer(data_.meta, "dataset " + spec_.data.text(), model, "model " + init_from);
    // Rows of train.seq_len + 1 (what a row holds in the message); preference pairs with
    // train.objective=dpo and only with it.
    data::check_dataset_rows(data_, batch.seq_len, "train", tc.objective);
    check_dpo_setup(setup_, "train", /*stored_reference=*/true);
    // Instruction/chat data: windows are whole rows, targets outside the loss mask are -1.
    sampler_ = std::make_unique<data::Sampler>(data_.train, batch.seq_len, tc.seed, data_.train_mask);
    // DPO: windows come as whole pairs (an even micro-batch from an even window).
    if (tc.preference()) sampler_->set_pairs();
    // Packed rows (and data.document_mask text): attention, positions and loss per document.
    sampler_->set_document_mask(data::document_mask_for(data_, false, spec_.data.document_mask));
    if (data_.val && data::has_window(*data_.val, batch.seq_len)) {
      eval_sampler_ = std::make_unique<data::EvalSampler>(data_.val, batch.seq_len, data_.val_mask);
      eval_sampler_->set_document_mask(data::document_mask_for(data_, true, spec_.data.document_mask));
    }
    run_settings_ = run_settings(setup_, data_);
  });
}

/// output.dir and checkpoint.dir writable, and locked for this run (rank 0).
template <class T>
void Trainer<T>::probe_and_lock_outputs() {
  const std::string& out_dir = spec_.output.dir;
  const char* ckpt_key = spec_.checkpoint.dir_given ? "checkpoint.dir" : "checkpoint.dir (<output.dir>/checkpoints)";
  agree_on_errors(rt_.world(), [&] {
    if (!root_) return;
    // The probes first (they create nothing): a directory that cannot be created or
    // written is named as such, not as a lock failure.
    require_writable_dir("output.dir", out_dir);
    require_appendable_file("output.dir", out_dir + "/metrics.jsonl");
    require_writable_dir(ckpt_key, spec_.checkpoint.dir);
    // One run per directory (run_lock.hpp), taken before a checkpoint is loaded: a second
    // run into a live run's directories is refused here, having read there only the newest
    // checkpoint's root attributes (the choices a resume keeps: app::resumed_choices, which
    // tolerates a checkpoint that changes under it) and written only the probe file above
    // (a name of its own, .meshtrain-write-probe-PID, removed at once).
    lock_directories(out_dir, spec_.checkpoint.dir);
    // Under the lock, so that no run adds a checkpoint after the look. Refused in
    // begin_writing: the inputs (a checkpoint to resume, init_from) are named first.
    earlier_ = earlier_checkpoints(spec_.checkpoint);
    earlier_record_ = earlier_record(out_dir, spec_.checkpoint);
  });
  // Rank 0 alone probed and created them, but every rank writes there (its part of each
  // checkpoint; peers_lost.json): a directory that is not the same one on every rank is
  // refused now, not found by the first save hanging until parallel.collective_timeout.
  // (Decided on the paths' text, the same on every rank: one directory under two names is
  // probed twice.)
  const std::vector<std::string>& hosts = rt_.topology().host_of_rank;
  require_same_directory_on_every_rank(rt_.world(), hosts, "output.dir", out_dir);
  if (std::filesystem::path(spec_.checkpoint.dir).lexically_normal() != std::filesystem::path(out_dir).lexically_normal())
    require_same_directory_on_every_rank(rt_.world(), hosts, ckpt_key, spec_.checkpoint.dir);
  if (!eval_sampler_ && spec_.train.eval_every > 0)
    log::warn("the dataset has no validation windows of %d tokens; evaluation is skipped", setup_.batch.seq_len);
  if (eval_sampler_) {  // the last step evaluates whatever train.eval_every says
    bool clamped = false;
    const EvalWindows w = eval_windows(&clamped);
    if (clamped)
      log::warn("train.eval_batches=%d is %.0f windows, more than the %llu the validation split holds: each evaluation "
                "reads every window of the split once",
                spec_.train.eval_batches,
                static_cast<double>(spec_.train.eval_batches) * setup_.batch.grad_accum * setup_.batch.micro_batch *
                    setup_.mesh_shape.dp(),
                static_cast<unsigned long long>(w.windows));
  }
}

/// After the directories' check (probe_and_lock_outputs): ranks that see different
/// checkpoint directories may also have resolved different choices, and the directory is
/// the cause to name.
template <class T>
void Trainer<T>::require_same_run() {
  const auto identity = std::find_if(run_settings_.begin(), run_settings_.end(),
                                     [](const auto& kv) { return kv.first == "data.dir"; });
  MESHTRAIN_ASSERT(identity != run_settings_.end(), "the run settings name no dataset");
  require_same_run_on_every_rank(rt_.world(), rt_.topology().host_of_rank,
                                 compared_settings(setup_.config_ini, identity->second));
}

/// What the run is: model, mesh, strategy, batch, data, effective configuration.
template <class T>
void Trainer<T>::log_start() {
  const Topology& topo = rt_.topology();
  const plan::TrainSpec& tc = spec_.train;
  const plan::BatchSpec& batch = setup_.batch;
  const std::string& out_dir = spec_.output.dir;
  log::info("meshtrain train: %s model, %lld parameters (%s), %d rank(s) on %d node(s)", model::family_name(spec_.dims.family),
            static_cast<long long>(spec_.dims.num_params()), choice_name(tc.precision), topo.world_size, topo.num_nodes);
  if (spec_.dims.lora_rank > 0) log::info("%s", lora_summary(spec_.dims).c_str());
  for (const std::string& w : setting_warnings(setup_)) log::warn("%s", w.c_str());
  log::info("mesh %s, strategy %s (%s)", setup_.mesh_shape.str().c_str(), parallel::strategy_name(setup_.strategy),
            setup_.strategy_reason.c_str());
  log::info("batch: %d sequences x %d tokens per step = micro_batch %d x dp %d x grad_accum %d", batch.global_batch,
            batch.seq_len, batch.micro_batch, setup_.mesh_shape.dp(), batch.grad_accum);
  log::info("data: %s; output: %s", spec_.data.text().c_str(), out_dir.c_str());
  log::info("effective configuration (also in %s/config.ini):\n%s", out_dir.c_str(), setup_.config_ini.c_str());
}

/// The inputs are valid: the run record, the step settings, the GEMM peak of the MFU and
/// the metrics file (continued on a resume).
template <class T>
void Trainer<T>::begin_writing(int first_step) {
  const Topology& topo = rt_.topology();
  const plan::TrainSpec& tc = spec_.train;
  const std::string& out_dir = spec_.output.dir;
  // Inputs are valid: from here on the run writes.
  agree_on_errors(rt_.world(), [&] {
    if (!root_) return;
    // The last refusal: another run's checkpoints where this run would write its own.
    // base_.path: the LoRA base a resumed checkpoint names (init_from's is checked as such).
    const std::string refusal =
        earlier_run_refusal(spec_.checkpoint, earlier_, spec_.dims.lora_rank > 0 ? base_.path : std::string());
    MESHTRAIN_REQUIRE(refusal.empty(), "%s", refusal.c_str());
    const std::string record_refusal = earlier_record_refusal(out_dir, spec_.checkpoint, earlier_record_, resumed_from_);
    MESHTRAIN_REQUIRE(record_refusal.empty(), "%s", record_refusal.c_str());
    for (auto& lock : locks_.held) lock->keep_directories();
    if (!earlier_.empty()) log::warn("%s", remove_earlier_checkpoints(spec_.checkpoint, earlier_).c_str());
    // A rewind replaces the steps after it: their files go now, as their metrics.jsonl lines do.
    if (earlier_.rewind) {
      const std::string rewound = remove_abandoned_steps(spec_.checkpoint, resumed_from_, resumed_step_,
                                                         spec_.dims.lora_rank > 0 ? base_.path : std::string());
      if (!rewound.empty()) log::warn("%s", rewound.c_str());
    }
    const bool replaces = replaces_record(spec_.checkpoint, earlier_record_, resumed_from_);
    if (replaces)
      log::warn("checkpoint.overwrite: this run's record replaces, in output.dir=%s, that of the run whose checkpoints "
                "are in %s (they are kept)",
                out_dir.c_str(), earlier_record_.checkpoint_dir.c_str());
    const std::string unused = overwrite_unused(spec_.checkpoint, earlier_, replaces);
    if (!unused.empty()) log::warn("%s", unused.c_str());
    write_run_record(setup_, topo, out_dir, {resumed_from_, resumed_step_});
    if (write_reference_) write_reference_logps(reference_logps_path(out_dir), reference_);
  });
  // From here a lost peer leaves output.dir/peers_lost.json for the supervisor (issue 31).
  arm_peers_lost_record(out_dir, spec_.checkpoint.dir, topo.world_rank);
  settings_ = step_settings(setup_);
  nan_steps_.insert(tc.inject_nan_steps.begin(), tc.inject_nan_steps.end());

  peak_flops_ = tc.peak_tflops > 0 ? tc.peak_tflops * 1e12 : linalg::measure_gemm_flops(1024, 0.3, spec_.train.bf16());
  {
    const auto [mn, mx] = session_.mesh().world().min_max(peak_flops_);
    peak_flops_ = mn;  // the slowest rank bounds the step
    if (tc.peak_tflops > 0)
      log::info("GEMM peak for mfu: %.1f GFLOP/s per rank (train.peak_tflops)", mn / 1e9);
    else
      log::info("measured GEMM peak: %.1f GFLOP/s per rank (%s), min over ranks (max %.1f)", mn / 1e9,
                spec_.train.bf16() ? "bf16" : "fp32", mx / 1e9);
  }
  if (root_) {
    const int seq_len = setup_.batch.seq_len;
    // A stored DPO reference (or SimPO's none) runs no reference forward in the step.
    const bool reference_forward = !spec_.train.simpo() && !stored_reference_;
    const double per_token =
        model::train_step_flops(spec_.dims, seq_len, setup_.activation_checkpointing, 1.0, spec_.train.preference(),
                                reference_forward)
            .total();
    log::info("mfu counts the FLOPs each step performs: %s; %.4g %sFLOP per token at seq_len %d",
              model::describe_step_flops(spec_.dims, setup_.activation_checkpointing, spec_.train.preference(),
                                         reference_forward)
                  .c_str(),
              per_token >= 1e9 ? per_token / 1e9 : per_token / 1e6, per_token >= 1e9 ? "G" : "M", seq_len);
  }
  // A resumed run continues the run's metrics.jsonl (lines past the resumed step, from a
  // run that died after its last checkpoint, are dropped); a fresh run starts it anew.
  agree_on_errors(rt_.world(), [&] {
    if (root_ && first_step > 0) prepare_metrics_for_resume(out_dir + "/metrics.jsonl", first_step);
    metrics_ = std::make_unique<MetricsWriter>(out_dir + "/metrics.jsonl", first_step > 0, root_);
  });
}

/// Steps first_step .. train.steps: evaluation, checkpoints, the stop policy. Returns the
/// exit status (0, kExitAbort after too many skipped steps, kExitPreempted).
///
/// With a step lag of 1 (GPUs, step_lag()) the loop queues step s + 1 before it collects and
/// logs step s, so the host's reading of the next batch overlaps the device's step. A
/// boundary that needs the state after step s -- an evaluation, a checkpoint, a stop, the
/// last step -- is reached with step s collected first and nothing queued after it: its
/// evaluation, save and metrics line are those of step s, as without the lag. A step's
/// metrics line is written when it is collected, so every line still carries its own step's
/// loss, norm, times and the save or load reported with it; the last step is always
/// collected before the loop ends, so nothing is left unwritten.
template <class T>
int Trainer<T>::train_loop(int first_step, const StopPolicy& stop) {
  const plan::TrainSpec& tc = spec_.train;
  const int lag = step_lag();
  // A loss mask (or packed rows): the loss counts only some targets, a number each step
  // uploads with its scalars (StepRunner's `counted`).
  runner_ = std::make_unique<StepRunner<T>>(session_, settings_, sampler_->document_masked(), data_.train_mask != nullptr);
  attention_work_rows_ =
      kernels::attention_work_rows(session_.context().attention, spec_.train.bf16(), setup_.batch.seq_len);
  if (root_) {
    log::info("gpu.graphs: %s", runner_->graph_decision().reason.c_str());
  }
  int status = -1;
  for (int step = first_step; step < tc.steps && status < 0; ++step) {
    fault::set_step(step + 1);
    launch_step(step);
    if (runner_->pending() == 2) {
      // The previous step, still queued when this one was: collected and logged now.
      fault::set_step(step);
      status = finish_step(false, stop);
      fault::set_step(step + 1);
      if (status >= 0) break;
    }
    const bool last = step + 1 == tc.steps;
    const bool eval_due = eval_sampler_ && ((tc.eval_every > 0 && (step + 1) % tc.eval_every == 0) || last);
    if (lag == 0 || last || eval_due || checkpoint_due(step + 1, last)) {
      status = finish_step(true, stop);
      continue;
    }
    // Preemption / time limit, decided together by all ranks at this boundary before the
    // next step is queued; the step still in flight needs up to one more step's time.
    const StopReason why = stop.check(2 * last_step_seconds_);
    if (why != StopReason::None) status = finish_step(true, stop, why);
  }
  // A step still queued after an abort is dropped (not counted, not logged, not saved), as
  // if the loop had stopped before it; it finishes on the device before the runner goes.
  runner_.reset();
  cursor_ -= static_cast<std::uint64_t>(queued_.size()) * static_cast<std::uint64_t>(setup_.batch.global_batch);
  queued_.clear();
  // The run ends with every save committed (a run that stopped early, or without a final save).
  complete_async_save(true);
  return status < 0 ? 0 : status;
}

template <class T>
int Trainer<T>::finish_step(bool boundary, const StopPolicy& stop, std::optional<StopReason> decided) {
  const plan::TrainSpec& tc = spec_.train;
  const StepResult r = runner_->collect();
  const Queued q = queued_.front();
  queued_.pop_front();
  const int step = r.step;
  // The step's time: the device's (events) on GPUs, the host's where the host runs it.
  StepTimes times;
  times.step = std::isnan(r.device_seconds) ? q.host_seconds : r.device_seconds;
  times.comm_measured = r.comm_timed;
  // Host-measured (MPI: time blocked in waits, post-to-completion of each collective) plus
  // device-measured (NCCL: the compute stream's waits for collectives and their comm-stream
  // time, from events; comm/interval_ledger.hpp). A replayed CUDA graph times none.
  times.exposed_comm = r.comm_timed ? q.exposed + r.comm.exposed : NAN;
  times.busy_comm = r.comm_timed ? q.busy + r.comm.busy : NAN;
  total_compute_ += times.compute();
  if (r.comm_timed) {
    total_exposed_ += times.exposed_comm;
    total_busy_ += times.busy_comm;
  }
  last_step_seconds_ = times.step;
  logged_cursor_ = q.cursor;
  logged_graph_ = r.graph;
  frozen_gather_step_bytes_ = r.frozen_gather_bytes;
  last_counted_ = q.counted > 0 ? q.counted : setup_.batch.step_tokens();
  last_attention_fraction_ = q.attention_fraction;
  if (r.applied) {
    ++updates_;
    last_loss_ = r.loss;
  }
  last_dpo_ = r.dpo;
  if (!r.applied) {
    ++skipped_;
    log::warn("step %d: non-finite %s (loss %g, grad norm %g): step skipped, optimizer state untouched (%d of "
              "train.max_skipped_steps=%d)",
              step + 1, std::isfinite(r.loss) ? "gradient norm" : "loss", r.loss, r.grad_norm, skipped_,
              tc.max_skipped_steps);
    if (skipped_ > tc.max_skipped_steps) {
      if (root_)
        log::error("%d steps had a non-finite loss or gradient norm, more than train.max_skipped_steps=%d: stopping. "
                   "Lower train.lr, enable train.grad_clip, or check the data.",
                   skipped_, tc.max_skipped_steps);
      return kExitAbort;
    }
  }
  double val = NAN;
  const bool last = step + 1 == tc.steps;
  // An asynchronous save started at an earlier boundary is committed at the first one
  // where every rank has written its part.
  complete_async_save(false);
  StopReason why = StopReason::None;
  if (boundary) {
    if (eval_sampler_ && ((tc.eval_every > 0 && (step + 1) % tc.eval_every == 0) || last)) val = evaluate();
    if (checkpoint_due(step + 1, last)) save_checkpoint(step + 1, last);
    // Preemption / time limit: decided together by all ranks at this step boundary.
    why = decided ? *decided : last ? StopReason::None : stop.check(times.step);
    if (why != StopReason::None) {
      if (root_)
        log::warn("stopping after step %d (%s): saving a checkpoint, then exiting with status %d so the job can be "
                  "requeued and resumed",
                  step + 1, why == StopReason::Signal ? "SIGUSR1/SIGTERM received" : "wall-clock limit ahead",
                  kExitPreempted);
      if (!checkpoint_due(step + 1, last)) save_checkpoint(step + 1, true);
      complete_async_save(true);  // the job is requeued from what is committed
    }
  }
  // A step that saved, or the first after a load, always writes its record: the save or
  // load is reported in it (doc/checkpoints.md), never overwritten by a later one.
  const bool checkpoint_io = !std::isnan(ckpt_save_s_) || !std::isnan(ckpt_load_s_);
  if ((step + 1) % tc.log_every == 0 || last || !std::isnan(val) || checkpoint_io)
    log_step(step + 1, r.loss, r.grad_norm, r.lr, times, val);
  return why != StopReason::None ? kExitPreempted : -1;
}

/// train.sample_tokens tokens from train.sample_prompt after training.
template <class T>
void Trainer<T>::print_sample() {
  const plan::TrainSpec& tc = spec_.train;
  // The model's tokenizer (the one the checkpoints record), else the dataset's.
  auto tok = checkpoint::open_tokenizer(tokenizer_.known()                ? tokenizer_.spec
                                        : data_.meta.tokenizer == "random" ? "byte"
                                                                           : data_.meta.tokenizer);
  SamplingSettings sampling;
  sampling.temperature = tc.sample_temperature;
  sampling.top_k = tc.sample_top_k;
  sampling.top_p = tc.sample_top_p;
  sampling.min_p = tc.sample_min_p;
  const std::string text = sample_text(session_, *tok, tc.sample_prompt, tc.sample_tokens, sampling, tc.seed);
  if (root_)
    std::printf("\n--- sample (%d tokens, %s) ---\n%s%s\n---\n", tc.sample_tokens,
                sampling_settings_text(sampling).c_str(), tc.sample_prompt.c_str(), text.c_str());
}

template <class T>
void Trainer<T>::launch_step(int step) {
  const plan::TrainSpec& tc = spec_.train;
  const plan::BatchSpec& batch = setup_.batch;
  const parallel::DeviceMesh& mesh = session_.mesh();
  const CommStats before = comm_stats();
  const double t0 = now_seconds();
  // Every micro-batch of the step is read before the step starts, and the ranks agree on a
  // bad token id (data::TokenFile::read checks each one) so that all of them stop with the
  // same message instead of the others waiting in the step's collectives.
  const std::size_t per_micro_batch = batch.micro_batch_tokens();
  step_in_.resize(per_micro_batch * static_cast<std::size_t>(batch.grad_accum));
  step_tgt_.resize(step_in_.size());
  const bool docs = sampler_->document_masked();
  step_doc_.resize(docs ? step_in_.size() : 0);
  mesh.world().agree_on_error([&] {
    for (int micro_step = 0; micro_step < batch.grad_accum; ++micro_step) {
      const std::uint64_t w0 =
          data::rank_first_window(cursor_, micro_step, batch.micro_batch, mesh.shape().dp(), mesh.dp_rank());
      sampler_->fill(w0, batch.micro_batch, step_in_.data() + micro_step * per_micro_batch,
                     step_tgt_.data() + micro_step * per_micro_batch,
                     docs ? step_doc_.data() + micro_step * per_micro_batch : nullptr);
    }
  });  // under the watchdog: a rank stalled between steps ends the job, named
  const DocFiller fill_docs = [&](int micro_step, std::int32_t* doc_start) {
    std::copy_n(step_doc_.data() + micro_step * per_micro_batch, per_micro_batch, doc_start);
  };
  const BatchFiller fill = [&](int micro_step, std::int32_t* in, std::int32_t* tgt) {
    std::copy_n(step_in_.data() + micro_step * per_micro_batch, per_micro_batch, in);
    std::copy_n(step_tgt_.data() + micro_step * per_micro_batch, per_micro_batch, tgt);
  };
  StepInput in;
  in.step = step;
  in.fill = &fill;
  in.docs = docs ? &fill_docs : nullptr;
  in.eager = nan_steps_.count(step + 1) > 0;  // on every rank, whichever ranks are poisoned
  in.poison = in.eager && (tc.inject_nan_rank < 0 || tc.inject_nan_rank == rt_.topology().world_rank);
  // A loss mask (or document boundaries): the mean is over the global batch's counted targets
  // (summed over the ranks, as host values over MPI: nothing here waits for the device).
  // Packed rows: also the attention the kernels run on them, against the whole rows' (the
  // MFU counts what was computed), in the same reduction. Each tp group counts its batch once.
  double attention_fraction = 1.0;
  if (data_.train_mask || docs) {
    // sums: counted targets, attention computed, attention of whole rows
    double sums[3] = {0, 0, 0};
    if (mesh.coord().tp == 0) {
      sums[0] = counted_targets(step_tgt_);
      if (docs)
        plan::add_document_attention_work(step_doc_.data(), batch.micro_batch * batch.grad_accum, batch.seq_len,
                                          attention_work_rows_, sums[1], sums[2]);
    }
    watched_all_reduce_in_place("counted targets", "world", mesh.world().mpi(), sums, docs ? 3 : 1, ReduceOp::Sum);
    in.counted_targets = sums[0];
    if (docs && sums[2] > 0) attention_fraction = sums[1] / sums[2];
    // A global batch whose loss mask is 0 on every row (all prompt, or a damaged mask) has no
    // loss: the step logs 0 and only the weight decay moves the weights. Said once a run,
    // with the key to watch.
    if (data_.train_mask && sums[0] == 0 && !warned_no_targets_) {
      warned_no_targets_ = true;
      if (root_)
        log::warn("step %d: no target of its %d rows is trained on (the loss mask is 0 on all of them): its loss is "
                  "0 and only the weight decay moves the weights; if `counted_tokens` stays 0 in metrics.jsonl, "
                  "check the dataset's mask (re-run `meshtrain prepare`)",
                  step + 1, batch.global_batch);
    }
  }
  // A stored DPO reference: each window's row, looked up in it.
  const ReferenceFiller reference = [&](int micro_step) -> const std::vector<double>* {
    return &step_ref_[static_cast<std::size_t>(micro_step)];
  };
  if (stored_reference_) {
    step_ref_.assign(static_cast<std::size_t>(batch.grad_accum), {});
    const std::uint64_t row_tokens = static_cast<std::uint64_t>(batch.seq_len) + 1;
    for (int micro_step = 0; micro_step < batch.grad_accum; ++micro_step) {
      const std::uint64_t w0 =
          data::rank_first_window(cursor_, micro_step, batch.micro_batch, mesh.shape().dp(), mesh.dp_rank());
      for (int i = 0; i < batch.micro_batch; ++i)
        step_ref_[static_cast<std::size_t>(micro_step)].push_back(
            reference_.train[sampler_->window_start(w0 + static_cast<std::uint64_t>(i)) / row_tokens]);
    }
    in.reference = &reference;
  }
  runner_->launch(in, updates_);
  cursor_ += static_cast<std::uint64_t>(batch.global_batch);
  Queued q;
  q.host_seconds = now_seconds() - t0;
  q.exposed = comm_stats().exposed_seconds - before.exposed_seconds;
  q.busy = comm_stats().busy_seconds - before.busy_seconds;
  q.counted = in.counted_targets;
  q.attention_fraction = attention_fraction;
  q.cursor = cursor_;
  queued_.push_back(q);
}

/// train.eval_batches global batches of validation windows, or the whole split once when it
/// holds fewer (eval_batches_windows).
template <class T>
EvalWindows Trainer<T>::eval_windows(bool* clamped) const {
  const plan::BatchSpec& batch = setup_.batch;
  const std::uint64_t per_micro = static_cast<std::uint64_t>(batch.micro_batch) * setup_.mesh_shape.dp();
  const std::uint64_t split = spec_.data.is_random() ? 0 : eval_sampler_->windows_per_pass();
  return eval_batches_windows(spec_.train.eval_batches, batch.grad_accum, per_micro, split, clamped);
}

template <class T>
double Trainer<T>::evaluate() {
  if (runner_) runner_->release_graphs();  // the evaluation reuses the steps' buffers instead of adding its own
  const plan::BatchSpec& batch = setup_.batch;
  // The evaluation set is eval_batches global batches of windows (at most the split once),
  // split over the dp ranks like training batches, so every mesh evaluates the same windows.
  EvalWindows w = eval_windows();
  w.masked = data_.val_mask != nullptr;
  w.preference = spec_.train.preference();
  w.pair_loss = preference_loss(spec_.train);
  w.reference_rows = stored_reference_ ? &reference_.val : nullptr;
  if (eval_sampler_->document_masked()) {
    TokenBatch docs_token_batch(batch.micro_batch, batch.seq_len, true);
    last_val_ = train::evaluate(session_, *eval_sampler_, w, docs_token_batch).loss;
    return last_val_;
  }
  const EvalResult r = train::evaluate(session_, *eval_sampler_, w, token_batch_);
  last_val_ = r.loss;
  last_val_dpo_ = r.dpo;
  return last_val_;
}

template <class T>
void Trainer<T>::log_step(int step, double loss, double gnorm, double lr, const StepTimes& t, double val) {
  const plan::TrainSpec& tc = spec_.train;
  const int seq_len = setup_.batch.seq_len;
  const double tokens = setup_.batch.step_tokens();
  const MemoryStats& ms = MemoryPool::instance().stats();
  // Every rank's times and memory in one reduction (min and max of each).
  // A step replayed from a CUDA graph has no communication times (the same on every rank):
  // reduced as 0, reported as not measured (null).
  const double mine[6] = {t.step, t.comm_measured ? t.exposed_comm : 0.0, t.comm_measured ? t.busy_comm : 0.0,
                          t.compute(), static_cast<double>(ms.peak_reserved), static_cast<double>(host_peak_rss_bytes())};
  MinMax over[6];
  session_.mesh().world().min_max(mine, over, 6);
  const double unmeasured = t.comm_measured ? 1.0 : NAN;
  const double step_max = over[0].max, exp_min = over[1].min * unmeasured, exp_max = over[1].max * unmeasured,
               busy_min = over[2].min * unmeasured, busy_max = over[2].max * unmeasured, comp_min = over[3].min,
               comp_max = over[3].max, mem_max = over[4].max, rss_max = over[5].max;
  const double tok_s = tokens / step_max;
  // The FLOPs the step performs (model/step_flops.hpp): a frozen LoRA base computes no
  // weight gradients; packed rows only the attention their document masks leave.
  const double flops = model::train_step_flops(spec_.dims, seq_len, setup_.activation_checkpointing,
                                               last_attention_fraction_, spec_.train.preference(), !spec_.train.simpo())
                           .total() *
                       tok_s;
  const double mfu = flops / (peak_flops_ * rt_.topology().world_size);
  if (root_ && mfu > 1.0 && !warned_mfu_over_peak_) {
    // The peak was measured at start-up in ~0.3 s; on cores other jobs shared at that moment
    // it comes out low, and every later step's MFU high by the same factor.
    warned_mfu_over_peak_ = true;
    // info, not warn: it depends on the machine's load, and a run's warnings must not.
    log::info("mfu %.0f%% is above 100%%: the GEMM peak it divides by (%.1f GFLOP/s per rank, %s) is lower than "
              "what this step achieved -- the cores were busy when it was measured. Give the machine's peak as "
              "train.peak_tflops for an MFU that means something.",
              100 * mfu, peak_flops_ / 1e9, spec_.train.peak_tflops > 0 ? "train.peak_tflops" : "measured at start-up");
  }
  if (root_) {
    std::string line = strprintf("step %5d/%d | loss %.4f | lr %.2e | gnorm %.3f | %.0f tok/s | mfu %.1f%% | mem %s | ",
                                 step, tc.steps, loss, lr, gnorm, tok_s, 100 * mfu, format_bytes(mem_max).c_str());
    line += t.comm_measured ? strprintf("comp %.3fs comm %.3fs (exposed %.3fs)", comp_max, busy_max, exp_max)
                            : strprintf("step %.3fs (CUDA graph replay: comm not timed)", comp_max);
    if (tc.preference()) {
      // TRL's names: the rewards of the chosen and rejected responses, their margin, the
      // fraction of pairs with a positive margin (doc/finetuning.md, "DPO").
      line += strprintf(" | rewards chosen %.4f rejected %.4f margin %.4f acc %.3f", last_dpo_.rewards_chosen,
                        last_dpo_.rewards_rejected, last_dpo_.margins, last_dpo_.accuracy);
      if (!std::isnan(val))
        line += strprintf(" | val %.4f (margin %.4f acc %.3f)", val, last_val_dpo_.margins, last_val_dpo_.accuracy);
    } else if (!std::isnan(val)) {
      line += strprintf(" | val %.4f (ppl %.2f)", val, std::exp(val));
    }
    log::info("%s", line.c_str());
  }
  // One metrics.jsonl line (doc/training.md); a NaN or infinite loss is written as null.
  formats::Json j = {{"step", step},
                     {"loss", loss},
                     {"lr", lr},
                     {"grad_norm", gnorm},
                     {"tokens_per_s", tok_s},
                     {"mfu", mfu},
                     {"peak_mem_bytes", mem_max},
                     {"peak_rss_bytes", rss_max},
                     {"step_time_s", step_max},
                     {"compute_s_min", comp_min},
                     {"compute_s_max", comp_max},
                     {"comm_s_min", busy_min},
                     {"comm_s_max", busy_max},
                     {"exposed_comm_s_min", exp_min},
                     {"exposed_comm_s_max", exp_max},
                     {"tokens", static_cast<double>(logged_cursor_) * seq_len},
                     {"skipped_steps", skipped_},
                     {"counted_tokens", last_counted_},
                     {"counted_tokens_per_s", last_counted_ / step_max},
                     {"frozen_gather_bytes", static_cast<double>(frozen_gather_step_bytes_)}};
  if (!std::isnan(val)) j["val_loss"] = val;
  // Packed rows: the share of the whole rows' attention the kernels ran (what mfu counts).
  if (sampler_->document_masked()) j["attention_fraction"] = last_attention_fraction_;
  if (logged_graph_) j["cuda_graph"] = true;  // replayed from a CUDA graph (gpu.graphs)
  if (tc.preference()) {
    const auto add = [&j](const std::string& prefix, const DpoMetrics& m) {
      j[prefix + "rewards/chosen"] = m.rewards_chosen;
      j[prefix + "rewards/rejected"] = m.rewards_rejected;
      j[prefix + "rewards/margins"] = m.margins;
      j[prefix + "rewards/accuracies"] = m.accuracy;
      j[prefix + "logps/chosen"] = m.logps_chosen;
      j[prefix + "logps/rejected"] = m.logps_rejected;
    };
    add("", last_dpo_);
    if (!std::isnan(val)) add("val_", last_val_dpo_);
  }
  if (!std::isnan(ckpt_save_s_)) {
    j["ckpt_save_s"] = ckpt_save_s_;
    j["ckpt_save_gbps"] = ckpt_save_gbps_;
    if (!std::isnan(ckpt_save_held_s_)) j["ckpt_save_held_s"] = ckpt_save_held_s_;
    if (!std::isnan(ckpt_save_background_cpu_s_)) j["ckpt_save_background_cpu_s"] = ckpt_save_background_cpu_s_;
  }
  if (!std::isnan(ckpt_load_s_)) {
    j["ckpt_load_s"] = ckpt_load_s_;
    j["ckpt_load_gbps"] = ckpt_load_gbps_;
  }
  ckpt_save_s_ = ckpt_save_gbps_ = ckpt_save_held_s_ = ckpt_save_background_cpu_s_ = ckpt_load_s_ = ckpt_load_gbps_ = NAN;
  // Rank 0 writes; every rank learns whether the write failed (disk full: exit 74).
  session_.mesh().world().agree_on_error([&] { metrics_->write(formats::json_text(j)); });
}

// ---- DPO's reference ------------------------------------------------------------------------

template <class T>
void Trainer<T>::prepare_reference(int first_step) {
  if (!spec_.train.dpo()) return;
  // The reference is the initial policy (doc/finetuning.md: step 1 is log 2). Only LoRA has
  // a frozen model to run beside the policy, the base with the adapters off, and that is
  // the initial policy only when the adapters start at B = 0. Adapters continued from
  // checkpoint.init_from (a LoRA SFT checkpoint) make the initial policy the base with
  // them, so the reference is stored before step 1 as for full fine-tuning. A resume keeps
  // what its run chose (recorded in its checkpoints); a checkpoint written before the
  // record had the base with the adapters off.
  const bool lora = spec_.dims.lora_rank > 0;
  if (!lora) {
    stored_reference_ = true;
  } else if (first_step == 0) {
    stored_reference_ = init_adapters_loaded_;
  } else {
    const auto recorded = std::find_if(resumed_settings_.begin(), resumed_settings_.end(),
                                       [](const auto& kv) { return kv.first == kDpoReferenceSetting; });
    stored_reference_ = recorded != resumed_settings_.end() && recorded->second == kDpoReferenceStored;
  }
  run_settings_.push_back({kDpoReferenceSetting, stored_reference_ ? kDpoReferenceStored : kDpoReferenceAdaptersOff});
  if (!stored_reference_) {
    log::info("DPO reference: the base with the adapters off (the adapters started at zero, so it is the initial "
              "policy), computed alongside every step");
    return;
  }
  if (lora && first_step == 0)
    log::info("DPO reference: checkpoint.init_from=%s brought LoRA adapters, which this run continues: the "
              "reference is the initial policy, the base with those adapters (not the base without them)",
              spec_.checkpoint.init_from.c_str());
  const char* initial = lora ? "the initial adapters'" : "the initial weights'";
  const auto identity = std::find_if(run_settings_.begin(), run_settings_.end(),
                                     [](const auto& kv) { return kv.first == "data.dir"; });
  MESHTRAIN_ASSERT(identity != run_settings_.end(), "the run settings name no dataset");
  const std::string path = reference_logps_path(spec_.output.dir);
  const std::uint64_t train_rows = data_.meta.train_rows, val_rows = eval_sampler_ ? data_.meta.val_rows : 0;
  if (first_step > 0) {
    // A resume's weights are no longer the initial ones: the run's own values, checked.
    agree_on_errors(rt_.world(), [&] { reference_ = read_reference_logps(path, identity->second, train_rows, val_rows); });
    log::info("DPO reference: %s log-probabilities of %llu train and %llu validation rows, read from %s", initial,
              static_cast<unsigned long long>(train_rows), static_cast<unsigned long long>(val_rows), path.c_str());
    return;
  }
  const double t0 = now_seconds();
  reference_.dataset = identity->second;
  reference_.train = row_logps(data_.train, data_.train_mask);
  if (eval_sampler_) reference_.val = row_logps(data_.val, data_.val_mask);
  write_reference_ = true;
  log::info("DPO reference: %s log-probabilities of %llu train and %llu validation rows in %.2f s (stored as %s)",
            initial, static_cast<unsigned long long>(train_rows), static_cast<unsigned long long>(val_rows),
            now_seconds() - t0, path.c_str());
}

/// Every row of a split once, in file order, split over the dp ranks as an evaluation; the
/// per-row sums of log p over the counted targets, the same on every rank.
template <class T>
std::vector<double> Trainer<T>::row_logps(const std::shared_ptr<const data::TokenSource>& rows,
                                          const std::shared_ptr<const data::MaskFile>& mask) {
  const parallel::DeviceMesh& mesh = session_.mesh();
  const int B = setup_.batch.micro_batch, dp = mesh.shape().dp();
  data::EvalSampler sampler(rows, setup_.batch.seq_len, mask);
  const std::uint64_t n = sampler.windows_per_pass();
  std::vector<double> out(n, 0.0);
  // The policy alone (with LoRA: the adapters on): a reference is given (unused), so no
  // second pass runs.
  const std::vector<double> unused(static_cast<std::size_t>(B), 0.0);
  for (std::uint64_t b = 0; b * static_cast<std::uint64_t>(B) * dp < n; ++b) {
    const std::uint64_t w0 = data::rank_first_window(0, static_cast<int>(b), B, dp, mesh.dp_rank());
    mesh.world().agree_on_error([&] { sampler.fill(w0, B, token_batch_.host_in.data(), token_batch_.host_tgt.data()); });
    token_batch_.upload();
    const parallel::SequenceLogps lp =
        parallel::forward_sequence_logps(session_.engine(), session_.model(), session_.context(),
                                         token_batch_.in.data(), token_batch_.tgt.data(), token_batch_.shape(), &unused);
    // Each tp group adds its rows once.
    if (mesh.coord().tp == 0)
      for (int i = 0; i < B; ++i)
        if (w0 + static_cast<std::uint64_t>(i) < n) out[w0 + static_cast<std::uint64_t>(i)] = lp.policy[static_cast<std::size_t>(i)];
  }
  watched_all_reduce_in_place("DPO reference rows", "world", rt_.world(), out.data(), static_cast<int>(n), ReduceOp::Sum);
  return out;
}

// ---- checkpoints -------------------------------------------------------------------------

/// checkpoint.resume (auto | none | PATH) restores weights, moments and progress; otherwise
/// checkpoint.init_from loads initial weights. Returns the first step to run.
template <class T>
int Trainer<T>::restore_or_init() {
  const plan::CheckpointSpec& cc = spec_.checkpoint;
  parallel::FsdpEngine<T>& eng = session_.engine();
  const std::string path = checkpoint::resolve_resume(rt_.world(), cc.dir, cc.resume);
  checkpoint::IoStats io;
  base_ = checkpoint::BaseRef{};
  base_.seed = spec_.train.seed;  // without init_from the base is the initialisation from train.seed
  base_.init_std = spec_.dims.init_std;
  if (!path.empty()) {
    const checkpoint::TrainState st = checkpoint::load(eng, session_.mesh(), checkpoint_meta(setup_), path, &io);
    // After the load's validation, so that a checkpoint of another model (or LoRA setting)
    // is named as such first; nothing is written before this refusal either.
    require_same_run_settings(path);
    resumed_from_ = path;
    resumed_step_ = st.step;
    cursor_ = st.cursor;
    updates_ = st.updates;
    base_ = st.base;
    skipped_ = st.skipped;
    // The checkpoint's record wins (it survives a dataset prepared later with the same
    // tokenizer); one that names another tokenizer than the data's is refused.
    const checkpoint::TokenizerRef stored = checkpoint::source_tokenizer(rt_.world(), path);
    if (stored.known()) {
      agree_on_errors(rt_.world(), [&] {
        tokenizer_ = checkpoint::run_tokenizer(data_.meta, "dataset " + spec_.data.text(), stored, "checkpoint " + path);
      });
    }
    log::info("resumed from %s: step %d, %llu tokens seen (load %.2f s, %.2f GB/s)", path.c_str(), st.step,
              static_cast<unsigned long long>(st.tokens_seen), io.seconds, io.gbps());
    if (!cc.init_from.empty())
      log::warn("checkpoint.init_from=%s is not used: the run resumes from its own checkpoint %s (set "
                "checkpoint.resume=none with another output.dir, or with checkpoint.overwrite=true, to start from the "
                "initial weights instead)",
                cc.init_from.c_str(), path.c_str());
    if (st.seed != spec_.train.seed)  // only a checkpoint without the record gets here
      log::warn("the checkpoint was written with train.seed=%llu, this run uses %llu: the data order changes",
                static_cast<unsigned long long>(st.seed), static_cast<unsigned long long>(spec_.train.seed));
    ckpt_load_s_ = io.seconds;
    ckpt_load_gbps_ = io.gbps();
    total_io_ += io.seconds;
    return st.step;
  }
  // Loading initialises only what the source lacks (LoRA adapters); a fresh run draws all.
  if (cc.init_from.empty()) {
    eng.init_parameters(spec_.train.seed);
  } else {
    base_ = checkpoint::load_weights(eng, session_.mesh(), spec_.dims, cc.init_from, spec_.train.seed, &io,
                                     &init_adapters_loaded_);
    log::info("initial weights from %s (load %.2f s, %.2f GB/s)", io.path.c_str(), io.seconds, io.gbps());
    ckpt_load_s_ = io.seconds;
    ckpt_load_gbps_ = io.gbps();
    total_io_ += io.seconds;
  }
  return 0;
}

/// A resume continues the run that wrote `path`: the settings its checkpoint recorded that
/// may not change are compared with this run's (resume_settings.hpp), and a change is a
/// UserError naming each key, both values and the two ways on. A checkpoint written before
/// the record resumes as before, with a notice.
template <class T>
void Trainer<T>::require_same_run_settings(const std::string& path) {
  const checkpoint::StoredRunSettings stored = checkpoint::stored_run_settings(rt_.world(), path);
  if (!stored.readable) return;  // load() names what is wrong with the file
  if (!stored.recorded) {
    if (root_)
      log::info("checkpoint %s predates the record of its run settings: a change of train.seq_len, "
                "train.global_batch, train.lr or another setting a resume must keep (doc/checkpoints.md) is not "
                "detected; resume with the settings the run was started with",
                path.c_str());
    return;
  }
  const RunSettings recorded = parse_settings_record(stored.text);
  resumed_settings_ = recorded;
  agree_on_errors(rt_.world(), [&] {
    const std::vector<std::string> conflicts = resume_conflicts(recorded, run_settings_);
    MESHTRAIN_REQUIRE(conflicts.empty(),
                      "checkpoint.resume: checkpoint %s was written by a run with other settings (%s). A resume "
                      "continues that run, and these settings change its trajectory or its data order "
                      "(doc/checkpoints.md lists what may change at resume). Give the checkpoint's values to "
                      "continue it, or start a new run from its weights: checkpoint.init_from=%s "
                      "checkpoint.resume=none, with another output.dir",
                      path.c_str(), join(conflicts, "; ").c_str(), path.c_str());
  });
  for (const std::string& c : resume_changes(recorded, run_settings_))
    if (root_) log::info("resuming with a changed setting: %s", c.c_str());
}

template <class T>
void Trainer<T>::lock_directories(const std::string& out_dir, const std::string& ckpt_dir) {
  namespace fs = std::filesystem;
  locks_.held.push_back(std::make_unique<RunDirLock>("output.dir", out_dir));
  // A checkpoint.dir shared by runs with different output.dirs corrupts as surely. It is
  // locked itself even inside output.dir (the default <output.dir>/checkpoints): another
  // run may name it as its checkpoint.dir with an output.dir of its own.
  std::error_code ec;
  const fs::path out = fs::weakly_canonical(out_dir, ec), ck = fs::weakly_canonical(ckpt_dir, ec);
  if (out.lexically_normal() != ck.lexically_normal())
    locks_.held.push_back(std::make_unique<RunDirLock>("checkpoint.dir", ckpt_dir));
}

template <class T>
bool Trainer<T>::checkpoint_due(int step, bool last) const {
  const plan::CheckpointSpec& cc = spec_.checkpoint;
  return (cc.every > 0 && step % cc.every == 0) || (last && cc.save_final);
}

template <class T>
void Trainer<T>::save_checkpoint(int step, bool wait) {
  checkpoint::TrainState st;
  st.step = step;
  st.cursor = cursor_;
  st.updates = updates_;
  st.skipped = skipped_;
  st.seed = spec_.train.seed;
  st.tokens_seen = cursor_ * static_cast<std::uint64_t>(setup_.batch.seq_len);
  st.base = base_;
  st.tokenizer = tokenizer_;
  st.run_settings = settings_record(run_settings_);
  st.rank_first_windows = next_step_windows(cursor_, setup_);
  // Skipped (non-finite) steps leave the state untouched, and save() refuses a state that
  // holds a non-finite value anyway, so no checkpoint carries a NaN.
  if (!spec_.checkpoint.async) {
    report_save(checkpoint::save(session_.engine(), session_.mesh(), checkpoint_meta(setup_), st, spec_.checkpoint.dir));
    return;
  }
  // A save still in flight is completed first (its result comes back here).
  if (const std::optional<checkpoint::IoStats> previous =
          async_save_.start(session_.engine(), session_.mesh(), checkpoint_meta(setup_), st, spec_.checkpoint.dir))
    report_save(*previous);
  if (wait) complete_async_save(true);
}

template <class T>
void Trainer<T>::complete_async_save(bool wait) {
  if (!async_save_.pending()) return;
  const MpiComm& comm = session_.mesh().world().mpi();
  if (wait) {
    report_save(async_save_.wait(comm));
  } else if (const std::optional<checkpoint::IoStats> io = async_save_.poll(comm)) {
    report_save(*io);
  }
}

/// A save's log line and its fields in the next metrics record; the summary's io_s counts
/// what training waited for (all of a synchronous save, the held part of an asynchronous one).
template <class T>
void Trainer<T>::report_save(const checkpoint::IoStats& io) {
  total_io_ += io.async ? io.held_seconds : io.seconds;
  if (!io.written) return;
  // Two saves completing at one boundary (the previous one, waited for by the next start,
  // which is the final save) are both logged; the metrics record carries the later.
  ckpt_save_s_ = io.seconds;
  ckpt_save_gbps_ = io.gbps();
  ckpt_save_held_s_ = io.async ? io.held_seconds : NAN;
  ckpt_save_background_cpu_s_ = io.async ? io.background_cpu_seconds : NAN;
  log::info("checkpoint %s: %s", io.path.c_str(), checkpoint::describe_save(io).c_str());
}

template <class T>
void Trainer<T>::write_summary() {
  // Per-rank summary: where the time went and the memory peak of every rank.
  const int world = rt_.topology().world_size;
  const MemoryStats& ms = MemoryPool::instance().stats();
  // Rank 0's peak per memory-pool category (each category's own peak; they need not
  // coincide with the total's): what dominates the per-rank peak -- over the training
  // loop, and over the load of the weights (or their initialisation) before it.
  const auto by_category = [](const MemoryStats& m) {
    formats::Json j = formats::Json::object();
    for (int c = 0; c < kNumMemCategories; ++c)
      j[category_name(static_cast<MemCategory>(c))] = static_cast<double>(m.peak_in_use[static_cast<std::size_t>(c)]);
    j["total_in_use"] = static_cast<double>(m.peak_total_in_use);
    return j;
  };
  double mine[6] = {total_compute_, total_busy_, total_exposed_, total_io_, static_cast<double>(ms.peak_reserved),
                    static_cast<double>(host_peak_rss_bytes())};
  std::vector<double> all(static_cast<std::size_t>(6) * world);
  watched_gather("gather", "world", rt_.world(), mine, 6, all.data(), 0);
  const formats::Json peak_by_category = by_category(ms), load_peak_by_category = by_category(load_memory_);
  // Rank 0 writes; every rank learns whether that failed (disk full: exit 74).
  agree_on_errors(rt_.world(), [&] {
    if (!root_) return;
    std::string table = "per-rank summary:\n  rank  compute_s  comm_s  exposed_comm_s  io_s  peak_mem  peak_rss\n";
    formats::Json ranks = formats::Json::array();
    for (int r = 0; r < world; ++r) {
      const double* v = &all[static_cast<std::size_t>(r) * 6];
      table += strprintf("  %4d  %9.2f  %6.2f  %14.2f  %4.2f  %8s  %8s\n", r, v[0], v[1], v[2], v[3],
                         format_bytes(v[4]).c_str(), format_bytes(v[5]).c_str());
      ranks.push_back({{"rank", r},
                       {"compute_s", v[0]},
                       {"comm_s", v[1]},
                       {"exposed_comm_s", v[2]},
                       {"io_s", v[3]},
                       {"peak_mem_bytes", v[4]},
                       {"peak_rss_bytes", v[5]},
                       {"host", rt_.topology().host_of_rank[r]}});
    }
    log::info("%s", table.c_str());
    const formats::Json summary = {{"final_loss", last_loss_},
                                   {"final_val_loss", last_val_},
                                   {"skipped_steps", skipped_},
                                   {"optimizer_updates", updates_},
                                   {"loop_s", loop_seconds_},
                                   {"loop_tokens_per_s", loop_seconds_ > 0 ? loop_tokens_ / loop_seconds_ : 0.0},
                                   {"ranks", ranks},
                                   {"peak_by_category", peak_by_category},
                                   {"load_peak_by_category", load_peak_by_category},
                                   {"recoveries", recoveries(spec_.output.dir)}};  // the supervisor's, issue 31
    // Atomic and checked: an earlier summary.json is replaced whole or kept.
    file_io::replace_file(spec_.output.dir + "/summary.json", formats::json_text(summary) + "\n",
                          fault::Point::RecordWrite);
  }, "world");
}

}  // namespace

int run_training(const Runtime& rt, const plan::RunSetup& setup) {
  try {
    if (setup.spec.train.bf16()) {
      Trainer<bf16> t(rt, setup);
      return t.run();
    }
    Trainer<float> t(rt, setup);
    return t.run();
  } catch (const OutOfDeviceMemory& e) {
    // The pool named every way to need less; this run knows which it has taken already.
    throw OutOfDeviceMemory(e.facts(), memory_ways_out(setup));
  }
}

}  // namespace meshtrain::train
