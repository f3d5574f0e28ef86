#include "app/cli.hpp"

#include <hdf5.h>

#include <boost/version.hpp>
#include <cstdio>
#include <functional>
#include <map>

#include "app/commands.hpp"
#include "build_config.hpp"
#include "comm/collectives.hpp"
#include "core/error.hpp"
#include "core/fault.hpp"
#include "core/kokkos_compat.hpp"
#include "core/memory.hpp"
#include "kernels/attention.hpp"
#include "linalg/gemm.hpp"

namespace meshtrain::app {
namespace {

#ifdef H5_HAVE_PARALLEL
constexpr bool H5_HAVE_PARALLEL_FLAG = true;
#else
constexpr bool H5_HAVE_PARALLEL_FLAG = false;
#endif

/// How long a rank that raised a UserError waits for the others to raise it too. Ranks that
/// reach the same decision at the same point of the command arrive apart by no more than the
/// skew of the work since their last collective (reading a file, a node slower than another):
/// seconds at most. A rank that has not arrived by then is not coming -- it is waiting in a
/// collective for this one (it parsed other arguments, found another file) -- and the job is
/// ended instead of hanging until parallel.collective_timeout, if that is armed at all yet.
constexpr double kUserErrorSkewSeconds = 30.0;

struct Command {
  std::function<int(Runtime&, const Args&)> run;
  const char* summary;
};

const std::map<std::string, Command>& commands() {
  static const std::map<std::string, Command> table = {
      {"train", {command_train, "train or fine-tune a model: meshtrain train CONFIG.ini [--section.key=value ...]"}},
      {"plan", {command_plan, "print the mesh, per-rank memory of every strategy, and the predicted step time"}},
      {"prepare", {command_prepare, "turn text files into a token dataset: --input PATH... --output DIR"}},
      {"convert", {command_convert, "checkpoint -> Hugging Face safetensors: --input PATH --output DIR (import: checkpoint.init_from)"}},
      {"generate", {command_generate, "sample text from a checkpoint"}},
      {"eval", {command_eval, "validation loss and perplexity of a checkpoint on a dataset"}},
      {"tokenize", {command_tokenize, "token ids of text files under a tokenizer: --tokenizer SPEC FILE..."}},
      {"bench", {command_bench, "benchmarks: bench comm | bench gemm | bench memory | bench io"}},
  };
  return table;
}

std::string usage() {
  std::string s = "usage: meshtrain <command> [args]   (launch with mpirun/srun for several ranks)\n\ncommands:\n";
  for (const auto& [name, c] : commands()) s += strprintf("  %-9s %s\n", name.c_str(), c.summary);
  s += "\n  meshtrain --version     versions of meshtrain and its libraries\n"
       "  meshtrain <command> --help   every option of a command with its default\n";
  return s;
}

}  // namespace

std::string version_text() {
  std::string s = strprintf("meshtrain %s (%s, %s)\n", MESHTRAIN_VERSION, MESHTRAIN_GIT_DESCRIBE,
                            MESHTRAIN_BUILD_TYPE);
  s += strprintf("  compiler: %s\n", MESHTRAIN_CXX_COMPILER);
  s += strprintf("  Kokkos:   %s, default execution space %s\n", kokkos_version_string().c_str(),
                 kokkos_backend_name().c_str());
  s += strprintf("  MPI:      %s\n", mpi_library_version().c_str());
  unsigned h5_major = 0, h5_minor = 0, h5_release = 0;
  H5get_libversion(&h5_major, &h5_minor, &h5_release);
  s += strprintf("  HDF5:     %u.%u.%u%s\n", h5_major, h5_minor, h5_release, H5_HAVE_PARALLEL_FLAG ? " (parallel)" : "");
  s += strprintf("  Boost:    %d.%d.%d (program_options)\n", BOOST_VERSION / 100000, BOOST_VERSION / 100 % 1000,
                 BOOST_VERSION % 100);
  s += strprintf("  GEMM:     %s\n", linalg::gemm_backend_name().c_str());
  s += strprintf("  CUDA:     %s\n", linalg::cuda_description().c_str());
  const std::string fused = kernels::fused_attention_version();
  s += strprintf("  attention: %s\n", fused.empty() ? "Kokkos blocked (this build has no fused path)"
                                                     : (fused + " flash (gpu.attention=cudnn), Kokkos blocked").c_str());
  return s;
}

int run_cli(Runtime& rt, int argc, char** argv) {
  const bool root = rt.topology().world_rank == 0;
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd.empty() || cmd == "--help" || cmd == "-h" || cmd == "help") {
    if (root) std::fputs(usage().c_str(), stdout);
    // Without a command it is a user error like any other: status 2 and one error line.
    if (root && cmd.empty()) std::fputs("meshtrain: error: no command given; choose one of the commands above\n", stderr);
    return cmd.empty() ? kExitUserError : 0;
  }
  if (cmd == "--version" || cmd == "version") {
    if (root) std::fputs(version_text().c_str(), stdout);
    return 0;
  }
  const auto it = commands().find(cmd);
  try {
    if (it == commands().end()) {
      std::string best;
      std::size_t best_d = 1000;
      for (const auto& [name, c] : commands())
        if (edit_distance(cmd, name) < best_d) best_d = edit_distance(cmd, name), best = name;
      throw UserError(strprintf("unknown command '%s'%s; run `meshtrain --help` for the list",
                                cmd.c_str(), best_d <= 3 ? (" (did you mean '" + best + "'?)").c_str() : ""));
    }
    // Deterministic fault injection for tests (core/fault.hpp): read once, here.
    fault::configure_from_environment();
    if (root && !fault::armed_spec().empty())
      std::fprintf(stderr, "meshtrain %s: warning: fault injection armed: MESHTRAIN_FAULT=%s\n", cmd.c_str(),
                   fault::armed_spec().c_str());
    Args args(argv + 2, argv + argc);
    return it->second.run(rt, args);
  } catch (const UserError& e) {
    // The UserError contract: every rank reaches the same decision, so rank 0 prints the one
    // message and every rank exits cleanly. A rank started differently from the others (its
    // own arguments in an MPMD line, a file or an environment variable of its node) breaks
    // it: the others go on into a collective that this rank never joins and wait for it.
    // The barrier says which: past the grace the job is ended from here, this rank's error
    // in its one line, with the error's status.
    if (rt.topology().world_size > 1 && !sleeping_barrier_within(rt.error_agreement(), kUserErrorSkewSeconds)) {
      std::fprintf(stderr,
                   "meshtrain %s: error: rank %d (host %s): %s -- the other ranks did not stop with it within %.0f s "
                   "(their arguments, files or environment likely differ from this rank's); ending the job\n",
                   cmd.c_str(), rt.topology().world_rank, host_name().c_str(), e.what(), kUserErrorSkewSeconds);
      abort_job_silently(e.exit_status());
    }
    if (root) std::fprintf(stderr, "meshtrain %s: error: %s\n", cmd.c_str(), e.what());
    std::fflush(stderr);
    return e.exit_status();  // 2, or 74 for an I/O error (IoError)
  } catch (const OutOfDeviceMemory& e) {
    // One rank's allocation failed (the others wait in a collective): every rank ends here.
    abort_job(strprintf("`meshtrain %s`: %s", cmd.c_str(), e.what()));
  } catch (const std::exception& e) {
    abort_job(strprintf("unexpected error in `meshtrain %s`: %s", cmd.c_str(), e.what()));
  }
}

}  // namespace meshtrain::app
