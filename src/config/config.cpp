#include "config/config.hpp"

#include <boost/program_options.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <climits>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "core/error.hpp"
#include "core/file_io.hpp"
#include "core/format.hpp"

namespace po = boost::program_options;

namespace meshtrain {
namespace {

/// Calls `v(key, field, help)` for every config key. The single list of keys: used to
/// register options, to print help, and to dump the effective config.
template <class C, class V>
void visit_config(C& c, V&& v) {
  auto& m = c.model;
  v("model.family", m.family, "model family: gpt2 | llama");
  v("model.vocab_size", m.vocab_size, "vocabulary size (>= the dataset's)");
  v("model.vocab_pad_multiple", m.vocab_pad_multiple, "pad the vocabulary to a multiple of this (tensor parallelism needs vocab % tp == 0); padded logits are masked");
  v("model.d_model", m.d_model, "hidden size");
  v("model.n_layers", m.n_layers, "transformer blocks");
  v("model.n_heads", m.n_heads, "attention heads");
  v("model.n_kv_heads", m.n_kv_heads, "key/value heads (grouped-query attention, llama); -1 = n_heads");
  v("model.ffn_dim", m.ffn_dim, "MLP hidden size; -1 = 4*d_model (gpt2) or 256-aligned 8/3*d_model (llama)");
  v("model.max_seq_len", m.max_seq_len, "longest sequence (gpt2: size of the position table)");
  v("model.tie_embeddings", m.tie_embeddings, "share the token embedding with the LM head (gpt2 always ties)");
  v("model.norm_eps", m.norm_eps, "epsilon of LayerNorm/RMSNorm");
  v("model.rope_theta", m.rope_theta, "RoPE base (llama)");
  v("model.init_std", m.init_std, "std of the normal init; residual projections use std/sqrt(2*n_layers)");
  v("model.lora_rank", m.lora_rank, "LoRA rank; >0 trains low-rank adapters only, base weights frozen");
  v("model.lora_alpha", m.lora_alpha, "LoRA scaling numerator (scale = alpha / rank)");
  v("model.lora_targets", m.lora_targets, "comma list of projections that get adapters (llama: q,k,v,o,gate,up,down; gpt2: c_attn,attn.c_proj,c_fc,mlp.c_proj); auto = the attention projections PEFT adapts by default: q,v (llama), c_attn (gpt2)");

  v("model.base_quant", m.base_quant, "storage of the frozen base of a LoRA run: none (the compute dtype) | nf4 (QLoRA's 4-bit NormalFloat, 64-weight blocks, double-quantized scales: 4.13 bits per weight) | int8 (absmax per 64 weights, fp32 scale: 8.5 bits) | gguf (a GGUF base, checkpoint.init_from=FILE.gguf, kept in the file's own Q4_0/Q4_1/Q8_0/Q4_K/Q6_K blocks: no re-quantization, no fp32 copy); matrices only, norm weights and biases stay in the compute dtype; needs model.lora_rank > 0");
  v("model.base_quant_embeddings", m.base_quant_embeddings, "with model.base_quant: quantize the token embeddings and the LM head too (true; gguf: kept in the file's blocks), or keep them in the compute dtype as bitsandbytes/PEFT/torchtune do (false: more memory, less quantization error; gguf: the file's values, dequantized once on load); recorded in the checkpoint like model.base_quant");

  auto& p = c.parallel;
  v("parallel.dp_replicate", p.dp_replicate, "data-parallel replicas (hybrid sharding: across nodes); -1 = infer");
  v("parallel.dp_shard", p.dp_shard, "FSDP shard group size; -1 = infer from the world size");
  v("parallel.tp", p.tp, "tensor-parallel degree (inside a node); -1 = infer");
  v("parallel.strategy", p.strategy, "auto | full_shard | shard_grad_op | no_shard | hybrid_shard");
  v("parallel.backend", p.backend, "collective backend: auto | mpi | nccl");
  v("parallel.prefetch", p.prefetch, "FSDP blocks all-gathered ahead of compute (0 = no overlap)");
  v("parallel.reduce_dtype", p.reduce_dtype, "gradient reduction dtype: fp32 | bf16");
  v("parallel.memory_limit", p.memory_limit, "per-rank memory budget for strategy=auto on CPU (e.g. 8GiB); empty = node RAM / ranks per node");
  v("parallel.memory_headroom", p.memory_headroom, "fraction of the memory budget kept free by strategy=auto");
  v("parallel.collective_timeout", p.collective_timeout, "seconds a rank waits in one collective before the watchdog aborts the job (0 = never)");
  auto& pl = c.plan;
  v("plan.world_size", pl.world_size, "plan: number of ranks of the target job (0 = this job)");
  v("plan.gpus_per_node", pl.gpus_per_node, "plan: ranks per node of the target cluster (0 = this job's)");
  v("plan.device_memory", pl.device_memory,
    "plan: memory per device of the target (e.g. 80GiB); a run takes it as its budget after "
    "parallel.memory_limit and up to this machine's memory");
  v("plan.gemm_tflops", pl.gemm_tflops, "plan: GEMM peak per device of the target in TFLOP/s (0 = measured here)");
  v("plan.bus_gbps", pl.bus_gbps, "plan: bus bandwidth of the target in GB/s, 'intra,inter' (empty = measured here)");
  v("plan.mem_gbps", pl.mem_gbps, "plan: memory bandwidth per device of the target in GB/s (0 = measured here)");

  auto& t = c.train;
  v("train.steps", t.steps, "optimizer steps");
  v("train.micro_batch", t.micro_batch, "sequences per rank per micro-step; 0 = auto: the planner chooses it (needs train.global_batch)");
  v("train.seq_len", t.seq_len, "tokens per sequence");
  v("train.grad_accum", t.grad_accum, "micro-steps per optimizer step (derived when train.global_batch is set)");
  v("train.global_batch", t.global_batch, "sequences per optimizer step over all ranks; fixes the optimisation across rank counts (0 = unset)");
  v("train.lr", t.lr, "peak learning rate");
  v("train.min_lr", t.min_lr, "final learning rate of the cosine decay");
  v("train.warmup_steps", t.warmup_steps, "linear warmup steps");
  v("train.lr_schedule", t.lr_schedule, "cosine | constant (after warmup)");
  v("train.weight_decay", t.weight_decay, "AdamW decoupled weight decay (never on norms and biases)");
  v("train.beta1", t.beta1, "AdamW beta1");
  v("train.beta2", t.beta2, "AdamW beta2");
  v("train.adam_eps", t.adam_eps, "AdamW epsilon");
  v("train.decay_embeddings", t.decay_embeddings, "apply weight decay to embeddings too");
  v("train.grad_clip", t.grad_clip, "clip the global gradient norm to this (0 = off)");
  v("train.precision", t.precision, "compute precision: fp32 | bf16 (fp32 master weights and moments)");
  v("train.activation_checkpointing", t.activation_checkpointing, "recompute each block's activations in backward instead of storing them");
  v("train.seed", t.seed, "seed of initialisation, data order and sampling");
  v("train.eval_every", t.eval_every, "steps between validation evaluations (0 = at the end only)");
  v("train.eval_batches", t.eval_batches,
    "global batches (train.global_batch sequences of the validation split) per evaluation; at most the split once");
  v("train.log_every", t.log_every, "steps between progress lines and metrics.jsonl records");
  v("train.time_limit", t.time_limit, "wall-clock seconds for this run, counted from the process's start (start-up included); saves and exits before it (0 = none; the Slurm end time is used when present)");
  v("train.time_limit_margin", t.time_limit_margin, "seconds before the time limit at which the save starts");
  v("train.max_skipped_steps", t.max_skipped_steps, "steps with a non-finite loss or gradient norm that are skipped before the job aborts");
  v("train.inject_nan_steps", t.inject_nan_steps, "debug: comma list of steps whose gradients are poisoned with NaN");
  v("train.inject_nan_rank", t.inject_nan_rank, "debug: rank that poisons its gradients (-1 = all)");
  v("train.peak_tflops", t.peak_tflops, "per-rank GEMM peak in TFLOP/s used for MFU (0 = measure it at start, ~0.5 s)");
  v("train.sample_prompt", t.sample_prompt, "text to continue with the trained model at the end of training");
  v("train.sample_tokens", t.sample_tokens, "tokens sampled at the end of training (0 = no sample)");
  v("train.sample_temperature", t.sample_temperature, "softmax temperature of that sample (0 = greedy)");
  v("train.sample_top_k", t.sample_top_k, "sample among the k most likely tokens (0 = all)");
  v("train.sample_top_p", t.sample_top_p, "then among the most likely tokens that hold at least this probability (nucleus, as generate --top_p; 1 = off)");
  v("train.sample_min_p", t.sample_min_p, "then drop the tokens less likely than this times the most likely one (as generate --min_p; 0 = off)");
  v("train.objective", t.objective, "sft (cross-entropy on the targets) | dpo (direct preference optimization on a `prepare --format preference` dataset; reference: the initial policy -- with fresh LoRA adapters the base with them off, otherwise its log-probabilities stored before step 1) | simpo (reference-free: length-normalized log-probabilities, a target margin)");
  v("train.dpo_beta", t.dpo_beta, "DPO: beta, the scale of the rewards beta * (log p_policy - log p_reference) of a response (> 0)");
  v("train.simpo_beta", t.simpo_beta, "SimPO: beta, the scale of the rewards beta * log p_policy / response tokens (> 0)");
  v("train.simpo_gamma", t.simpo_gamma, "SimPO: gamma, the target margin of the chosen response's reward over the rejected one's (>= 0)");

  v("data.dir", c.data.dir, "dataset directory written by `meshtrain prepare`, or 'random' for random tokens");
  v("data.document_mask", c.data.document_mask, "text datasets: split windows into documents at the end-of-text token; attention, positions and loss stay within each (packed datasets always are)");

  auto& k = c.checkpoint;
  v("checkpoint.dir", k.dir, "checkpoint directory (empty = <output.dir>/checkpoints)");
  v("checkpoint.every", k.every, "steps between checkpoints (0 = only at the end)");
  v("checkpoint.keep", k.keep, "complete checkpoints kept (the newest is never deleted)");
  v("checkpoint.resume", k.resume, "auto (newest complete checkpoint in checkpoint.dir) | none | PATH");
  v("checkpoint.overwrite", k.overwrite, "let a run that does not continue the checkpoints in checkpoint.dir (resume=none, or a resume from a checkpoint outside it) delete them at its start; without it such a run is refused (the config.ini a run writes holds false)");
  v("checkpoint.init_from", k.init_from, "initial weights: a safetensors file/dir or an .h5 checkpoint (fine-tuning)");
  v("checkpoint.save_final", k.save_final, "save a checkpoint after the last step");
  v("checkpoint.async", k.async, "write each save in the background while training goes on (a host copy of the rank's state; doc/checkpoints.md)");

  v("gpu.attention", c.gpu.attention, "training attention on CUDA builds: cudnn (cuDNN's fused flash attention, bf16, for the shapes it takes; packed rows as its variable-length batch of documents; other shapes use kokkos) | kokkos (the blocked GEMM + softmax kernels of every backend; host builds always use them)");
  v("gpu.fused_loss", c.gpu.fused_loss, "LM-head cross-entropy in one online-softmax pass per row (running max and rescaled sum-exp, then the gradient in place), the chunk losses kept on the device and read once per micro-step (false = three passes: max, sum, finish, the loss read back per chunk)");
  v("gpu.norm_form", c.gpu.norm_form, "how the LayerNorm/RMSNorm kernels (fused or not) spread rows: auto (rows on host builds, warps on GPUs) | rows (a team per row; the fused backward a team per 64 rows: the host form) | warps (a warp per row, lane shuffles instead of team barriers; the fused backward a warp per 8 rows; rows moved in 16-byte loads and stores where every row starts on 16 bytes: the GPU form); the forms agree within fp32 rounding");
  v("gpu.row_packs", c.gpu.row_packs, "the row kernels that can (LayerNorm/RMSNorm in gpu.norm_form=warps, and on GPUs the fused cross-entropy, SwiGLU and RoPE) move rows in 16-byte loads and stores where every row starts on 16 bytes (false = element by element: the fallback should the packed kernels fail on a device; the same values within rounding)");
  v("gpu.fused_norms", c.gpu.fused_norms, "inside each block the attention residual add (and GPT-2's projection bias) fused with the second LayerNorm/RMSNorm in one kernel; its backward in one pass with per-block parameter-gradient partials summed in block order (false = add_bias, add_inplace and the norm as separate kernels, column-sum backward)");
  v("gpu.epilogues", c.gpu.epilogues, "GPT-2's bias, bias + GELU, GELU backward + bias gradient and the weight-gradient GEMMs' bias gradients done by the GEMMs themselves: cuBLASLt epilogues on CUDA builds, the GEMM then one fused pass on host builds (false = the GEMM, then add_bias, gelu, gelu_backward and bias_backward as separate kernels)");
  v("gpu.fused_optimizer", c.gpu.fused_optimizer, "gradient norm and clip coefficient computed and kept on the device, AdamW in one launch per FSDP unit reading the clip there (false = one norm and one AdamW launch per parameter, the norm read back before AdamW)");
  v("gpu.graphs", c.gpu.graphs, "CUDA builds: capture one training step (forward, backward, optimizer) into a CUDA graph after two eager steps and replay it for the following steps, when the step allows it; otherwise, or when false, every step is launched kernel by kernel (the train log says which, and why)");

  v("output.dir", c.output.dir, "run directory: effective config, metrics.jsonl, run record");
  v("output.log_all_ranks", c.output.log_all_ranks, "every rank logs, prefixed with its rank");
  v("output.log_level", c.output.log_level, "debug | info | warn");
}

template <class T> std::string to_text(const T& v) {
  if constexpr (is_choice_v<T>) {
    return choice_name(v);
  } else {
    std::ostringstream os;
    os << v;
    return os.str();
  }
}
template <> std::string to_text(const bool& v) { return v ? "true" : "false"; }
// The shortest text that reads back as the same double (0.0003, not 0.00029999999999999997),
// so the effective config round-trips exactly.
template <> std::string to_text(const double& v) {
  for (int digits = 6; digits < 17; ++digits) {
    std::string t = strprintf("%.*g", digits, v);
    if (std::strtod(t.c_str(), nullptr) == v) return t;
  }
  return strprintf("%.17g", v);
}

template <class T> const char* type_word() { return "a value"; }
template <> const char* type_word<int>() { return "an integer"; }
template <> const char* type_word<std::int64_t>() { return "an integer"; }
template <> const char* type_word<std::uint64_t>() { return "a non-negative integer"; }
template <> const char* type_word<double>() { return "a number"; }
template <> const char* type_word<bool>() { return "true or false"; }
template <> const char* type_word<std::string>() { return "a string"; }

struct Registry {
  std::vector<std::string> keys;
  std::map<std::string, std::string> type_of;
};

po::options_description make_options(Config& c, Registry& reg) {
  po::options_description desc("Configuration keys (INI [section] key = value, or --section.key=value)");
  visit_config(c, [&](const char* key, auto& field, const char* help) {
    using T = std::decay_t<decltype(field)>;
    reg.keys.push_back(key);
    // An empty default is shown as "" so that --help prints one for every key.
    const std::string shown = to_text(field).empty() ? "\"\"" : to_text(field);
    if constexpr (is_choice_v<T>) {
      // Read as a word and turned into the enum once, here; an unknown word names the valid ones.
      reg.type_of[key] = "one of " + choice_list<T>();
      desc.add_options()(key, po::value<std::string>()->default_value(shown)->notifier([&field, key](const std::string& w) {
        const std::optional<T> e = parse_choice<T>(w);
        if (!e) throw UserError(strprintf("%s = '%s' is not valid; expected one of: %s", key, w.c_str(), choice_list<T>().c_str()));
        field = *e;
      }), help);
    } else {
      reg.type_of[key] = type_word<T>();
      desc.add_options()(key, po::value<T>(&field)->default_value(field, shown), help);
    }
  });
  return desc;
}

/// The valid key a person most likely meant: one with the same name in another section
/// ("steps" -> "train.steps", "model.lr" -> "train.lr"), else the smallest edit distance.
std::string nearest_key(const std::string& unknown, const std::vector<std::string>& keys) {
  const std::string leaf = unknown.substr(unknown.find('.') + 1);
  for (const auto& k : keys)
    if (k.substr(k.find('.') + 1) == leaf) return k;
  std::string best;
  std::size_t best_d = std::string::npos;
  for (const auto& k : keys) {
    const std::size_t d = edit_distance(unknown, k);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  return best;
}

/// Values that the INI form cannot hold as they are (a newline, a comment character,
/// leading or trailing blanks, a leading quote, control bytes) are written in double
/// quotes with C escapes: \\ \" \n \r \t \xHH (config_to_ini). Everything else is written
/// bare, as before, so the usual config.ini stays as people write it.
bool needs_quotes(const std::string& v) {
  if (v.empty()) return false;
  if (v.front() == ' ' || v.front() == '\t' || v.back() == ' ' || v.back() == '\t' || v.front() == '"') return true;
  for (const char ch : v) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f || ch == '#' || ch == ';') return true;
  }
  return false;
}

std::string quoted_form(const std::string& v) {
  if (!needs_quotes(v)) return v;
  std::string out = "\"";
  for (const char ch : v) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += strprintf("\\x%02x", c);
        } else {
          out += ch;  // bytes >= 0x80 (UTF-8) as they are
        }
    }
  }
  return out + "\"";
}

