// `meshtrain bench comm | gemm | memory`: the measured ceilings of this machine, run by
// every rank at once (as in training), reduced to min/avg/max across ranks on rank 0.
//
//   bench comm    collectives over one mesh group, a doubling size sweep, nccl-tests style:
//                 time, algbw, busbw (factor derived in doc/perf.md) and a count of wrong
//                 elements (the data is checked, not only timed); ends with the measured
//                 memory-copy bandwidth, the ceiling of a shared-memory transport.
//   bench gemm    GEMM throughput at given sizes (square N or MxNxK, op variants), fp32/bf16.
//   bench memory  STREAM-like copy bandwidth (read + write bytes counted) at given sizes.
// Before anything is measured: an option another benchmark reads is refused, the result
// files must be writable, and every rank must have been started with rank 0's arguments.
#include <boost/program_options.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "command_options.hpp"
#include "app/commands.hpp"
#include "comm/agree.hpp"
#include "comm/bench.hpp"
#include "comm/collectives.hpp"
#include "config/config.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/file_io.hpp"
#include "formats/json.hpp"
#include "core/memory.hpp"
#include "core/timer.hpp"
#include "kernels/elementwise.hpp"
#include "linalg/gemm.hpp"
#include "linalg/peak.hpp"
#include "parallel/device_mesh.hpp"
#include "runtime/mesh.hpp"
#include "train/preflight.hpp"
#include "train/same_run.hpp"

namespace meshtrain::app {
namespace {

namespace po = boost::program_options;

// ---- arguments -------------------------------------------------------------------------

struct BenchArgs {
  std::string what;                  ///< comm | gemm | memory
  std::vector<std::string> ops{"all"};
  std::string min_bytes = "1KiB", max_bytes = "64MiB";
  std::string group = "world";
  std::string dtype = "fp32";
  int warmup = 5, iters = 20;
  bool in_step = false;              ///< comm: a world barrier before every operation
  std::string sizes;                 ///< gemm: "1024,2048,1024x512x1536"; memory: "4MiB,64MiB"
  std::string transpose = "nn";      ///< gemm: nn | nt | tn (op(A), op(B))
  double seconds = 0.5;              ///< gemm/memory: time per size
  std::string csv, json;
  Config config;                     ///< --parallel.* keys (mesh, backend, collective_timeout)
  OwnOptions own;                    ///< --help

