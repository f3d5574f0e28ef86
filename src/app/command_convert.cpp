// `meshtrain convert`: an HDF5 checkpoint -> a Hugging Face model directory (safetensors +
// config.json). Rank 0 converts serially; the other ranks wait for its outcome, so a user
// error ends every rank with status 2 and one message.
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "export_dir.hpp"
#include "command_options.hpp"
#include "app/commands.hpp"
#include "checkpoint/checkpoint.hpp"
#include "checkpoint/export.hpp"
#include "comm/agree.hpp"
#include "config/config.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"

namespace meshtrain::app {
namespace {

namespace po = boost::program_options;

struct ConvertArgs {
  std::string input, output;
  checkpoint::ExportOptions options;
  OwnOptions own;  ///< --help
};

ConvertArgs parse_convert_args(const Args& args) {
  ConvertArgs out;
  std::string max_shard = "2GiB";
  po::options_description desc("Options");
  desc.add_options()
      ("help,h", "show this help")
      ("input", po::value<std::string>(&out.input),
       "an HDF5 checkpoint (step_*.h5), or a checkpoint directory (its newest complete checkpoint)")
      ("output", po::value<std::string>(&out.output),
       "Hugging Face model directory to write: model.safetensors (or shards + index), config.json and the model's "
       "tokenizer files (tokenizer.json, tokenizer_config.json; recorded in the checkpoint)")
      ("dtype", po::value<std::string>(&out.options.dtype)->default_value(out.options.dtype),
       "tensor dtype of the safetensors: fp32 | bf16")
      ("max_shard_size", po::value<std::string>(&max_shard)->default_value(max_shard),
       "largest safetensors file; above it the model is sharded (model-0000i-of-0000N.safetensors + index)")
      ("merge_lora", po::bool_switch(&out.options.merge_lora),
       "LoRA checkpoint: write the full model with the adapters merged into the base weights (W + alpha/r B A) "
       "instead of a PEFT adapter")
      ("base_model", po::value<std::string>(&out.options.base_model),
       "LoRA checkpoint without --merge_lora: the base_model_name_or_path written into adapter_config.json "
       "(default: the path of the checkpoint's base weights)");
  out.own = parse_own_options(
      "convert",
      "usage: meshtrain convert --input CHECKPOINT --output DIR [--dtype fp32|bf16] [--max_shard_size 2GiB]\n"
      "                         [--merge_lora] [--base_model NAME]\n\n"
      "Converts a meshtrain HDF5 checkpoint into a Hugging Face model directory. A LoRA checkpoint becomes\n"
      "a PEFT adapter (adapter_model.safetensors + adapter_config.json), or with --merge_lora the full\n"
      "model with the adapters merged in. To start training from safetensors weights, set\n"
      "checkpoint.init_from=PATH in `meshtrain train`.\n\n",
      desc, args, [&](const po::variables_map& vm) {
        MESHTRAIN_REQUIRE(vm.count("input"), "--input is required: an HDF5 checkpoint or a checkpoint directory");
        MESHTRAIN_REQUIRE(vm.count("output"), "--output is required: the model directory to write");
        MESHTRAIN_REQUIRE(out.options.dtype == "fp32" || out.options.dtype == "bf16",
                          "--dtype must be fp32 or bf16, not '%s'", out.options.dtype.c_str());
        out.options.max_shard_bytes = parse_bytes("--max_shard_size", max_shard);
        MESHTRAIN_REQUIRE(out.options.max_shard_bytes > 0, "--max_shard_size must be positive");
      });
  return out;
}

}  // namespace

int command_convert(Runtime& rt, const Args& args) {
  const ConvertArgs parsed = parse_convert_args(args);
  return run_on_rank0(rt, parsed.own, [&] {
    std::error_code ec;
    std::string input = parsed.input;
    if (std::filesystem::is_directory(input, ec)) {
      input = checkpoint::newest_checkpoint(parsed.input);
      MESHTRAIN_REQUIRE(!input.empty(), "--input %s: the directory holds no complete checkpoint (step_*.h5)",
                        parsed.input.c_str());
    }
    const double t0 = now_seconds();
    // Written whole beside --output and swapped in (export_dir.hpp): --output ends up
    // holding this export's files only, and a directory that is not an export is refused.
    checkpoint::ExportSummary s;
    write_export_dir(parsed.output, [&](const std::string& staging) {
      s = checkpoint::export_safetensors(input, staging, parsed.options);
      return ExportWritten{s.step, s.files};
    });
    const double dt = now_seconds() - t0;
    const std::string what = s.kind == "peft_adapter"
                                 ? " as a PEFT adapter (base model: " + (s.base_model.empty() ? "unknown" : s.base_model) + ")"
                             : s.kind == "merged_lora" ? " with its LoRA adapters merged"
                                                       : "";
    std::printf("converted %s (step %d)%s: %d tensors, %s in %s: %s (%.2f s, %.2f GB/s)\n", input.c_str(), s.step,
                what.c_str(), s.tensors, format_bytes(static_cast<double>(s.tensor_bytes)).c_str(), parsed.output.c_str(),
                join(s.files, ", ").c_str(), dt, dt > 0 ? s.tensor_bytes / dt / 1e9 : 0.0);
    if (!s.tokenizer_note.empty()) std::printf("convert: %s\n", s.tokenizer_note.c_str());
    if (!s.chat_note.empty()) std::printf("convert: %s\n", s.chat_note.c_str());
    std::fflush(stdout);
    return 0;
  });
}

}  // namespace meshtrain::app