/// Boost's INI reader cuts a value at any '#' and trims it, and knows one value per line;
/// a quoted value reaches it as this placeholder, replaced by the decoded text afterwards
/// (restore_quoted_values). \x01 cannot occur in a line that reaches Boost otherwise: a
/// bare value holding it would have been written quoted.
std::string quoted_placeholder(std::size_t i) { return "\x01" + std::to_string(i) + "\x01"; }

/// Decodes the quoted value starting at line[pos] == '"'; `pos` ends after the closing
/// quote. UserError naming the file, line and key for a missing quote or a bad escape.
std::string decode_quoted(const std::string& line, std::size_t& pos, const std::string& where, int line_no,
                          const std::string& key) {
  const auto fail = [&](const std::string& why) {
    throw UserError(strprintf("config key '%s'%s, line %d: %s", key.c_str(), where.c_str(), line_no, why.c_str()));
  };
  std::string out;
  for (++pos; pos < line.size(); ++pos) {
    const char ch = line[pos];
    if (ch == '"') {
      ++pos;
      return out;
    }
    if (ch != '\\') {
      out += ch;
      continue;
    }
    if (++pos == line.size()) break;
    switch (line[pos]) {
      case '\\': out += '\\'; break;
      case '"': out += '"'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'x': {
        const auto hex = [](char h) {
          return h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        };
        const int hi = pos + 1 < line.size() ? hex(line[pos + 1]) : -1, lo = pos + 2 < line.size() ? hex(line[pos + 2]) : -1;
        if (hi < 0 || lo < 0) fail("\\x in a quoted value needs two hex digits");
        out += static_cast<char>(hi * 16 + lo);
        pos += 2;
        break;
      }
      default:
        fail(strprintf("unknown escape '\\%c' in a quoted value (known: \\\\ \\\" \\n \\r \\t \\xHH)", line[pos]));
    }
  }
  fail("the quoted value has no closing quote (a value in double quotes ends at the next unescaped \")");
  return out;  // not reached
}