  /// What every rank must run alike (all but the files rank 0 alone writes), for
  /// train::require_same_settings_on_every_rank.
  train::RunSettings settings() const;
};

/// The longest --seconds per size: a typo (1e9) or inf would never end.
constexpr double kMaxSeconds = 3600;

/// Which benchmarks read each of the own options (--csv, --json and --help: all of them).
const std::map<std::string, std::vector<std::string>>& option_modes() {
  static const std::map<std::string, std::vector<std::string>> modes = {
      {"ops", {"comm"}},    {"min_bytes", {"comm"}},         {"max_bytes", {"comm"}}, {"group", {"comm"}},
      {"warmup", {"comm"}}, {"iters", {"comm"}},             {"in_step", {"comm"}},   {"dtype", {"comm", "gemm"}},
      {"sizes", {"gemm", "memory"}}, {"transpose", {"gemm"}}, {"seconds", {"gemm", "memory"}}};
  return modes;
}

/// The configuration keys each benchmark reads: comm its mesh and backend; all of them the
/// collective watchdog's timeout (their results are reduced over the ranks).
std::vector<std::string> config_keys_of(const std::string& what) {
  if (what == "comm")
    return {"parallel.tp", "parallel.dp_shard", "parallel.dp_replicate", "parallel.backend",
            "parallel.collective_timeout"};
  return {"parallel.collective_timeout"};
}

/// "`bench comm`" or "`bench comm` and `bench gemm`".
std::string mode_list(const std::vector<std::string>& modes) {
  std::string s;
  for (std::size_t i = 0; i < modes.size(); ++i)
    s += (i == 0 ? "" : i + 1 == modes.size() ? " and " : ", ") + ("`bench " + modes[i] + "`");
  return s;
}

/// "--a, --b and --c".
std::string option_list(const std::vector<std::string>& keys) {
  std::string s;
  for (std::size_t i = 0; i < keys.size(); ++i) s += (i == 0 ? "" : i + 1 == keys.size() ? " and " : ", ") + ("--" + keys[i]);
  return s;
}

train::RunSettings BenchArgs::settings() const {
  std::string ops_text;
  for (const std::string& op : ops) ops_text += (ops_text.empty() ? "" : ",") + op;
  train::RunSettings out = {{"benchmark", what},
                            {"--ops", ops_text},
                            {"--min_bytes", min_bytes},
                            {"--max_bytes", max_bytes},
                            {"--group", group},
                            {"--dtype", dtype},
                            {"--warmup", std::to_string(warmup)},
                            {"--iters", std::to_string(iters)},
                            {"--in_step", in_step ? "true" : "false"},
                            {"--sizes", sizes},
                            {"--transpose", transpose},
                            {"--seconds", strprintf("%.17g", seconds)}};
  for (auto& kv : train::config_settings(config_to_ini(config))) out.push_back(kv);
  return out;
}

const char* kUsage =
    "usage: meshtrain bench comm   [--ops all_gather,reduce_scatter,all_reduce,broadcast|all] [--min_bytes 1KiB]\n"
    "                              [--max_bytes 64MiB] [--group world|tp|dp_shard|dp_replicate|dp]\n"
    "                              [--parallel.tp N --parallel.dp_shard N --parallel.dp_replicate N]\n"
    "                              [--dtype fp32|bf16] [--warmup 5] [--iters 20] [--in_step] [--csv PATH] [--json PATH]\n"
    "       meshtrain bench gemm   [--sizes 256,512,1024,2048,MxNxK] [--transpose nn|nt|tn] [--dtype fp32|bf16]\n"
    "                              [--seconds 0.5] [--csv PATH] [--json PATH]\n"
    "       meshtrain bench memory [--sizes 1MiB,4MiB,16MiB,64MiB,256MiB] [--seconds 0.5] [--csv PATH] [--json PATH]\n"
    "       meshtrain bench io     [CONFIG.ini] [--iters 3] [--json PATH] [--section.key=value ...]  (checkpoint save;\n"
    "                              `meshtrain bench io --help`)\n"
    "Every rank runs the benchmark at the same time (launch with mpirun/srun); rank 0 prints min/avg/max "
    "across ranks. Bus-bandwidth factors and what the numbers mean: doc/perf.md.\n\n";

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

BenchArgs parse_bench_args(const Args& args) {
  BenchArgs a;
  MESHTRAIN_REQUIRE(!args.empty(), "`meshtrain bench` needs a benchmark: comm, gemm, memory or io (see --help)");
  if (args[0] == "--help" || args[0] == "-h") {  // before the benchmark's name: the usage alone
    a.own.help = true;
    a.own.help_text = kUsage;
    return a;
  }
  a.what = args[0];
  MESHTRAIN_REQUIRE(a.what == "comm" || a.what == "gemm" || a.what == "memory",
                    "unknown benchmark '%s'; use `meshtrain bench comm`, `bench gemm`, `bench memory` or `bench io`",
                    a.what.c_str());
  if (a.what == "gemm") a.sizes = "256,512,1024,2048";
  if (a.what == "memory") a.sizes = "1MiB,4MiB,16MiB,64MiB,256MiB";
  // --parallel.* (and any other --section.key) go to the configuration parser, so the mesh
  // keys are spelled and validated exactly as for `train` and `plan`.
  Args own_args, config_args;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& s = args[i];
    const bool config_key = s.rfind("--", 0) == 0 && s.find('.') != std::string::npos &&
                            s.find('.') < s.find('=');
    if (config_key) {
      config_args.push_back(s);
      // "--parallel.tp 2" (value as the next argument)
      if (s.find('=') == std::string::npos && i + 1 < args.size()) config_args.push_back(args[++i]);
    } else {
      own_args.push_back(s);
    }
  }
  std::string ops = "all";
  po::options_description desc("Options");
  desc.add_options()
      ("help,h", "show this help")
      ("ops", po::value<std::string>(&ops)->default_value(ops), "comm: collectives, comma-separated, or all")
      ("min_bytes", po::value<std::string>(&a.min_bytes)->default_value(a.min_bytes), "comm: smallest message (full buffer)")
      ("max_bytes", po::value<std::string>(&a.max_bytes)->default_value(a.max_bytes), "comm: largest message; sizes double")
      ("group", po::value<std::string>(&a.group)->default_value(a.group), "comm: world | tp | dp_shard | dp_replicate | dp")
      ("dtype", po::value<std::string>(&a.dtype)->default_value(a.dtype), "comm, gemm: fp32 | bf16")
      ("warmup", po::value<int>(&a.warmup)->default_value(a.warmup), "comm: untimed operations per size")
      ("iters", po::value<int>(&a.iters)->default_value(a.iters), "comm: timed operations per size")
      ("in_step", po::bool_switch(&a.in_step), "comm: every operation starts after a barrier over all ranks, so the "
                                               "group's concurrent siblings move their bytes at the same moment (as "
                                               "tensor-parallel all-reduces line them up in training)")
      ("sizes", po::value<std::string>(&a.sizes)->default_value(a.sizes), "gemm: N or MxNxK list; memory: byte sizes")
      ("transpose", po::value<std::string>(&a.transpose)->default_value(a.transpose), "gemm: nn | nt | tn")
      ("seconds", po::value<double>(&a.seconds)->default_value(a.seconds), "gemm/memory: seconds per size (at most 3600)")
      ("csv", po::value<std::string>(&a.csv), "also write the results as CSV (rank 0)")
      ("json", po::value<std::string>(&a.json), "also write the results as JSON (rank 0)");
  const auto checks = [&](const po::variables_map& vm) {
    // An option of another benchmark is refused, not ignored: `bench gemm --iters 1000`
    // would otherwise run as if the user had not asked (as generate refuses --system
    // without --chat).
    for (const auto& [name, modes] : option_modes())
      if (vm.count(name) && !vm[name].defaulted() && std::find(modes.begin(), modes.end(), a.what) == modes.end())
        throw UserError(strprintf("--%s is an option of %s, not of `bench %s` (see `meshtrain bench --help`)",
                                  name.c_str(), mode_list(modes).c_str(), a.what.c_str()));
    a.ops = split_list(ops == "all" ? "all_gather,reduce_scatter,all_reduce,broadcast" : ops);
    MESHTRAIN_REQUIRE(a.what != "comm" || !a.ops.empty(),
                      "--ops lists no collective: give some of all_gather, reduce_scatter, all_reduce and "
                      "broadcast, comma-separated, or all");
    for (const std::string& op : a.ops) parse_collective(op);
    MESHTRAIN_REQUIRE(a.what == "comm" || !split_list(a.sizes).empty(),
                      "--sizes lists no size: give one or more, comma-separated (see `meshtrain bench --help`)");
    MESHTRAIN_REQUIRE(a.dtype == "fp32" || a.dtype == "bf16", "--dtype must be fp32 or bf16, got '%s'", a.dtype.c_str());
    MESHTRAIN_REQUIRE(a.warmup >= 0 && a.iters >= 1, "--warmup must be >= 0 and --iters >= 1");
    MESHTRAIN_REQUIRE(std::isfinite(a.seconds) && a.seconds > 0 && a.seconds <= kMaxSeconds,
                      "--seconds must be a positive number of seconds per size, at most %g, got %g", kMaxSeconds,
                      a.seconds);
    MESHTRAIN_REQUIRE(a.transpose == "nn" || a.transpose == "nt" || a.transpose == "tn",
                      "--transpose must be nn, nt or tn, got '%s'", a.transpose.c_str());
    a.config = parse_config("bench", config_args).config;
    validate_config(a.config);
    // The configuration keys given (each "--section.key=value" or "--section.key value"),
    // after parse_config has named an unknown one: a key this benchmark does not read is
    // refused like an option of another benchmark.
    const std::vector<std::string> readable = config_keys_of(a.what);
    for (const std::string& arg : config_args) {
      if (arg.rfind("--", 0) != 0) continue;  // the value of "--section.key value"
      const std::string key = arg.substr(2, arg.find('=') == std::string::npos ? std::string::npos : arg.find('=') - 2);
      MESHTRAIN_REQUIRE(std::find(readable.begin(), readable.end(), key) != readable.end(),
                        "--%s is not read by `bench %s`: its configuration keys are %s", key.c_str(), a.what.c_str(),
                        option_list(readable).c_str());
    }
  };
  a.own = parse_own_options("bench", kUsage, desc, own_args, checks, nullptr,
                            "\nconfiguration keys: bench comm: --parallel.tp, --parallel.dp_shard, "
                            "--parallel.dp_replicate, --parallel.backend (auto | mpi | nccl); every benchmark: "
                            "--parallel.collective_timeout (seconds; the collective watchdog, as in `train`)\n");
  return a;
}

// ---- reductions over the world (host doubles) --------------------------------------------

struct Spread {
  double min = 0, avg = 0, max = 0, sum = 0;
};
Spread spread(const MpiComm& world, double v) {
  Spread s;
  const MinMax mm = all_min_max(world, v);
  s.min = mm.min;
  s.max = mm.max;
  s.sum = all_reduce_value(world, v, ReduceOp::Sum);
  s.avg = s.sum / world.size();
  return s;
}

// ---- sizes bounded by memory ----------------------------------------------------------------

/// UserError on every rank (before any size is timed) when the buffers one size needs do not
/// fit: a GPU's memory on device builds (`device_bytes`), else this host's available memory
/// shared by the job's ranks on it (they allocate at once; `host_bytes` each). An absurd
/// size is then one message naming the size (`what`: "--sizes entry 'X'", "--max_bytes X")
/// and the memory, not std::bad_alloc (or the OOM killer) after the earlier sizes.
void require_buffers_fit(const Runtime& rt, const std::string& what, double device_bytes, double host_bytes,
                         const char* buffers) {
  agree_on_errors(rt.world(), [&] {
    const std::size_t device = device_memory_bytes();
    if (device > 0) {
      MESHTRAIN_REQUIRE(device_bytes <= static_cast<double>(device),
                        "%s needs %s of device memory for %s, more than this GPU's %s", what.c_str(),
                        format_bytes(device_bytes).c_str(), buffers, format_bytes(static_cast<double>(device)).c_str());
      return;
    }
    const int local = rt.topology().local_size;
    require_host_memory(host_bytes * local,
                        strprintf("%s (%s%s)", what.c_str(), buffers,
                                  local > 1 ? strprintf(", %s on each of %d ranks of this host",
                                                        format_bytes(host_bytes).c_str(), local).c_str()
                                            : ""));
  });
}

// ---- bench comm ----------------------------------------------------------------------------

int bench_comm(Runtime& rt, const BenchArgs& a) {
  const MpiComm& world = rt.world();
  const bool root = world.rank() == 0;
  const Topology& topo = rt.topology();
  std::optional<int> rpn;
  if (topo.uniform()) rpn = topo.local_size;
  const ParallelConfig& pc = a.config.parallel;
  const MeshShape shape = resolve_mesh_shape({pc.dp_replicate, pc.dp_shard, pc.tp}, world.size(), rpn);
  const parallel::DeviceMesh mesh(world, shape, pc.backend);
  const parallel::MeshDim* dim = mesh.find(a.group);
  MESHTRAIN_REQUIRE(dim != nullptr, "--group must be world, tp, dp_shard, dp_replicate or dp, got '%s'",
                    a.group.c_str());
  Communicator* comm = &dim->comm();
  Communicator* in_step = a.in_step ? &mesh.find("world")->comm() : nullptr;
  const int n = comm->size();
  const int instances = world.size() / n;  // groups of this kind running at once
  const DType dt = a.dtype == "bf16" ? DType::BF16 : DType::F32;
  const std::size_t esize = dtype_size(dt);
  // The smallest message is one element per rank of the group, whatever --min_bytes says.
  const std::uint64_t smallest = esize * static_cast<std::uint64_t>(n);
  const std::uint64_t lo = std::max<std::uint64_t>(parse_bytes("--min_bytes", a.min_bytes), smallest);
  const std::uint64_t hi = parse_bytes("--max_bytes", a.max_bytes);
  MESHTRAIN_REQUIRE(hi >= lo || lo == smallest, "--max_bytes (%s) must be at least --min_bytes (%s)",
                    a.max_bytes.c_str(), a.min_bytes.c_str());
  MESHTRAIN_REQUIRE(hi >= lo, "--max_bytes (%s) must be at least %llu B, the smallest message (one %s element per rank "
                    "of the %d-rank group)", a.max_bytes.c_str(), static_cast<unsigned long long>(smallest),
                    a.dtype.c_str(), n);
  // The largest message: a send and a receive buffer of up to --max_bytes each on the device,
  // and on the host the values sent and the result checked (comm/bench.cpp).
  const double max_message = static_cast<double>(hi);
  require_buffers_fit(rt, "--max_bytes " + a.max_bytes, 2 * max_message, (device_memory_bytes() > 0 ? 2 : 4) * max_message,
                      "the send and receive buffers and their host copies");

  if (root) {
    std::printf("# meshtrain bench comm: group %s (%d ranks; %d such group(s) run at once), mesh %s\n",
                a.group.c_str(), n, instances, shape.str().c_str());
    const std::string algorithm =
        std::string(comm->backend()) == "mpi" ? strprintf(" (all_reduce: %s)", describe(mpi_all_reduce_algorithm())) : "";
    std::printf("# %d rank(s) on %d node(s), %d thread(s) per rank, backend %s%s, dtype %s, warmup %d, iters %d%s\n",
                world.size(), topo.num_nodes, Kokkos::DefaultExecutionSpace().concurrency(), comm->backend(), algorithm.c_str(),
                a.dtype.c_str(), a.warmup, a.iters,
                a.in_step ? ", in step (a barrier over all ranks before every operation, counted in its time)" : "");
    std::printf("# time: seconds per operation averaged over the timed iterations, min/avg/max across all ranks\n");
    std::printf("# algbw = size / time_max; busbw = algbw * factor (all_gather, reduce_scatter: (n-1)/n; "
                "all_reduce: 2(n-1)/n; broadcast: 1)\n");
  }
  std::string csv =
      "op,group,group_ranks,world_ranks,mesh,backend,dtype,bytes,count,time_min_s,time_avg_s,time_max_s,"
      "algbw_bytes_per_s,busbw_bytes_per_s,bus_factor,wrong,copy_bytes_per_s\n";
  formats::Json rows_json = formats::Json::array();
  std::vector<std::string> csv_rows;
  long total_wrong = 0;
  struct Last {
    std::string op;
    double busbw = 0;
    std::uint64_t bytes = 0;
  };
  std::vector<Last> largest;
  for (const std::string& op_name : a.ops) {
    const CollectiveKind kind = parse_collective(op_name);
    if (root) {
      std::printf("\n# %s, bus factor %.3f\n", op_name.c_str(), bus_factor(kind, n));
      std::printf("#%13s %12s %11s %11s %11s %10s %10s %7s\n", "size(B)", "count(elem)", "min(us)", "avg(us)",
                  "max(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
    }
    for (std::uint64_t bytes = lo; bytes <= hi; bytes *= 2) {
      const CollectiveResult r = bench_collective(*comm, kind, bytes, dt, a.warmup, a.iters, in_step);
      // Across all concurrent groups: the slowest rank bounds the bandwidth; wrong counts are
      // per-group sums, counted once per group (by its rank 0).
      const Spread tmin = spread(world, r.time_min), tmax = spread(world, r.time_max), tavg = spread(world, r.time_avg);
      const Spread wrong = spread(world, comm->rank() == 0 ? static_cast<double>(r.wrong) : 0.0);
      const double t = tmax.max;
      const double algbw = r.bytes / t, busbw = algbw * bus_factor(kind, n);
      const long w = static_cast<long>(wrong.sum);
      total_wrong += w;
      const std::size_t count = r.bytes / esize;
      if (root) {
        std::printf("%14llu %12zu %11.1f %11.1f %11.1f %10.3f %10.3f %7ld\n", static_cast<unsigned long long>(r.bytes),
                    count, 1e6 * tmin.min, 1e6 * tavg.avg, 1e6 * t, algbw / 1e9, busbw / 1e9, w);
        std::fflush(stdout);
      }
      csv_rows.push_back(strprintf("%s,%s,%d,%d,%dx%dx%d,%s,%s,%llu,%zu,%.9g,%.9g,%.9g,%.6g,%.6g,%.6g,%ld,", op_name.c_str(),
                                   a.group.c_str(), n, world.size(), shape.dp_replicate, shape.dp_shard, shape.tp,
                                   comm->backend(), a.dtype.c_str(), static_cast<unsigned long long>(r.bytes), count,
                                   tmin.min, tavg.avg, t, algbw, busbw, bus_factor(kind, n), w));
      formats::Json j;
      j["op"] = op_name;
      j["bytes"] = static_cast<std::uint64_t>(r.bytes);
      j["count"] = static_cast<std::uint64_t>(count);
      j["time_min_s"] = tmin.min;
      j["time_avg_s"] = tavg.avg;
      j["time_max_s"] = t;
      j["algbw_bytes_per_s"] = algbw;
      j["busbw_bytes_per_s"] = busbw;
      j["bus_factor"] = bus_factor(kind, n);
      j["wrong"] = static_cast<std::int64_t>(w);
      rows_json.push_back(j);
      if (bytes > hi / 2) largest.push_back({op_name, busbw, r.bytes});
    }
  }
  // The ceiling of a shared-memory transport: a memory copy, every rank copying at once.
  const Spread copy = spread(world, linalg::measure_copy_bandwidth(64.0 * 1024 * 1024, 0.3));
  if (root) {
    std::printf("\n# memory copy (64 MiB, read + write bytes counted, all %d ranks copying at once): per rank "
                "min %.2f / avg %.2f / max %.2f GB/s, sum %.2f GB/s\n",
                world.size(), copy.min / 1e9, copy.avg / 1e9, copy.max / 1e9, copy.sum / 1e9);
    for (const Last& l : largest)
      std::printf("# %-14s %s: busbw %.2f GB/s = %.2f x the per-rank copy bandwidth (%.2f x its memcpy rate, "
                  "copy / 2)\n",
                  l.op.c_str(), format_bytes(static_cast<double>(l.bytes)).c_str(), l.busbw / 1e9, l.busbw / copy.min,
                  2 * l.busbw / copy.min);
    std::printf("# wrong results: %ld%s\n", total_wrong, total_wrong ? "  FAILED" : "  (all data checked)");
    if (!a.csv.empty()) {
      for (const std::string& row : csv_rows) csv += row + strprintf("%.6g\n", copy.min);
      file_io::write_file(a.csv, csv);
    }
    if (!a.json.empty()) {
      formats::Json j;
      j["benchmark"] = "comm";
      j["group"] = a.group;
      j["group_ranks"] = n;
      j["world_ranks"] = world.size();
      j["mesh"] = strprintf("%dx%dx%d", shape.dp_replicate, shape.dp_shard, shape.tp);
      j["backend"] = comm->backend();
      j["mpi_all_reduce"] = std::string(comm->backend()) == "mpi" ? describe(mpi_all_reduce_algorithm()) : "";
      j["dtype"] = a.dtype;
      j["warmup"] = a.warmup;
      j["iters"] = a.iters;
      j["in_step"] = a.in_step;
      j["threads_per_rank"] = Kokkos::DefaultExecutionSpace().concurrency();
      j["copy_bytes_per_s_min"] = copy.min;
      j["copy_bytes_per_s_avg"] = copy.avg;
      j["copy_bytes_per_s_sum"] = copy.sum;
      j["wrong"] = static_cast<std::int64_t>(total_wrong);
      j["results"] = rows_json;
      file_io::write_file(a.json, formats::json_pretty(j) + "\n");
    }
  }
  return total_wrong == 0 ? 0 : 1;
}

// ---- the files of bench gemm and bench memory ---------------------------------------------

/// Rank 0 writes --csv (`csv`: the header and one line per size) and --json: {"benchmark",
/// "threads_per_rank", then `fields` (what only this benchmark records), "results" (one object
/// per size)}, keys in that order.
void write_bench_files(const BenchArgs& a, bool root, const std::string& csv, const char* benchmark,
                       const formats::Json& fields, formats::Json results) {
  if (!root) return;
  if (!a.csv.empty()) file_io::write_file(a.csv, csv);
  if (a.json.empty()) return;
  formats::Json j;
  j["benchmark"] = benchmark;
  j["threads_per_rank"] = Kokkos::DefaultExecutionSpace().concurrency();
  for (const auto& [key, value] : fields.items()) j[key] = value;
  j["results"] = std::move(results);
  file_io::write_file(a.json, formats::json_pretty(j) + "\n");
}

// ---- bench gemm ----------------------------------------------------------------------------

struct GemmShape {
  int m = 0, n = 0, k = 0;
};

GemmShape parse_gemm_shape(const std::string& s) {
  // Fields split at every 'x', empty ones kept: "64x" and "64abc" are not "64".
  std::vector<std::string> fields(1);
  for (const char c : s) {
    if (c == 'x')
      fields.emplace_back();
    else
      fields.back() += c;
  }
  MESHTRAIN_REQUIRE(fields.size() == 1 || fields.size() == 3, "--sizes entry '%s' must be N or MxNxK", s.c_str());
  int parts[3] = {0, 0, 0};
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const std::string& f = fields[i];
    const bool digits = !f.empty() && f.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || f.size() > 10 || std::stoll(f) <= 0 || std::stoll(f) > std::numeric_limits<int>::max())
      throw UserError(strprintf("--sizes entry '%s' must be N or MxNxK (positive integers)", s.c_str()));
    parts[i] = static_cast<int>(std::stoll(f));
  }
  GemmShape g;
  g.m = parts[0];
  g.n = fields.size() == 3 ? parts[1] : parts[0];
  g.k = fields.size() == 3 ? parts[2] : parts[0];
  return g;
}

