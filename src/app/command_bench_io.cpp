// `meshtrain bench io`: the checkpoint save path alone, on the job's mesh and model, next
// to the two ceilings it could be bound by:
//   file system  every rank writes the bytes it owns (the same count a save writes from
//                it) into one shared file at disjoint offsets, then fsyncs: what the file
//                system sustains for this job's writers, durably;
//   network      every rank sends the same bytes to a rank on the next node and receives
//                from the previous one at once (one node: no network, not measured): what
//                moving the checkpoint between nodes would cost, as a collective-buffering
//                write or a gather to one writer does.
// A save writes each rank's own pieces (independent MPI-IO), so it should run near the
// file-system ceiling; the report says how near. The save timed is the one the config's run
// makes: synchronous, or with checkpoint.async the asynchronous one (what training waits
// for, and the whole save to its commit). Saves go to a private temporary directory under
// checkpoint.dir, never next to the run's checkpoints, removed afterwards -- also on
// SIGTERM/SIGINT/SIGHUP/SIGPIPE, and (what no handler sees: SIGKILL, the watchdog's exit)
// by the next bench io on the same host.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include "command_options.hpp"
#include "app/run_spec_resolve.hpp"
#include "app/source_model_config.hpp"
#include "checkpoint/async_save.hpp"
#include "checkpoint/checkpoint.hpp"
#include "core/signal_cleanup.hpp"
#include "train/checkpoint_meta.hpp"
#include "train/preflight.hpp"
#include "train/same_run.hpp"
#include "comm/agree.hpp"
#include "comm/collectives.hpp"
#include "core/check.hpp"
#include "core/error.hpp"
#include "core/file_io.hpp"
#include "core/format.hpp"
#include "formats/json.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "train/session.hpp"

namespace meshtrain::app {
namespace {

namespace po = boost::program_options;
namespace fs = std::filesystem;

struct IoOptions {
  int iters = 3;
  std::string json;
};

struct Ceiling {
  std::uint64_t bytes = 0;  ///< all ranks together
  double seconds = 0;       ///< slowest rank
  double gbps() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0; }
};

/// Tensor bytes this rank owns and a save writes from it (weights and two moments, fp32;
/// padding of the flat units included, so a little more than the save's count).
template <class T>
std::uint64_t owned_bytes(const parallel::FsdpEngine<T>& eng) {
  std::uint64_t n = 0;
  for (int u = 0; u < eng.num_units(); ++u) n += static_cast<std::uint64_t>(eng.owned_numel(u));
  return 3 * n * sizeof(float);
}

/// Every rank writes `mine` bytes at its offset of one shared file, then fsyncs it.
Ceiling file_system_ceiling(const MpiComm& world, const std::string& path, std::uint64_t mine) {
  const std::uint64_t offset = exclusive_prefix_sum(world, mine);
  std::vector<char> buf(std::min<std::uint64_t>(mine, 8u << 20), 1);
  agree_on_errors(world, [&] {
    if (world.rank() != 0) return;
    const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    MESHTRAIN_REQUIRE(fd >= 0, "cannot create %s: %s", path.c_str(), std::strerror(errno));
    ::close(fd);
  });
  barrier(world);
  const double t0 = now_seconds();
  std::string error;
  if (mine > 0) {
    const int fd = ::open(path.c_str(), O_WRONLY);
    if (fd < 0) error = std::strerror(errno);
    for (std::uint64_t done = 0; fd >= 0 && error.empty() && done < mine;) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), mine - done));
      if (const int e = file_io::pwrite_all(fd, buf.data(), n, offset + done)) error = std::strerror(e);
      done += n;
    }
    if (fd >= 0 && error.empty() && ::fsync(fd) != 0) error = std::strerror(errno);
    if (fd >= 0) ::close(fd);
  }
  const double mine_s = now_seconds() - t0;
  agree_on_errors(world, [&] { MESHTRAIN_REQUIRE(error.empty(), "writing %s failed: %s", path.c_str(), error.c_str()); });
  return {all_reduce_value(world, mine, ReduceOp::Sum), all_reduce_value(world, mine_s, ReduceOp::Max)};
}