/// The text handed to Boost's INI reader. Boost only knows whole-line comments starting
/// with '#'; also accept a whole line starting with ';' (in any column) and
/// "key = value  ; note" / "key = value  # note" (a ; or # preceded by whitespace starts a
/// comment). A value in double quotes (quote_ini_value) is decoded into `quoted` and
/// replaced by a placeholder; after its closing quote only a comment may follow.
std::string prepare_ini_text(std::istream& in, const std::string& where, std::vector<std::string>& quoted) {
  std::string out, line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // A UTF-8 byte-order mark, as some Windows editors write: not part of the first line.
    if (line_no == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);
    const std::size_t first = line.find_first_not_of(" \t");
    if (first != std::string::npos && (line[first] == ';' || line[first] == '#')) line.clear();
    const std::size_t eq = line.find('=');
    const std::size_t value_at = eq == std::string::npos ? eq : line.find_first_not_of(" \t", eq + 1);
    if (value_at != std::string::npos && line[value_at] == '"' && line[first] != '[') {
      std::string key = line.substr(first, eq - first);
      while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
      std::size_t pos = value_at;
      quoted.push_back(decode_quoted(line, pos, where, line_no, key));
      const std::size_t rest = line.find_first_not_of(" \t", pos);
      if (rest != std::string::npos && line[rest] != ';' && line[rest] != '#')
        throw UserError(strprintf("config key '%s'%s, line %d: text after the closing quote of its value ('%s'); "
                                  "put the whole value inside the quotes",
                                  key.c_str(), where.c_str(), line_no, line.substr(rest).c_str()));
      out += key + " = " + quoted_placeholder(quoted.size() - 1) + "\n";
      continue;
    }
    for (std::size_t i = 1; i < line.size(); ++i) {
      if ((line[i] == ';' || line[i] == '#') && (line[i - 1] == ' ' || line[i - 1] == '\t')) {
        line.resize(i);
        break;
      }
    }
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r')) line.pop_back();
    // A '#' inside a bare value (dir = run#2) is part of it (a comment needs a blank before
    // it), but Boost would cut the value there: it goes the quoted values' way.
    const std::size_t bare_eq = line.find('=');
    if (first != std::string::npos && line[first] != '[' && bare_eq != std::string::npos &&
        line.find('#', bare_eq) != std::string::npos) {
      std::string key = line.substr(first, bare_eq - first);
      while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
      const std::size_t at = line.find_first_not_of(" \t", bare_eq + 1);
      quoted.push_back(line.substr(at));
      out += key + " = " + quoted_placeholder(quoted.size() - 1) + "\n";
      continue;
    }
    out += line + "\n";
  }
  return out;
}