int bench_gemm(Runtime& rt, const BenchArgs& a) {
  const MpiComm& world = rt.world();
  const bool root = world.rank() == 0;
  const bool bf16 = a.dtype == "bf16";
  for (const std::string& item : split_list(a.sizes)) {
    const GemmShape g = parse_gemm_shape(item);
    const double esize = bf16 ? 2.0 : 4.0;
    const double m = g.m, n = g.n, k = g.k;
    const double abc = (m * k + k * n + m * n) * esize;
    require_buffers_fit(rt, strprintf("--sizes entry '%s'", item.c_str()), abc, abc, "A, B and C");
  }
  if (root) {
    std::printf("# meshtrain bench gemm: %s, op(A)op(B) = %s, %d rank(s) at once, %d thread(s) per rank, %s\n",
                a.dtype.c_str(), a.transpose.c_str(), world.size(), Kokkos::DefaultExecutionSpace().concurrency(),
                linalg::gemm_backend_name().c_str());
    std::printf("# GFLOP/s per rank: best repeat (min/max across ranks) and mean over repeats (avg across ranks)\n");
    std::printf("#%21s %12s %12s %12s %12s\n", "m x n x k", "best_min", "best_max", "mean_avg", "sum_best");
  }
  std::string csv = "m,n,k,dtype,transpose,ranks,threads_per_rank,best_flops_min,best_flops_max,mean_flops_avg,best_flops_sum\n";
  formats::Json results = formats::Json::array();
  for (const std::string& item : split_list(a.sizes)) {
    const GemmShape g = parse_gemm_shape(item);
    const linalg::Op oa = a.transpose[0] == 't' ? linalg::Op::T : linalg::Op::N;
    const linalg::Op ob = a.transpose[1] == 't' ? linalg::Op::T : linalg::Op::N;
    const auto [best, mean] = linalg::time_gemm(oa, ob, g.m, g.n, g.k, a.seconds, bf16);
    const Spread b = spread(world, best), m = spread(world, mean);
    if (root) {
      std::printf("%22s %12.1f %12.1f %12.1f %12.1f\n", strprintf("%d x %d x %d", g.m, g.n, g.k).c_str(), b.min / 1e9,
                  b.max / 1e9, m.avg / 1e9, b.sum / 1e9);
      std::fflush(stdout);
    }
    csv += strprintf("%d,%d,%d,%s,%s,%d,%d,%.6g,%.6g,%.6g,%.6g\n", g.m, g.n, g.k, a.dtype.c_str(), a.transpose.c_str(),
                     world.size(), Kokkos::DefaultExecutionSpace().concurrency(), b.min, b.max, m.avg, b.sum);
    results.push_back({{"m", g.m}, {"n", g.n}, {"k", g.k}, {"dtype", a.dtype}, {"transpose", a.transpose},
                       {"ranks", world.size()}, {"best_flops_min", b.min}, {"best_flops_max", b.max},
                       {"mean_flops_avg", m.avg}, {"best_flops_sum", b.sum}});
  }
  write_bench_files(a, root, csv, "gemm", {{"backend", linalg::gemm_backend_name()}}, std::move(results));
  return 0;
}