/// Every rank sends `mine` bytes to the rank `local_size` places on (the same slot of the
/// next node when ranks fill nodes in order) and receives from the one as far back.
/// Nothing when all ranks share one node.
std::optional<Ceiling> network_ceiling(const MpiComm& world, const Topology& topo, std::uint64_t mine) {
  if (topo.num_nodes < 2) return std::nullopt;
  const int n = world.size(), r = world.rank();
  const int to = (r + topo.local_size) % n, from = (r - topo.local_size % n + n) % n;
  const int cross = topo.host_of_rank[to] != topo.host_of_rank[r] && topo.host_of_rank[from] != topo.host_of_rank[r];
  if (!all_reduce_value(world, cross, ReduceOp::Min)) return std::nullopt;  // uneven nodes: no clean pairing
  std::uint64_t theirs = 0;
  exchange_bytes(world, to, &mine, sizeof mine, from, &theirs, sizeof theirs, 0);
  constexpr std::uint64_t kChunk = 64u << 20;  // MPI counts are int
  std::vector<char> out(std::min(mine, kChunk), 2), in(std::min(theirs, kChunk));
  // Every rank runs the same number of exchanges (a rank that owns nothing still receives,
  // and its partner still waits for its empty send): the most chunks any rank sends.
  const std::uint64_t max_rounds = all_reduce_value<std::uint64_t>(world, (mine + kChunk - 1) / kChunk, ReduceOp::Max);
  barrier(world);
  const double t0 = now_seconds();
  for (std::uint64_t i = 0, sent = 0, got = 0; i < max_rounds; ++i) {
    const std::uint64_t s = std::min(kChunk, mine - sent), g = std::min(kChunk, theirs - got);
    exchange_bytes(world, to, out.data(), static_cast<std::int64_t>(s), from, in.data(), static_cast<std::int64_t>(g), 1);
    sent += static_cast<std::uint64_t>(s);
    got += static_cast<std::uint64_t>(g);
  }
  const double mine_s = now_seconds() - t0;
  return Ceiling{all_reduce_value(world, mine, ReduceOp::Sum), all_reduce_value(world, mine_s, ReduceOp::Max)};
}

/// The private directory of a bench io: "CHECKPOINT_DIR/.bench-io-HOST-PID" of rank 0,
/// which creates and removes it (older versions named it ".bench-io-PID").
constexpr char kPrivatePrefix[] = ".bench-io-";

/// Rank 0, before it creates its own: the private directories that earlier bench io runs
/// left in `ckpt_dir` when something no handler sees ended them (SIGKILL, the OOM killer,
/// the collective watchdog's exit, a lost node). One whose process is gone from this host
/// is removed, with a line saying so; one of a process still running here (a bench io at
/// this moment) is left alone; one of another host, or of an older version (no host in
/// its name), is left with a warning naming it, since only its own host can tell.
void remove_stale_private_dirs(const std::string& ckpt_dir, const std::string& this_host) {
  std::error_code ec;
  for (fs::directory_iterator it(ckpt_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(kPrivatePrefix, 0) != 0 || !it->is_directory(ec)) continue;
    const std::string rest = name.substr(sizeof kPrivatePrefix - 1);
    const std::size_t dash = rest.rfind('-');
    const std::string host = dash == std::string::npos ? "" : rest.substr(0, dash);
    const std::string pid_text = dash == std::string::npos ? rest : rest.substr(dash + 1);
    const bool numeric = !pid_text.empty() && pid_text.size() < 10 &&
                         pid_text.find_first_not_of("0123456789") == std::string::npos;
    const std::string path = it->path().string();
    if (!numeric || host.empty() || host != this_host) {
      log::warn("%s was left by a bench io on %s, interrupted or still running there: remove it when no bench io "
                "runs", path.c_str(), host.empty() ? "an unknown host (an older meshtrain)" : ("host " + host).c_str());
      continue;
    }
    const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // a bench io running now (or not ours to probe)
    std::error_code rm;
    fs::remove_all(path, rm);
    if (rm)
      log::warn("cannot remove %s, left by an interrupted bench io (process %d is gone): %s", path.c_str(),
                static_cast<int>(pid), rm.message().c_str());
    else
      log::info("removed %s, left by an interrupted bench io (process %d on this host is gone)", path.c_str(),
                static_cast<int>(pid));
  }
}