/// Puts the decoded quoted values in place of their placeholders.
po::parsed_options restore_quoted_values(po::parsed_options parsed, const std::vector<std::string>& quoted) {
  for (po::option& o : parsed.options)
    for (std::vector<std::string>* texts : {&o.value, &o.original_tokens})
      for (std::string& v : *texts)
        for (std::size_t i = 0; i < quoted.size(); ++i)
          if (v == quoted_placeholder(i)) v = quoted[i];
  return parsed;
}

[[noreturn]] void unknown_key_error(const std::string& raw, const std::string& where,
                                    const Registry& reg, const std::string& command,
                                    const std::vector<std::string>& command_options) {
  std::string name = raw;
  while (!name.empty() && name[0] == '-') name.erase(0, 1);
  if (const auto eq = name.find('='); eq != std::string::npos) name.resize(eq);
  const auto dot = name.find('.');
  const std::string section = dot == std::string::npos ? "" : name.substr(0, dot);
  bool section_known = false;
  for (const auto& k : reg.keys)
    if (k.compare(0, section.size() + 1, section + ".") == 0) section_known = true;
  if (dot == std::string::npos && !command_options.empty()) {
    // A command with options of its own (eval --batches): the mistyped name is most likely
    // one of those; suggest one only when it is close, and list them all.
    std::string best;
    std::size_t best_d = std::string::npos;
    for (const auto& o : command_options)
      if (edit_distance(name, o) < best_d) best_d = edit_distance(name, o), best = o;
    std::vector<std::string> listed;
    for (const auto& o : command_options) listed.push_back("--" + o);
    const bool close = best_d <= std::max<std::size_t>(2, name.size() / 3);
    throw UserError(strprintf("unknown option '%s'%s; `meshtrain %s` takes %s, and configuration keys as "
                              "--section.key=value (see `meshtrain %s --help`)",
                              raw.c_str(), close ? (" (did you mean '--" + best + "'?)").c_str() : where.c_str(),
                              command.c_str(), join(listed, ", ").c_str(), command.c_str()));
  }
  if (dot == std::string::npos) {
    throw UserError(strprintf("unknown option '%s'%s: configuration keys have the form "
                              "--section.key=value (did you mean '--%s'?); see `meshtrain %s --help`",
                              raw.c_str(), where.c_str(), nearest_key(name, reg.keys).c_str(),
                              command.c_str()));
  }
  if (!section_known) {
    std::vector<std::string> sections;  // in the order of the key list
    for (const auto& k : reg.keys)
      if (const std::string s = k.substr(0, k.find('.')); std::find(sections.begin(), sections.end(), s) == sections.end())
        sections.push_back(s);
    throw UserError(strprintf("unknown config section '%s' in '%s'%s; sections are %s (did you mean '%s'?)",
                              section.c_str(), name.c_str(), where.c_str(), join(sections, ", ").c_str(),
                              nearest_key(name, reg.keys).c_str()));
  }
  throw UserError(strprintf("unknown config key '%s'%s; did you mean '%s'? See `meshtrain %s --help` "
                            "for every key",
                            name.c_str(), where.c_str(), nearest_key(name, reg.keys).c_str(),
                            command.c_str()));
}