// ---- bench memory --------------------------------------------------------------------------

int bench_memory(Runtime& rt, const BenchArgs& a) {
  const MpiComm& world = rt.world();
  const bool root = world.rank() == 0;
  for (const std::string& item : split_list(a.sizes)) {
    const std::uint64_t bytes = parse_bytes("--sizes", item);
    MESHTRAIN_REQUIRE(bytes >= 4096, "--sizes entry '%s' is below 4 KiB", item.c_str());
    const double both = 2.0 * static_cast<double>(bytes);
    require_buffers_fit(rt, strprintf("--sizes entry '%s'", item.c_str()), both, both, "the source and the destination");
  }
  if (root) {
    std::printf("# meshtrain bench memory: STREAM-like copy b = a (fp32), read + write bytes counted, best of "
                "repeats over %.2f s; %d rank(s) copying at once, %d thread(s) per rank\n",
                a.seconds, world.size(), Kokkos::DefaultExecutionSpace().concurrency());
    std::printf("#%13s %12s %12s %12s %12s\n", "size(B)", "min(GB/s)", "avg(GB/s)", "max(GB/s)", "sum(GB/s)");
  }
  std::string csv = "bytes,ranks,threads_per_rank,copy_min,copy_avg,copy_max,copy_sum\n";
  formats::Json results = formats::Json::array();
  for (const std::string& item : split_list(a.sizes)) {
    // What is copied: whole fp32 elements (4097 B copies 4096, and reports 4096).
    const std::uint64_t bytes = parse_bytes("--sizes", item) / sizeof(float) * sizeof(float);
    MESHTRAIN_REQUIRE(bytes >= 4096, "--sizes entry '%s' is below 4 KiB", item.c_str());
    const Spread s = spread(world, linalg::measure_copy_bandwidth(static_cast<double>(bytes), a.seconds));
    if (root) {
      std::printf("%14llu %12.2f %12.2f %12.2f %12.2f\n", static_cast<unsigned long long>(bytes), s.min / 1e9,
                  s.avg / 1e9, s.max / 1e9, s.sum / 1e9);
      std::fflush(stdout);
    }
    csv += strprintf("%llu,%d,%d,%.6g,%.6g,%.6g,%.6g\n", static_cast<unsigned long long>(bytes), world.size(),
                     Kokkos::DefaultExecutionSpace().concurrency(), s.min, s.avg, s.max, s.sum);
    results.push_back({{"bytes", bytes}, {"ranks", world.size()}, {"copy_bytes_per_s_min", s.min},
                       {"copy_bytes_per_s_avg", s.avg}, {"copy_bytes_per_s_max", s.max},
                       {"copy_bytes_per_s_sum", s.sum}});
  }
  write_bench_files(a, root, csv, "memory", formats::Json::object(), std::move(results));
  return 0;
}

}  // namespace

