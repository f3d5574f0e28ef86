// `meshtrain prepare`: rank 0 turns text files into a dataset; the other ranks wait for
// its outcome, so a user error ends every rank with status 2 and one message.
#include <boost/program_options.hpp>
#include <cstdio>
#include <sstream>

#include "command_options.hpp"
#include "app/commands.hpp"
#include "checkpoint/tokenizer_ref.hpp"
#include "comm/agree.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "data/prepare.hpp"
#include "data/tokenizer.hpp"

namespace meshtrain::app {
namespace {

namespace po = boost::program_options;

struct PrepareArgs {
  data::PrepareOptions options;
  OwnOptions own;  ///< --help
};

// Every rank parses the same arguments, so every rank throws the same UserError.
PrepareArgs parse_prepare_args(const Args& args) {
  PrepareArgs out;
  data::PrepareOptions& o = out.options;
  std::string pack = "auto";
  po::options_description desc("Options");
  desc.add_options()
      ("help,h", "show this help")
      ("input", po::value<std::vector<std::string>>(&o.inputs)->multitoken(),
       "text files and/or directories (searched recursively; files with NUL bytes or invalid UTF-8 "
       "and *.dat files are skipped); each file is one document")
      ("output", po::value<std::string>(&o.output), "dataset directory to write (train.bin, val.bin, meta.json)")
      ("tokenizer", po::value<std::string>(&o.tokenizer)->default_value(o.tokenizer),
       ("tokenizer: " + data::tokenizer_spec_help() + " (a file is recorded in meta.json by its absolute path)").c_str())
      ("val_fraction", po::value<double>(&o.val_fraction)->default_value(o.val_fraction, strprintf("%g", o.val_fraction)),
       "text: fraction of each document (its tail, from a line start) that goes to val.bin; alpaca/chat: every "
       "(1/F)-th example goes to val; in [0, 1)")
      ("format", po::value<std::string>(&o.format)->default_value(o.format),
       "text (files of documents) | alpaca (JSONL {\"instruction\", \"input\", \"output\"}) | chat (JSONL "
       "{\"messages\": [{\"role\", \"content\"}, ...]}) | preference (JSONL {\"prompt\" or \"messages\", \"chosen\", "
       "\"rejected\"}); alpaca and chat write rows of examples (several to a row when they fit: --pack) and a loss "
       "mask (train.mask) selecting the response tokens; preference writes each pair as two adjacent rows (chosen, rejected), masks on the final "
       "responses")
      ("seq_len", po::value<int>(&o.seq_len),
       "alpaca/chat/preference, and text with --pack (required): the model's train.seq_len; rows of seq_len + 1 "
       "tokens, longer examples are truncated (text documents are cut into pieces; a preference pair longer than a "
       "row is an error)")
      ("chat_template", po::value<std::string>(&o.chat_template)->default_value(o.chat_template),
       "alpaca/chat/preference: auto (the tokenizer's own template: a GGUF's or tokenizer_config.json's) | chatml | llama3 | "
       "llama2 | alpaca")
      ("system", po::value<std::string>(&o.system),
       "alpaca/chat/preference: system message for examples that have none (default: the template's own, if any; "
       "with the alpaca template: the preamble); recorded in meta.json (chat_system) for generate --chat and exports")
      ("pack", po::value<std::string>(&pack)->implicit_value("true"),
       "pack several examples (alpaca/chat) or documents (text, with --seq_len) into each row (first fit "
       "in a shuffled order, or first-fit decreasing where that needs fewer rows) and write train.docs/val.docs; training then masks attention, positions and loss per example "
       "(doc/data.md, \"Packed rows\"). Default (auto): alpaca/chat examples are packed when more than one fits "
       "a row, text is not; --pack=false writes one example per padded row");
  out.own = parse_own_options(
      "prepare",
      "usage: meshtrain prepare [--format text|alpaca|chat|preference] --input PATH... --output DIR [--tokenizer SPEC]\n"
      "                         [--seq_len N] [--chat_template auto|chatml|llama3|llama2|alpaca] [--system TEXT]\n"
      "                         [--pack[=true|false|auto]]\n"
      "                         [--val_fraction F]\n\n",
      desc, args, [&](const po::variables_map& vm) {
        MESHTRAIN_REQUIRE(pack == "auto" || pack == "true" || pack == "false",
                          "--pack takes true, false or auto (--pack alone is true), not '%s'", pack.c_str());
        o.pack = pack == "true" ? data::PackMode::On : pack == "false" ? data::PackMode::Off : data::PackMode::Auto;
        MESHTRAIN_REQUIRE(vm.count("input"), "--input is required: text files and/or directories to prepare");
        MESHTRAIN_REQUIRE(vm.count("output"), "--output is required: the dataset directory to write");
      });
  return out;
}

}  // namespace

int command_prepare(Runtime& rt, const Args& args) {
  const PrepareArgs parsed = parse_prepare_args(args);
  return run_on_rank0(rt, parsed.own, [&] {
    data::PrepareOptions options = parsed.options;
    options.open_tokenizer = checkpoint::open_tokenizer;
    const data::PrepareSummary summary = data::prepare(options);
    std::fputs(data::format_summary(summary).c_str(), stdout);
    std::fflush(stdout);
    return 0;
  });
}

}  // namespace meshtrain::app