std::string strip_dashes(std::string name) {
  while (!name.empty() && name[0] == '-') name.erase(0, 1);
  return name;
}

/// "--key=" (an empty value, e.g. to clear a path) becomes "--key" "": Boost rejects an
/// empty value after '=' but accepts an empty argument.
std::vector<std::string> split_empty_assignments(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (const std::string& a : args) {
    if (a.size() > 3 && a.compare(0, 2, "--") == 0 && a.back() == '=' && a.find('=') == a.size() - 1) {
      out.push_back(a.substr(0, a.size() - 1));
      out.emplace_back();
    } else {
      out.push_back(a);
    }
  }
  return out;
}

/// Boost converts "-1" to an unsigned key as 2^64 - 1 without complaint (lexical_cast
/// accepts a sign for unsigned types); refuse it like any other value of the wrong type.
po::parsed_options refuse_negative_unsigned(po::parsed_options parsed, const Registry& reg, const std::string& where) {
  for (const po::option& o : parsed.options) {
    const auto it = reg.type_of.find(o.string_key);
    if (it == reg.type_of.end() || it->second != type_word<std::uint64_t>()) continue;
    for (const std::string& v : o.value) {
      const auto first = v.find_first_not_of(" \t");
      MESHTRAIN_REQUIRE(first == std::string::npos || v[first] != '-', "config key '%s'%s expects %s, got '%s'",
                        o.string_key.c_str(), where.c_str(), it->second.c_str(), v.c_str());
    }
  }
  return parsed;
}

/// Stores the text an old (moved) key was given as into the field of its new key, with the
/// new key's type; a bad value is a UserError naming the old key as written.
void apply_moved_key(Config& c, const std::string& old_key, const std::string& new_key, const std::string& text,
                     const std::string& where) {
  bool found = false;
  visit_config(c, [&](const char* key, auto& field, const char*) {
    using T = std::decay_t<decltype(field)>;
    if (new_key != key) return;
    found = true;
    if constexpr (std::is_same_v<T, std::string>) {
      field = text;
    } else if constexpr (std::is_same_v<T, int> || std::is_same_v<T, double>) {
      // The old ceilings were text, empty meaning "measured here": now 0 means that.
      if (text.empty() && std::is_same_v<T, double>) {
        field = 0;
        return;
      }
      const char* b = text.c_str();
      char* end = nullptr;
      errno = 0;
      const double v = std::strtod(b, &end);
      const bool whole = end != b && *end == '\0' && errno == 0 && std::isfinite(v);
      MESHTRAIN_REQUIRE(whole && (!std::is_same_v<T, int> || (v == std::floor(v) && std::fabs(v) <= INT_MAX)),
                        "config key '%s'%s expects %s, got '%s'", old_key.c_str(), where.c_str(), type_word<T>(),
                        text.c_str());
      field = static_cast<T>(v);
    } else {
      throw std::logic_error("a moved key of this type needs a conversion in apply_moved_key: " + new_key);
    }
  });
  if (!found) throw std::logic_error("moved_config_keys names an unknown key " + new_key);
}

}  // namespace