int command_bench(Runtime& rt, const Args& args) {
  if (!args.empty() && args[0] == "io") return command_bench_io(rt, Args(args.begin() + 1, args.end()));
  // A part of an MPMD line whose arguments do not parse must not leave the others waiting
  // in the comparison below: every rank ends with the error of the lowest failing rank.
  BenchArgs a;
  agree_on_errors(rt.world(), [&] { a = parse_bench_args(args); });
  if (answer_help(rt, a.own)) return 0;
  configure_run_logging(rt, a.config);  // parallel.collective_timeout: a rank that stops is not waited for forever
  // Ranks started with other arguments (an MPMD launch line) would post collectives of other
  // sizes or counts: a hang, MPI_ERR_TRUNCATE, or data checked against another dtype.
  train::require_same_settings_on_every_rank(rt.world(), rt.topology().host_of_rank, a.settings());
  // The result files are written at the end: a path that cannot be written is found now.
  agree_on_errors(rt.world(), [&] {
    if (rt.world().rank() != 0) return;
    if (!a.csv.empty()) train::require_writable_file("--csv", a.csv);
    if (!a.json.empty()) train::require_writable_file("--json", a.json);
  });
  if (a.what == "comm") return bench_comm(rt, a);
  if (a.what == "gemm") return bench_gemm(rt, a);
  return bench_memory(rt, a);
}

}  // namespace meshtrain::app