template <class T>
int run_bench_io(const Runtime& rt, const plan::RunSetup& setup, const IoOptions& o) {
  const bool root = rt.topology().world_rank == 0;
  train::Session<T> session(rt, setup);
  const MpiComm& world = session.mesh().world().mpi();
  parallel::FsdpEngine<T>& eng = session.engine();
  eng.init_parameters(setup.spec.train.seed);

  // A private directory: rank 0 names it, every rank uses it. Rank 0 removes it -- and the
  // directories it created for it (checkpoint.dir, output.dir) when they are left empty --
  // however the benchmark ends: its destructor on a return or an error, `on_signal` on a
  // signal that ends the process, the next bench io's sweep after anything else.
  const std::string& host = rt.topology().host_of_rank.at(0);
  std::string dir = setup.spec.checkpoint.dir + "/" + kPrivatePrefix + host + "-" + std::to_string(::getpid());
  dir = broadcast_string(world, dir);
  std::optional<SignalCleanup> on_signal;
  struct Cleanup {
    std::string dir;
    std::vector<std::string> created;  ///< deepest first: file_io::missing_directories
    ~Cleanup() {
      std::error_code ec;
      if (!dir.empty()) fs::remove_all(dir, ec);
      for (const std::string& d : created) fs::remove(d, ec);  // only an empty one
    }
  } cleanup;
  agree_on_errors(world, [&] {
    if (!root) return;
    cleanup.created = file_io::missing_directories(dir);
    cleanup.dir = dir;
    // Registered before the directory exists: a signal from here on leaves nothing. It holds
    // files only (the saves, `latest`, ceiling.bin), what add_directory_of_files removes.
    on_signal.emplace();
    on_signal->add_directory_of_files(dir);
    for (const std::string& d : cleanup.created) on_signal->add_empty_directory(d);
    remove_stale_private_dirs(setup.spec.checkpoint.dir, host);
    std::error_code ec;
    fs::create_directories(dir, ec);
    MESHTRAIN_REQUIRE(!ec, "cannot create %s (under checkpoint.dir): %s", dir.c_str(), ec.message().c_str());
  });

  std::uint64_t params = 0;
  for (const model::ParamSpec& p : eng.specs()) params += static_cast<std::uint64_t>(p.numel());
  const bool async = setup.spec.checkpoint.async;
  if (root) {
    std::printf("# meshtrain bench io: checkpoint save of a %s model, %llu parameters (weights + 2 AdamW moments, "
                "fp32), on mesh %s, %d rank(s) on %d node(s), in %s\n",
                choice_name(setup.spec.dims.family), static_cast<unsigned long long>(params), setup.mesh_shape.str().c_str(),
                world.size(), rt.topology().num_nodes, dir.c_str());
    std::printf("# save path: %s\n",
                async ? "asynchronous (checkpoint.async=true): each save is started and waited for at once; 'held' is "
                        "what training waits for, the save's seconds run from its start to its commit"
                      : "synchronous (checkpoint.async=false): training waits for the whole save");
  }
  // As the run saves (checkpoint_meta), keeping one checkpoint: the directory never holds
  // more than one save and the ceiling's file, and each later save replaces the one before
  // as a run's saves do once it keeps checkpoint.keep of them.
  checkpoint::CheckpointMeta meta = train::checkpoint_meta(setup);
  meta.keep = 1;
  std::vector<checkpoint::IoStats> saves;
  for (int i = 0; i < o.iters; ++i) {
    checkpoint::TrainState st;
    st.step = i + 1;
    st.seed = setup.spec.train.seed;
    st.rank_first_windows = train::next_step_windows(0, setup);
    if (async) {
      checkpoint::AsyncSave save;
      save.start(eng, session.mesh(), meta, st, dir);
      saves.push_back(save.wait(world));
    } else {
      saves.push_back(checkpoint::save(eng, session.mesh(), meta, st, dir));
    }
    if (root) std::printf("save %d: %s\n", i + 1, checkpoint::describe_save(saves.back()).c_str());
    std::fflush(stdout);
  }
  const auto best = std::min_element(saves.begin(), saves.end(), [](const auto& a, const auto& b) {
    return a.seconds < b.seconds;
  });
  const std::uint64_t mine = owned_bytes(eng);
  const Ceiling fsc = file_system_ceiling(world, dir + "/ceiling.bin", mine);
  const std::optional<Ceiling> net = network_ceiling(world, rt.topology(), mine);

  if (root) {
    std::printf("#%-12s %14s %10s %10s\n", "what", "bytes", "seconds", "GB/s");
    std::printf(" %-12s %14llu %10.3f %10.3f   (best of %d, %s; data phase %.3f s; checksums %.4f s)\n", "save",
                static_cast<unsigned long long>(best->bytes), best->seconds, best->gbps(), o.iters,
                async ? "asynchronous, start to commit" : "synchronous", best->data_seconds, best->checksum_seconds);
    if (async)
      std::printf(" %-12s %14s %10.3f %10s   (of that save: what training waits for -- staging, layout, commit)\n",
                  "save_held", "-", best->held_seconds, "-");
    std::printf(" %-12s %14llu %10.3f %10.3f   (each rank its owned bytes, pwrite + fsync)\n", "file_system",
                static_cast<unsigned long long>(fsc.bytes), fsc.seconds, fsc.gbps());
    if (net)
      std::printf(" %-12s %14llu %10.3f %10.3f   (each rank its owned bytes to the next node)\n", "network",
                  static_cast<unsigned long long>(net->bytes), net->seconds, net->gbps());
    else
      std::printf(" %-12s %14s %10s %10s   (one node: nothing crosses a network)\n", "network", "-", "-", "-");
    const bool fs_bound = !net || fsc.gbps() <= net->gbps();
    const double lower = fs_bound ? fsc.gbps() : net->gbps();
    auto pct = [&](double ceiling) { return ceiling > 0 ? 100.0 * best->gbps() / ceiling : 0.0; };
    if (net)
      std::printf("bound: %s (file system %.3f GB/s, network %.3f GB/s); the save reaches %.0f%% of the file system's "
                  "and %.0f%% of the lower, moving no tensor bytes over the network (each rank writes its own pieces)\n",
                  fs_bound ? "file system" : "network", fsc.gbps(), net->gbps(), pct(fsc.gbps()), pct(lower));
    else
      std::printf("bound: file system (%.3f GB/s; one node, no network); the save reaches %.0f%% of it\n", fsc.gbps(),
                  pct(fsc.gbps()));
    if (!o.json.empty()) {
      formats::Json saves_json = formats::Json::array();
      for (const auto& s : saves) {
        formats::Json j;
        j["seconds"] = s.seconds;
        j["data_seconds"] = s.data_seconds;
        j["checksum_seconds"] = s.checksum_seconds;
        j["bytes"] = s.bytes;
        j["writer_ranks"] = s.writer_ranks;
        j["writer_nodes"] = s.writer_nodes;
        if (async) j["held_seconds"] = s.held_seconds;
        saves_json.push_back(j);
      }
      formats::Json j;
      j["benchmark"] = "io";
      j["ranks"] = world.size();
      j["nodes"] = rt.topology().num_nodes;
      j["mesh"] = setup.mesh_shape.str();
      j["save_path"] = async ? "async" : "sync";
      j["save_bytes"] = best->bytes;
      j["save_seconds"] = best->seconds;
      j["save_gbps"] = best->gbps();
      if (async) j["save_held_seconds"] = best->held_seconds;
      j["file_system_bytes"] = fsc.bytes;
      j["file_system_seconds"] = fsc.seconds;
      j["file_system_gbps"] = fsc.gbps();
      j["bound"] = fs_bound ? "file_system" : "network";
      j["saves"] = saves_json;
      if (net) {
        j["network_bytes"] = net->bytes;
        j["network_seconds"] = net->seconds;
        j["network_gbps"] = net->gbps();
      }
      file_io::write_file(o.json, formats::json_pretty(j) + "\n");
    }
    std::fflush(stdout);
  }
  barrier(world);
  return 0;
}

}  // namespace

