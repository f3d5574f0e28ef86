#include "checkpoint_session.hpp"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "meshtrain/checkpoint/checkpoint.hpp"
#include "meshtrain/checkpoint/gguf_file.hpp"
#include "meshtrain/comm/agree.hpp"
#include "meshtrain/comm/mpi_communicator.hpp"
#include "meshtrain/core/check.hpp"
#include "meshtrain/core/error.hpp"
#include "meshtrain/core/log.hpp"

namespace meshtrain::app {

namespace po = boost::program_options;
namespace fs = std::filesystem;

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
    throw UserError(strprintf("%s; run `meshtrain %s --help` for the options", e.what(), command.c_str()));
  }
  out.config = parse_config(command, rest);
  if (out.config.help) {
    std::ostringstream os;
    // parse_config's text: its usage line, then every configuration key with its default.
    const std::string& keys = out.config.help_text;
    os << usage << "\n" << own << keys.substr(std::min(keys.size(), keys.find('\n') + 1));
    out.config.help_text = os.str();
  }
  return out;
}

void configure_run_logging(const Runtime& rt, const Config& cfg) {
  log::configure(rt.topology().world_rank, cfg.output.log_all_ranks,
                 cfg.output.log_level == "debug" ? log::Level::Debug
                 : cfg.output.log_level == "warn" ? log::Level::Warn
                                                  : log::Level::Info);
  set_collective_timeout(cfg.parallel.collective_timeout);
}

namespace {

/// A Hugging Face directory, a .safetensors file or a GGUF file (not a meshtrain checkpoint).
bool is_pretrained(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    return fs::exists(path + "/model.safetensors", ec) || fs::exists(path + "/model.safetensors.index.json", ec);
  if (fs::is_regular_file(path, ec) && checkpoint::looks_like_gguf(path)) return true;
  return path.size() > 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0;
}

}  // namespace

template <class T>
LoadedWeights load_checkpoint_weights(train::Session<T>& session, const train::RunSetup& setup,
                                      const std::string& option) {
  const MpiComm& world = session.mesh().world();
  const std::string dir = checkpoint::checkpoint_dir(setup.config);
  // Rank 0 resolves the path (file-system lookups); every rank gets its answer or error.
  std::string resolved;
  int safetensors = 0;
  agree_on_errors(world, [&] {
    if (world.rank() != 0) return;
    std::error_code ec;
    if (option.empty()) {
      resolved = checkpoint::resolve_resume(dir, "auto");
      MESHTRAIN_REQUIRE(!resolved.empty(),
                        "no checkpoint found in %s: pass --checkpoint PATH (a step_*.h5 file, a checkpoint "
                        "directory or a Hugging Face model directory), or set output.dir (or checkpoint.dir) to "
                        "the training run's",
                        dir.c_str());
      return;
    }
    MESHTRAIN_REQUIRE(fs::exists(option, ec), "--checkpoint %s: no such file or directory", option.c_str());
    if (is_pretrained(option)) {
      safetensors = 1;
      resolved = option;
      return;
    }
    if (fs::is_directory(option, ec)) {
      resolved = checkpoint::resolve_resume(option, "auto");
      MESHTRAIN_REQUIRE(!resolved.empty(),
                        "--checkpoint %s: the directory holds no complete checkpoint (step_*.h5) and no "
                        "model.safetensors",
                        option.c_str());
      return;
    }
    resolved = option;
  });
  MPI_CHECK(MPI_Bcast(&safetensors, 1, MPI_INT, 0, world.get()));
  long long n = static_cast<long long>(resolved.size());
  MPI_CHECK(MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, world.get()));
  resolved.resize(static_cast<std::size_t>(n));
  MPI_CHECK(MPI_Bcast(resolved.data(), static_cast<int>(n), MPI_CHAR, 0, world.get()));

  parallel::FsdpEngine<T>& eng = session.engine();
  // No init_parameters: a load writes every value (pretrained sources initialise only
  // what they lack, e.g. LoRA adapters), so no time goes into random weights.
  checkpoint::IoStats io;
  LoadedWeights out;
  if (safetensors) {
    checkpoint::load_weights(eng, session.mesh(), setup.dims, resolved, setup.config.train.seed, &io);
    out.path = io.path;
  } else {
    // The full loader validates the stored model description against the config (naming
    // every differing key) before it reads anything; the moments it also reads are unused.
    const checkpoint::TrainState st = checkpoint::load(eng, session.mesh(), setup, resolved, &io);
    out.path = resolved;
    out.step = st.step;
  }
  out.load_seconds = io.seconds;
  return out;
}

template LoadedWeights load_checkpoint_weights<float>(train::Session<float>&, const train::RunSetup&,
                                                      const std::string&);
template LoadedWeights load_checkpoint_weights<bf16>(train::Session<bf16>&, const train::RunSetup&,
                                                     const std::string&);

}  // namespace meshtrain::app
