#pragma once
// What every command shares: parsing its own options (beside the configuration or without
// one) and setting up logging from the configuration.

#include <boost/program_options.hpp>
#include <functional>
#include <string>

#include "app/commands.hpp"
#include "config/config.hpp"

namespace meshtrain::app {

/// \brief The options of a command that takes no configuration (prepare, tokenize, convert,
/// the bench options beside its mesh keys): `desc` parsed from `args`, bare arguments going
/// to `positional` when given, then the command's own `checks` of the values. A malformed
/// option is a UserError ending in "run `meshtrain COMMAND --help` for the options". With
/// --help, `help` is set and `help_text` is `usage`, the options, then `after`; `checks` do
/// not run, and run_on_rank0 / answer_help print the text instead of running the command.
struct OwnOptions {
  boost::program_options::variables_map vm;
  bool help = false;
  std::string help_text;
};
using OptionChecks = std::function<void(const boost::program_options::variables_map&)>;
OwnOptions parse_own_options(const std::string& command, const std::string& usage,
                             const boost::program_options::options_description& desc, const Args& args,
                             const OptionChecks& checks = {},
                             const boost::program_options::positional_options_description* positional = nullptr,
                             const std::string& after = "");

/// The command's own options (`own`, e.g. --checkpoint) parsed from `args`; every other
/// argument (the config file and --section.key=value) goes to parse_config. `--help`
/// prints `usage`, the command's options, then every configuration key.
struct CommandArgs {
  boost::program_options::variables_map own;
  ParsedArgs config;
};
CommandArgs parse_command_args(const std::string& command, const std::string& usage,
                               const boost::program_options::options_description& own, const Args& args);

/// Whether --help was asked (parse_own_options, parse_command_args, parse_config); rank 0
/// has then printed the help text, and the command returns 0 without doing anything else.
bool answer_help(const Runtime& rt, const OwnOptions& options);
bool answer_help(const Runtime& rt, const ParsedArgs& parsed);

/// \brief The frame of a command whose work is serial (prepare, tokenize, convert): with
/// --help, rank 0 prints the help (answer_help); else `work` runs on rank 0 while the other
/// ranks wait, and a UserError it throws is thrown on every rank alike (agree_on_errors).
/// Returns the exit status `work` returned on rank 0, 0 on the others.
int run_on_rank0(Runtime& rt, const OwnOptions& options, const std::function<int()>& work);

/// Configures logging from output.log_level / output.log_all_ranks and the watchdog timeout.
void configure_run_logging(const Runtime& rt, const Config& cfg);

}  // namespace meshtrain::app