ParsedArgs parse_config(const std::string& command, const std::vector<std::string>& args,
                        const std::vector<std::string>& command_options) {
  ParsedArgs out;
  Registry reg;
  po::options_description keys = make_options(out.config, reg);
  po::options_description generic("Options");
  generic.add_options()("help,h", "show this help");
  po::options_description hidden;
  hidden.add_options()("config-file", po::value<std::string>(), "INI file");
  // The old names of moved keys: read (as text) but not listed in --help.
  po::options_description moved;
  for (const auto& [old_key, new_key] : moved_config_keys())
    moved.add_options()(old_key.c_str(), po::value<std::string>(), "");
  po::options_description all;
  all.add(generic).add(keys).add(hidden).add(moved);
  po::options_description file_options;
  file_options.add(keys).add(moved);
  po::positional_options_description positional;
  positional.add("config-file", 1);

  po::variables_map vm;
  std::string where = " (on the command line)";
  try {
    std::vector<std::string> argv = split_empty_assignments(args);
    po::store(refuse_negative_unsigned(po::command_line_parser(argv).options(all).positional(positional).run(), reg,
                                       where),
              vm);
    for (const std::string& k : reg.keys)
      if (vm.count(k) && !vm[k].defaulted()) out.config.command_line_keys.insert(k);
    for (const auto& moved_key : moved_config_keys())
      if (vm.count(moved_key.first)) out.config.command_line_keys.insert(moved_key.first);

    if (vm.count("help")) {
      std::ostringstream os;
      os << "usage: meshtrain " << command << " [CONFIG.ini] [--section.key=value ...]\n\n"
         << generic << "\n" << keys;
      out.help = true;
      out.help_text = os.str();
      return out;
    }
    if (vm.count("config-file")) {
      const std::string path = vm["config-file"].as<std::string>();
      std::error_code ec;
      // An ifstream opens a directory without error and reads nothing from it, which
      // would silently run the defaults.
      MESHTRAIN_REQUIRE(!std::filesystem::is_directory(path, ec),
                        "config file '%s' is a directory; give the path of an INI file", path.c_str());
      file_io::require_regular_file(path, "config file");  // a FIFO would block the open
      std::ifstream in(path);
      MESHTRAIN_REQUIRE(in.good(), "cannot open config file '%s': %s", path.c_str(),
                        std::strerror(errno));
      out.config.source_file = path;
      where = " (in " + path + ")";
      // Values already stored from the command line take precedence over the file.
      std::vector<std::string> quoted;
      std::istringstream stripped(prepare_ini_text(in, where, quoted));
      const po::parsed_options from_file = refuse_negative_unsigned(
          restore_quoted_values(po::parse_config_file(stripped, file_options, /*allow_unregistered=*/false), quoted),
          reg, where);
      for (const po::option& o : from_file.options) out.config.file_keys.insert(o.string_key);
      po::store(from_file, vm);
    }
    po::notify(vm);
  } catch (const po::unknown_option& e) {
    unknown_key_error(e.get_option_name(), where, reg, command, command_options);
  } catch (const po::too_many_positional_options_error&) {
    throw UserError(strprintf("meshtrain %s takes at most one config file; give settings as "
                              "--section.key=value", command.c_str()));
  } catch (const po::validation_error& e) {
    // Bad numbers (invalid_option_value) and bad booleans (invalid_bool_value).
    const std::string key = strip_dashes(e.get_option_name());
    throw UserError(strprintf("config key '%s'%s expects %s: %s", key.c_str(), where.c_str(),
                              reg.type_of.count(key) ? reg.type_of.at(key).c_str() : "another value",
                              e.what()));
  } catch (const po::multiple_occurrences& e) {
    throw UserError(strprintf("config key '%s' is given twice%s; give each key once",
                              strip_dashes(e.get_option_name()).c_str(), where.c_str()));
  } catch (const po::error& e) {
    throw UserError(strprintf("cannot parse the configuration%s: %s", where.c_str(), e.what()));
  }
  // Moved keys: the old name sets the new key, with one note for all of them; both names
  // at once would leave it unclear which value counts.
  Config& c = out.config;
  std::vector<std::string> renamed;
  for (const auto& [old_key, new_key] : moved_config_keys()) {
    if (!vm.count(old_key)) continue;
    const bool old_on_line = c.command_line_keys.count(old_key) > 0;
    MESHTRAIN_REQUIRE(!c.is_set(new_key),
                      "%s and %s are both set; %s is the old name of %s: keep only %s", old_key.c_str(),
                      new_key.c_str(), old_key.c_str(), new_key.c_str(), new_key.c_str());
    apply_moved_key(c, old_key, new_key, vm[old_key].as<std::string>(),
                    old_on_line ? " (on the command line)" : where);
    c.command_line_keys.erase(old_key);
    c.file_keys.erase(old_key);
    (old_on_line ? c.command_line_keys : c.file_keys).insert(new_key);
    renamed.push_back(old_key + " is now " + new_key);
  }
  if (!renamed.empty())
    c.deprecation_note = "deprecated configuration key" + std::string(renamed.size() > 1 ? "s" : "") + ": " +
                         join(renamed, ", ") + " (the [plan] section); the old name" + (renamed.size() > 1 ? "s" : "") +
                         " will be removed, rename " + (renamed.size() > 1 ? "them" : "it");
  return out;
}

