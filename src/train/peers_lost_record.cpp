#include "train/peers_lost_record.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <exception>
#include <fstream>
#include <sstream>

#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/checkpoint.hpp"
#include "comm/peers_lost.hpp"
#include "core/file_io.hpp"
#include "core/format.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "formats/json.hpp"

namespace meshtrain::train {
namespace {

// Set once by arm_peers_lost_record (main thread, before any collective can time out),
// read by the handler (possibly on the watchdog's monitor thread).
std::string g_out_dir, g_ckpt_dir;
int g_rank = -1;
// When this process started (static initialisation): a record older than it is an earlier launch's.
const std::time_t g_process_start = std::time(nullptr);

formats::Json ranks_json(const std::vector<LostRank>& ranks) {
  formats::Json a = formats::Json::array();
  for (const LostRank& r : ranks) a.push_back({{"rank", r.rank}, {"host", r.host}, {"why", r.why}});
  return a;
}

/// Distinct hosts of `ranks`, in order of first appearance, as a JSON array.
formats::Json hosts_json(const std::vector<LostRank>& ranks) {
  std::vector<std::string> hosts;
  for (const LostRank& r : ranks)
    if (std::find(hosts.begin(), hosts.end(), r.host) == hosts.end()) hosts.push_back(r.host);
  return hosts;
}

void write_record(const PeersLost& report) {
  // No exception may leave: the job ends with kExitPeersLost whatever happens here.
  try {
    std::string newest, why_none;
    long long step = -1;
    try {
      newest = checkpoint::newest_checkpoint(g_ckpt_dir);
      const std::size_t at = newest.rfind("step_");
      if (at != std::string::npos) step = std::atoll(newest.c_str() + at + 5);
    } catch (const std::exception& e) {
      why_none = e.what();
    }
    const std::string host = host_name();
    const std::time_t now = std::time(nullptr);
    char utc[32] = {0};
    std::tm tm{};
    gmtime_r(&now, &tm);
    std::strftime(utc, sizeof(utc), "%Y-%m-%dT%H:%M:%SZ", &tm);
    formats::Json o = {{"outcome", "peers_lost"},
                       {"exit_status", kExitPeersLost},
                       {"reported_by", {{"rank", g_rank}, {"host", host}}},
                       {"collective", report.collective},
                       {"lost", ranks_json(report.lost)},
                       {"lost_hosts", hosts_json(report.lost)},
                       {"unverified", ranks_json(report.unverified)},
                       {"unverified_hosts", hosts_json(report.unverified)},
                       {"newest_checkpoint", newest},
                       {"newest_checkpoint_step", step},
                       {"time", static_cast<double>(now)},
                       {"time_utc", std::string(utc)},
                       {"message", report.message}};
    if (!why_none.empty()) o["newest_checkpoint_error"] = why_none;
    const std::string text = formats::json_text(o) + "\n";
    // Every reporting rank writes its own temporary file and links it to the record's name:
    // a reader sees one whole record, never a mix, and the first report of this launch wins.
    // A later reporter is usually a rank that was stalled (SIGSTOP, a frozen node) and is
    // continued during the teardown: its own watchdog then fires at once and would name the
    // survivors as lost, so it must not replace their record (arm_peers_lost_record removed
    // an earlier launch's record).
    const std::string path = g_out_dir + "/peers_lost.json";
    const std::string tmp = strprintf("%s.tmp.%d", path.c_str(), g_rank);
    if (file_io::write_synced(tmp, text) != 0) {
      std::remove(tmp.c_str());
      std::fprintf(stderr, "[meshtrain] rank %d: cannot write %s\n", g_rank, tmp.c_str());
      return;
    }
    const bool first = ::link(tmp.c_str(), path.c_str()) == 0;
    const int link_errno = errno;
    std::remove(tmp.c_str());
    if (!first) {
      std::fprintf(stderr, "[meshtrain] rank %d (%s): peers lost; %s %s\n", g_rank, host.c_str(),
                   link_errno == EEXIST ? "kept the earlier report in" : "cannot write", path.c_str());
      return;
    }
    file_io::fsync_path(g_out_dir);
    std::fprintf(stderr, "[meshtrain] rank %d (%s): peers lost: wrote %s (newest complete checkpoint: %s)\n", g_rank,
                 host.c_str(), path.c_str(), newest.empty() ? "none" : newest.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[meshtrain] rank %d: cannot write the peers-lost record: %s\n", g_rank, e.what());
  }
}

}  // namespace

void arm_peers_lost_record(const std::string& out_dir, const std::string& ckpt_dir, int world_rank) {
  // An earlier launch's record goes, so that this launch's first report can take its name.
  // Only a record older than this process: a peer whose watchdog already fired in this
  // launch keeps its report.
  const std::string path = out_dir + "/peers_lost.json";
  struct stat st {};
  if (world_rank == 0 && ::stat(path.c_str(), &st) == 0 && st.st_mtime < g_process_start)
    std::remove(path.c_str());
  g_out_dir = out_dir;
  g_ckpt_dir = ckpt_dir;
  g_rank = world_rank;
  set_peers_lost_handler(&write_record);
}

formats::Json recoveries(const std::string& out_dir) {
  const std::string path = out_dir + "/recoveries.jsonl";
  formats::Json out = formats::Json::array();
  std::ifstream in(path);
  if (!in) return out;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      formats::Json v = formats::parse_json(line);
      if (!v.is_object()) throw std::runtime_error("not an object");
      out.push_back(std::move(v));
    } catch (const std::exception& e) {
      log::warn("%s line %d is not a JSON object (%s): left out of summary.json", path.c_str(), lineno, e.what());
    }
  }
  return out;
}

}  // namespace meshtrain::train