int command_bench_io(Runtime& rt, const Args& args) {
  IoOptions o;
  po::options_description own("Options of bench io");
  own.add_options()
      ("iters", po::value<int>(&o.iters)->default_value(o.iters), "saves to time (the best is reported)")
      ("json", po::value<std::string>(&o.json), "also write the results as JSON (rank 0)");
  const std::string usage =
      "usage: meshtrain bench io [CONFIG.ini] [--iters 3] [--json PATH] [--section.key=value ...]\n\n"
      "Times the checkpoint save of the config's model (checkpoint.init_from's with one) on this job's mesh\n"
      "(weights and AdamW moments, fp32) as the run saves it (checkpoint.async: the asynchronous save), into a\n"
      "temporary directory under checkpoint.dir that is removed afterwards, next to the file system's ceiling\n"
      "(each rank writes and fsyncs its own bytes) and the network's (each rank sends them to the next node),\n"
      "and says which bounds the save. No training step runs. A run interrupted by a signal removes its directory;\n"
      "one killed outright (SIGKILL) leaves it, and the next bench io on that host removes it.\n";
  // A part of an MPMD line whose arguments do not parse must not leave the others waiting
  // in the comparison below: every rank ends with the error of the lowest failing rank.
  CommandArgs ca;
  agree_on_errors(rt.world(), [&] {
    ca = parse_command_args("bench io", usage, own, args);
    if (ca.config.help) return;
    MESHTRAIN_REQUIRE(o.iters >= 1, "--iters must be at least 1, got %d", o.iters);
    // The model `train` would build: a fine-tune's pretrained weights bring their shape.
    Config& cfg = ca.config.config;
    if (!cfg.checkpoint.init_from.empty()) adopt_source_model(cfg, cfg.checkpoint.init_from, "checkpoint.init_from");
  });
  if (answer_help(rt, ca.config)) return 0;
  Config& cfg = ca.config.config;
  configure_run_logging(rt, cfg);
  // Ranks started with other settings (an MPMD launch line) would save other models or
  // counts: a hang in the save's collectives until the watchdog, or a wrong result.
  train::RunSettings settings = train::config_settings(config_to_ini(cfg));
  settings.emplace_back("--iters", std::to_string(o.iters));
  train::require_same_settings_on_every_rank(rt.world(), rt.topology().host_of_rank, settings);
  // The JSON is written at the end: a path that cannot be written is found before any save.
  agree_on_errors(rt.world(), [&] {
    if (rt.world().rank() == 0 && !o.json.empty()) train::require_writable_file("--json", o.json);
  });
  const plan::RunSetup setup = resolve_run(cfg, rt);  // as train resolves it (collective: auto may measure)
  return setup.spec.train.bf16() ? run_bench_io<bf16>(rt, setup, o) : run_bench_io<float>(rt, setup, o);
}

}  // namespace meshtrain::app