void validate_config(const Config& c) {
  // Every float key first: NaN and +-Inf pass the range checks below (NaN compares false
  // with everything) and would train into NaNs, so no float key may hold one.
  visit_config(c, [](const char* key, const auto& field, const char*) {
    using T = std::decay_t<decltype(field)>;
    if constexpr (std::is_same_v<T, double>)
      MESHTRAIN_REQUIRE(std::isfinite(field), "%s = %g is not a finite number; give a finite value", key, field);
  });
  const auto positive = [](const char* key, double v) {
    MESHTRAIN_REQUIRE(v > 0, "%s must be positive, got %g", key, v);
  };
  const auto non_negative = [](const char* key, double v) {
    MESHTRAIN_REQUIRE(v >= 0, "%s must be >= 0, got %g", key, v);
  };
  // Upper bounds on sizes: far above any real model or job, low enough that products of
  // them (tokens per micro-batch, elements per tensor) cannot overflow the integer types
  // that hold them. A value past one is a typo, not a plan.
  const auto at_most = [](const char* key, long long v, long long max) {
    MESHTRAIN_REQUIRE(v <= max, "%s = %lld is larger than the largest supported value %lld; check the value", key,
                      v, max);
  };
  const auto mesh_degree = [&](const char* key, int v) {
    MESHTRAIN_REQUIRE(v == -1 || v >= 1, "%s must be -1 (infer) or positive, got %d", key, v);
    at_most(key, v, 1 << 24);
  };
  positive("model.vocab_size", static_cast<double>(c.model.vocab_size));
  at_most("model.vocab_size", c.model.vocab_size, INT32_MAX);  // token ids are int32
  positive("model.vocab_pad_multiple", c.model.vocab_pad_multiple);
  at_most("model.vocab_pad_multiple", c.model.vocab_pad_multiple, 1 << 16);
  positive("model.d_model", c.model.d_model);
  at_most("model.d_model", c.model.d_model, 1 << 17);
  positive("model.n_layers", c.model.n_layers);
  at_most("model.n_layers", c.model.n_layers, 1 << 14);
  positive("model.n_heads", c.model.n_heads);
  at_most("model.n_heads", c.model.n_heads, c.model.d_model);
  MESHTRAIN_REQUIRE(c.model.n_kv_heads == -1 || c.model.n_kv_heads >= 1,
                    "model.n_kv_heads must be -1 (= n_heads) or positive, got %d", c.model.n_kv_heads);
  at_most("model.n_kv_heads", c.model.n_kv_heads, c.model.n_heads);
  MESHTRAIN_REQUIRE(c.model.ffn_dim == -1 || c.model.ffn_dim >= 1,
                    "model.ffn_dim must be -1 (default rule) or positive, got %d", c.model.ffn_dim);
  at_most("model.ffn_dim", c.model.ffn_dim, 1 << 20);
  positive("model.max_seq_len", c.model.max_seq_len);
  at_most("model.max_seq_len", c.model.max_seq_len, 1 << 22);
  positive("model.norm_eps", c.model.norm_eps);
  MESHTRAIN_REQUIRE(c.model.norm_eps < 1, "model.norm_eps must be below 1 (typically 1e-5 or 1e-6), got %g",
                    c.model.norm_eps);
  positive("model.rope_theta", c.model.rope_theta);
  positive("model.init_std", c.model.init_std);
  non_negative("model.lora_rank", c.model.lora_rank);
  at_most("model.lora_rank", c.model.lora_rank, c.model.d_model);
  positive("model.lora_alpha", c.model.lora_alpha);
  mesh_degree("parallel.dp_replicate", c.parallel.dp_replicate);
  mesh_degree("parallel.dp_shard", c.parallel.dp_shard);
  mesh_degree("parallel.tp", c.parallel.tp);
  non_negative("parallel.prefetch", c.parallel.prefetch);
  at_most("parallel.prefetch", c.parallel.prefetch, 1 << 14);
  MESHTRAIN_REQUIRE(c.parallel.memory_headroom >= 0 && c.parallel.memory_headroom < 1,
                    "parallel.memory_headroom must be in [0, 1), got %g", c.parallel.memory_headroom);
  non_negative("parallel.collective_timeout", c.parallel.collective_timeout);
  if (!c.parallel.memory_limit.empty()) parse_bytes("parallel.memory_limit", c.parallel.memory_limit);
  non_negative("plan.world_size", c.plan.world_size);
  at_most("plan.world_size", c.plan.world_size, 1 << 24);
  non_negative("plan.gpus_per_node", c.plan.gpus_per_node);
  at_most("plan.gpus_per_node", c.plan.gpus_per_node, 1 << 12);
  if (!c.plan.device_memory.empty()) parse_bytes("plan.device_memory", c.plan.device_memory);
  non_negative("plan.gemm_tflops", c.plan.gemm_tflops);
  if (!c.plan.bus_gbps.empty()) parse_bus_gbps("plan.bus_gbps", c.plan.bus_gbps);
  non_negative("plan.mem_gbps", c.plan.mem_gbps);
  non_negative("train.steps", c.train.steps);
  non_negative("train.micro_batch", c.train.micro_batch);  // 0: chosen by the planner
  at_most("train.micro_batch", c.train.micro_batch, 1 << 20);
  positive("train.seq_len", c.train.seq_len);
  at_most("train.seq_len", c.train.seq_len, 1 << 22);
  // Tokens of one micro-batch index int32 buffers.
  at_most("train.micro_batch x train.seq_len", static_cast<long long>(c.train.micro_batch) * c.train.seq_len,
          INT32_MAX);
  positive("train.grad_accum", c.train.grad_accum);
  at_most("train.grad_accum", c.train.grad_accum, 1 << 20);
  non_negative("train.global_batch", c.train.global_batch);
  at_most("train.global_batch", c.train.global_batch, 1 << 30);
  non_negative("train.lr", c.train.lr);  // 0 keeps the weights fixed (used to check loading)
  non_negative("train.min_lr", c.train.min_lr);
  MESHTRAIN_REQUIRE(c.train.lr_schedule != LrScheduleKind::Cosine || c.train.min_lr <= c.train.lr,
                    "train.min_lr = %g is above train.lr = %g, so the cosine schedule would raise the learning rate; "
                    "set train.min_lr <= train.lr",
                    c.train.min_lr, c.train.lr);
  non_negative("train.warmup_steps", c.train.warmup_steps);
  non_negative("train.weight_decay", c.train.weight_decay);
  MESHTRAIN_REQUIRE(c.train.beta1 >= 0 && c.train.beta1 < 1, "train.beta1 must be in [0, 1), got %g", c.train.beta1);
  MESHTRAIN_REQUIRE(c.train.beta2 >= 0 && c.train.beta2 < 1, "train.beta2 must be in [0, 1), got %g", c.train.beta2);
  positive("train.adam_eps", c.train.adam_eps);
  non_negative("train.grad_clip", c.train.grad_clip);
  non_negative("train.eval_every", c.train.eval_every);
  positive("train.eval_batches", c.train.eval_batches);
  at_most("train.eval_batches", c.train.eval_batches, 1 << 20);
  positive("train.log_every", c.train.log_every);
  non_negative("train.time_limit", c.train.time_limit);
  non_negative("train.time_limit_margin", c.train.time_limit_margin);
  non_negative("train.max_skipped_steps", c.train.max_skipped_steps);
  MESHTRAIN_REQUIRE(c.train.inject_nan_rank >= -1, "train.inject_nan_rank must be -1 (all ranks) or a rank, got %d",
                    c.train.inject_nan_rank);
  non_negative("train.sample_tokens", c.train.sample_tokens);
  at_most("train.sample_tokens", c.train.sample_tokens, 1 << 24);
  non_negative("train.sample_temperature", c.train.sample_temperature);
  non_negative("train.sample_top_k", c.train.sample_top_k);
  MESHTRAIN_REQUIRE(c.train.sample_top_p > 0 && c.train.sample_top_p <= 1,
                    "train.sample_top_p must be in (0, 1] (1 = off), got %g", c.train.sample_top_p);
  MESHTRAIN_REQUIRE(c.train.sample_min_p >= 0 && c.train.sample_min_p <= 1,
                    "train.sample_min_p must be in [0, 1] (0 = off), got %g", c.train.sample_min_p);
  non_negative("train.peak_tflops", c.train.peak_tflops);
  MESHTRAIN_REQUIRE(std::isfinite(c.train.dpo_beta) && c.train.dpo_beta > 0,
                    "train.dpo_beta must be a positive number, got %g", c.train.dpo_beta);
  MESHTRAIN_REQUIRE(std::isfinite(c.train.simpo_beta) && c.train.simpo_beta > 0,
                    "train.simpo_beta must be a positive number, got %g", c.train.simpo_beta);
  MESHTRAIN_REQUIRE(std::isfinite(c.train.simpo_gamma) && c.train.simpo_gamma >= 0,
                    "train.simpo_gamma must be a number >= 0, got %g", c.train.simpo_gamma);
  if (!c.train.inject_nan_steps.empty()) parse_int_list("train.inject_nan_steps", c.train.inject_nan_steps);
  non_negative("checkpoint.every", c.checkpoint.every);
  positive("checkpoint.keep", c.checkpoint.keep);
  MESHTRAIN_REQUIRE(!c.output.dir.empty(), "output.dir must not be empty");
}

