#include "train/setting_warnings.hpp"

#include "core/format.hpp"
#include "model/param_spec.hpp"

namespace meshtrain::train {

std::vector<std::string> setting_warnings(const plan::RunSetup& s) {
  const plan::TrainSpec& t = s.spec.train;
  const plan::BatchSpec& asked = s.spec.batch;
  std::vector<std::string> out;
  if (asked.global_batch > 0 && s.spec.given.grad_accum && asked.grad_accum != s.batch.grad_accum)
    out.push_back(strprintf("train.global_batch=%d wins over train.grad_accum=%d: %d sequences per step = micro_batch "
                            "%d x %d data-parallel rank(s) x grad_accum %d; remove one of the two keys",
                            asked.global_batch, asked.grad_accum, s.batch.global_batch, s.batch.micro_batch, s.mesh_shape.dp(),
                            s.batch.grad_accum));
  if (t.time_limit > 0 && t.time_limit_margin >= t.time_limit)
    out.push_back(strprintf("train.time_limit=%g s is not longer than train.time_limit_margin=%g s (the time kept for "
                            "the final save): the run saves and stops after its first step; lower "
                            "train.time_limit_margin or raise train.time_limit",
                            t.time_limit, t.time_limit_margin));
  if (t.eval_every > 0 && t.eval_every % t.log_every != 0)
    out.push_back(strprintf("train.eval_every=%d is not a multiple of train.log_every=%d: every step with a validation "
                            "loss is also logged and written to metrics.jsonl, between the log_every lines",
                            t.eval_every, t.log_every));
  if (!t.sample_prompt.empty() && t.sample_tokens == 0)
    out.push_back("train.sample_prompt is set but train.sample_tokens=0: no sample is generated; set "
                  "train.sample_tokens");
  if (s.spec.dims.lora_rank == 0 && s.spec.given.lora_options_on_command_line)
      out.push_back("model.lora_alpha / model.lora_targets have no effect with model.lora_rank=0 (full training); set "
                    "model.lora_rank > 0 for LoRA");
  // checkpoint.overwrite with nothing to replace: train/earlier_run.hpp (overwrite_unused),
  // once the run has looked at its directories.
  return out;
}

std::string lora_summary(const model::ModelDims& d) {
  if (d.lora_rank <= 0) return "";
  std::int64_t total = 0, trainable = 0;
  for (const model::ParamSpec& p : model::build_param_specs(d)) {
    total += p.numel();
    if (!p.frozen) trainable += p.numel();
  }
  return strprintf("LoRA fine-tuning: rank %d, alpha %g (scale %g) on %s: %lld trainable parameters (%.2f%% of %lld); "
                   "base weights frozen",
                   d.lora_rank, d.lora_alpha, d.lora_scale(), join(d.lora_targets, ",").c_str(),
                   static_cast<long long>(trainable), 100.0 * static_cast<double>(trainable) / static_cast<double>(total),
                   static_cast<long long>(total));
}

}  // namespace meshtrain::train
