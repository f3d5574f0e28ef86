#include "command_options.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "comm/agree.hpp"
#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "runtime/runtime.hpp"

namespace meshtrain::app {

namespace po = boost::program_options;

namespace {

UserError options_error(const std::string& command, const po::error& e) {
  return UserError(strprintf("%s; run `meshtrain %s --help` for the options", e.what(), command.c_str()));
}

}  // namespace

OwnOptions parse_own_options(const std::string& command, const std::string& usage, const po::options_description& desc,
                             const Args& args, const OptionChecks& checks,
                             const po::positional_options_description* positional, const std::string& after) {
  OwnOptions out;
  try {
    po::command_line_parser parser(args);
    parser.options(desc);
    if (positional) parser.positional(*positional);
    po::store(parser.run(), out.vm);
    po::notify(out.vm);
  } catch (const po::error& e) {
    throw options_error(command, e);
  }
  if (out.vm.count("help")) {
    std::ostringstream os;
    os << usage << desc << after;
    out.help = true;
    out.help_text = os.str();
  } else if (checks) {
    checks(out.vm);
  }
  return out;
}

CommandArgs parse_command_args(const std::string& command, const std::string& usage,
                               const po::options_description& own, const Args& args) {
  CommandArgs out;
  Args rest;
  try {
    const po::parsed_options parsed = po::command_line_parser(args).options(own).allow_unregistered().run();
    po::store(parsed, out.own);
    po::notify(out.own);
    rest = po::collect_unrecognized(parsed.options, po::include_positional);
  } catch (const po::error& e) {
    throw options_error(command, e);
  }
  std::vector<std::string> own_names;
  for (const auto& opt : own.options()) own_names.push_back(opt->long_name());
  out.config = parse_config(command, rest, own_names);
  if (out.config.help) {
    std::ostringstream os;
    // parse_config's text: its usage line, then every configuration key with its default.
    const std::string& keys = out.config.help_text;
    os << usage << "\n" << own << keys.substr(std::min(keys.size(), keys.find('\n') + 1));
    out.config.help_text = os.str();
  }
  return out;
}

namespace {

bool print_help(const Runtime& rt, bool asked, const std::string& text) {
  if (asked && rt.topology().world_rank == 0) std::fputs(text.c_str(), stdout);
  return asked;
}

}  // namespace

bool answer_help(const Runtime& rt, const OwnOptions& options) {
  return print_help(rt, options.help, options.help_text);
}

bool answer_help(const Runtime& rt, const ParsedArgs& parsed) { return print_help(rt, parsed.help, parsed.help_text); }

int run_on_rank0(Runtime& rt, const OwnOptions& options, const std::function<int()>& work) {
  if (answer_help(rt, options)) return 0;
  const bool root = rt.topology().world_rank == 0;
  int status = 0;
  agree_on_errors(rt.world(), [&] {
    if (root) status = work();
  });
  return status;
}

void configure_run_logging(const Runtime& rt, const Config& cfg) {
  log::configure(rt.topology().world_rank, cfg.output.log_all_ranks,
                 cfg.output.log_level == LogLevel::Debug  ? log::Level::Debug
                 : cfg.output.log_level == LogLevel::Warn ? log::Level::Warn
                                                          : log::Level::Info);
  set_collective_timeout(cfg.parallel.collective_timeout);
  if (!cfg.deprecation_note.empty() && rt.topology().world_rank == 0) log::warn("%s", cfg.deprecation_note.c_str());
}

}  // namespace meshtrain::app