std::vector<std::pair<std::string, std::string>> config_entries(const Config& c) {
  std::vector<std::pair<std::string, std::string>> out;
  visit_config(c, [&](const char* key, const auto& field, const char*) {
    out.emplace_back(key, to_text(field));
  });
  return out;
}

std::string config_to_ini(const Config& c) {
  std::string out;
  std::string section;
  for (const auto& [key, value] : config_entries(c)) {
    const std::string s = key.substr(0, key.find('.'));
    if (s != section) {
      out += (section.empty() ? "" : "\n") + std::string("[") + s + "]\n";
      section = s;
    }
    // Quoted where the bare form would not read back as the same text (a newline, '#',
    // ';', blanks at either end): every value written here parses to itself.
    out += key.substr(key.find('.') + 1) + " = " + quoted_form(value) + "\n";
  }
  return out;
}

std::string quote_ini_value(const std::string& value) { return quoted_form(value); }

std::string unquote_ini_value(const std::string& written) {
  std::size_t pos = written.find_first_not_of(" \t");
  if (pos == std::string::npos || written[pos] != '"') return written;
  const std::string value = decode_quoted(written, pos, "", 0, "");
  MESHTRAIN_REQUIRE(written.find_first_not_of(" \t", pos) == std::string::npos,
                    "text after the closing quote of the value '%s'", written.c_str());
  return value;
}

const std::vector<std::pair<std::string, std::string>>& moved_config_keys() {
  static const std::vector<std::pair<std::string, std::string>> moved = {
      {"parallel.world_size", "plan.world_size"},
      {"parallel.gpus_per_node", "plan.gpus_per_node"},
      {"parallel.device_memory", "plan.device_memory"},
      {"parallel.target_gemm_tflops", "plan.gemm_tflops"},
      {"parallel.target_bus_gbps", "plan.bus_gbps"},
      {"parallel.target_mem_gbps", "plan.mem_gbps"},
  };
  return moved;
}

std::pair<double, double> parse_bus_gbps(const std::string& key, const std::string& text) {
  // "intra,inter", or one number for both.
  const std::size_t comma = text.find(',');
  const auto number = [&](const std::string& t) {
    char* end = nullptr;
    const double v = std::strtod(t.c_str(), &end);
    MESHTRAIN_REQUIRE(end != t.c_str() && *end == '\0' && std::isfinite(v) && v > 0,
                      "%s must be 'intra,inter' in GB/s, e.g. 150,25 (got '%s')", key.c_str(), text.c_str());
    return v;
  };
  const double intra = number(text.substr(0, comma));
  const double inter = comma == std::string::npos ? intra : number(text.substr(comma + 1));
  return {intra, inter};
}

std::uint64_t parse_bytes(const std::string& key, const std::string& text) {
  std::size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (...) {
    throw UserError(strprintf("%s = '%s' is not a size; write e.g. 8GiB, 512MiB, 80GB or a byte count",
                              key.c_str(), text.c_str()));
  }
  std::string unit = text.substr(pos);
  while (!unit.empty() && unit[0] == ' ') unit.erase(0, 1);
  double mult = 1;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "KiB" || unit == "K") mult = 1024.0;
  else if (unit == "MiB" || unit == "M") mult = 1024.0 * 1024;
  else if (unit == "GiB" || unit == "G") mult = 1024.0 * 1024 * 1024;
  else if (unit == "TiB" || unit == "T") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "KB") mult = 1e3;
  else if (unit == "MB") mult = 1e6;
  else if (unit == "GB") mult = 1e9;
  else if (unit == "TB") mult = 1e12;
  else
    throw UserError(strprintf("%s = '%s': unknown size unit '%s' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)",
                              key.c_str(), text.c_str(), unit.c_str()));
  MESHTRAIN_REQUIRE(value >= 0 && std::isfinite(value), "%s = '%s' must be a non-negative size",
                    key.c_str(), text.c_str());
  // A double at or past 2^64 has no uint64 value (the conversion is undefined; x86 gives 0,
  // which read as "no size" or "must be positive").
  const double bytes = value * mult;
  MESHTRAIN_REQUIRE(bytes < 18446744073709551616.0, "%s = '%s' is larger than the largest size (16 EiB)", key.c_str(),
                    text.c_str());
  return static_cast<std::uint64_t>(bytes);
}

std::vector<long> parse_int_list(const std::string& key, const std::string& text) {
  std::vector<long> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      std::size_t pos = 0;
      out.push_back(std::stol(item, &pos));
      MESHTRAIN_REQUIRE(pos == item.size(), "bad");
    } catch (...) {
      throw UserError(strprintf("%s = '%s' must be a comma-separated list of integers", key.c_str(),
                                text.c_str()));
    }
  }
  return out;
}

}  // namespace meshtrain
