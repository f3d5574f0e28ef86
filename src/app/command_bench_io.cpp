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
// file-system ceiling; the report says how near. Saves go to a private temporary directory
// under checkpoint.dir (removed afterwards), never next to the run's checkpoints.
#include <fcntl.h>
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
#include "checkpoint/checkpoint.hpp"
#include "train/checkpoint_meta.hpp"
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

template <class T>
int run_bench_io(const Runtime& rt, const plan::RunSetup& setup, const IoOptions& o) {
  const bool root = rt.topology().world_rank == 0;
  train::Session<T> session(rt, setup);
  const MpiComm& world = session.mesh().world().mpi();
  parallel::FsdpEngine<T>& eng = session.engine();
  eng.init_parameters(setup.spec.train.seed);

  // A private directory: rank 0 names it, every rank uses it. Rank 0 removes it -- and the
  // directories it created for it (checkpoint.dir, output.dir) when they are left empty --
  // however the benchmark ends.
  std::string dir = setup.spec.checkpoint.dir + "/.bench-io-" + std::to_string(::getpid());
  dir = broadcast_string(world, dir);
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
    std::error_code ec;
    fs::create_directories(dir, ec);
    MESHTRAIN_REQUIRE(!ec, "cannot create %s (under checkpoint.dir): %s", dir.c_str(), ec.message().c_str());
  });

  std::uint64_t params = 0;
  for (const model::ParamSpec& p : eng.specs()) params += static_cast<std::uint64_t>(p.numel());
  if (root)
    std::printf("# meshtrain bench io: checkpoint save of a %s model, %llu parameters (weights + 2 AdamW moments, "
                "fp32), on mesh %s, %d rank(s) on %d node(s), in %s\n",
                choice_name(setup.spec.dims.family), static_cast<unsigned long long>(params), setup.mesh_shape.str().c_str(),
                world.size(), rt.topology().num_nodes, dir.c_str());
  std::vector<checkpoint::IoStats> saves;
  for (int i = 0; i < o.iters; ++i) {
    checkpoint::TrainState st;
    st.step = i + 1;
    st.seed = setup.spec.train.seed;
    st.rank_first_windows = train::next_step_windows(0, setup);
    saves.push_back(checkpoint::save(eng, session.mesh(), train::checkpoint_meta(setup), st, dir));
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
    std::printf(" %-12s %14llu %10.3f %10.3f   (best of %d; data phase %.3f s; checksums %.4f s)\n", "save",
                static_cast<unsigned long long>(best->bytes), best->seconds, best->gbps(), o.iters, best->data_seconds,
                best->checksum_seconds);
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
        saves_json.push_back(j);
      }
      formats::Json j;
      j["benchmark"] = "io";
      j["ranks"] = world.size();
      j["nodes"] = rt.topology().num_nodes;
      j["mesh"] = setup.mesh_shape.str();
      j["save_bytes"] = best->bytes;
      j["save_seconds"] = best->seconds;
      j["save_gbps"] = best->gbps();
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
      std::FILE* f = std::fopen(o.json.c_str(), "w");
      if (f) {
        std::fputs((formats::json_pretty(j) + "\n").c_str(), f);
        std::fclose(f);
      } else {
        log::warn("cannot write %s: %s", o.json.c_str(), std::strerror(errno));
      }
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
      "Times the checkpoint save of the config's model on this job's mesh (weights and AdamW moments, fp32),\n"
      "into a temporary directory under checkpoint.dir that is removed afterwards, next to the file system's\n"
      "ceiling (each rank writes and fsyncs its own bytes) and the network's (each rank sends them to the next\n"
      "node), and says which bounds the save. No training step runs.\n";
  CommandArgs ca = parse_command_args("bench io", usage, own, args);
  if (answer_help(rt, ca.config)) return 0;
  MESHTRAIN_REQUIRE(o.iters >= 1, "--iters must be at least 1, got %d", o.iters);
  const Config& cfg = ca.config.config;
  configure_run_logging(rt, cfg);
  const plan::RunSetup setup = resolve_run(cfg, rt);  // as train resolves it (collective: auto may measure)
  return setup.spec.train.bf16() ? run_bench_io<bf16>(rt, setup, o) : run_bench_io<float>(rt, setup, o);
}

}  // namespace meshtrain::app
