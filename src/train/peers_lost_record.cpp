#include "meshtrain/train/peers_lost_record.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <exception>
#include <fstream>
#include <sstream>

#include "meshtrain/checkpoint/checkpoint.hpp"
#include "meshtrain/comm/peers_lost.hpp"
#include "meshtrain/core/file_io.hpp"
#include "meshtrain/core/format.hpp"
#include "meshtrain/core/json.hpp"
#include "meshtrain/core/json_parse.hpp"
#include "meshtrain/core/log.hpp"

namespace meshtrain::train {
namespace {

// Set once by arm_peers_lost_record (main thread, before any collective can time out),
// read by the handler (possibly on the watchdog's monitor thread).
std::string g_out_dir, g_ckpt_dir;
int g_rank = -1;

std::string ranks_json(const std::vector<LostRank>& ranks) {
  std::string s = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    JsonObject o;
    o.add("rank", ranks[i].rank).add("host", ranks[i].host).add("why", ranks[i].why);
    s += (i ? ", " : "") + o.str();
  }
  return s + "]";
}

/// Distinct hosts of `ranks`, in order of first appearance, as a JSON array.
std::string hosts_json(const std::vector<LostRank>& ranks) {
  std::vector<std::string> hosts;
  for (const LostRank& r : ranks)
    if (std::find(hosts.begin(), hosts.end(), r.host) == hosts.end()) hosts.push_back(r.host);
  std::string s = "[";
  for (std::size_t i = 0; i < hosts.size(); ++i) s += (i ? ", " : "") + json_quote(hosts[i]);
  return s + "]";
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
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    const std::time_t now = std::time(nullptr);
    char utc[32] = {0};
    std::tm tm{};
    gmtime_r(&now, &tm);
    std::strftime(utc, sizeof(utc), "%Y-%m-%dT%H:%M:%SZ", &tm);
    JsonObject by;
    by.add("rank", g_rank).add("host", std::string(host));
    JsonObject o;
    o.add("outcome", "peers_lost").add("exit_status", kExitPeersLost).add_raw("reported_by", by.str())
        .add("collective", report.collective).add_raw("lost", ranks_json(report.lost))
        .add_raw("lost_hosts", hosts_json(report.lost)).add_raw("unverified", ranks_json(report.unverified))
        .add_raw("unverified_hosts", hosts_json(report.unverified)).add("newest_checkpoint", newest)
        .add("newest_checkpoint_step", static_cast<std::int64_t>(step))
        .add("time", static_cast<double>(now)).add("time_utc", std::string(utc)).add("message", report.message);
    if (!why_none.empty()) o.add("newest_checkpoint_error", why_none);
    const std::string text = o.str() + "\n";
    // Every reporting rank writes its own temporary file and renames it over the record:
    // a reader sees one whole record, never a mix.
    const std::string path = g_out_dir + "/peers_lost.json";
    const std::string tmp = strprintf("%s.tmp.%d", path.c_str(), g_rank);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      std::fprintf(stderr, "[meshtrain] rank %d: cannot write %s\n", g_rank, tmp.c_str());
      return;
    }
    int err = file_io::write_all(fd, text.data(), text.size());
    if (err == 0 && ::fsync(fd) != 0) err = errno;
    if (::close(fd) != 0 && err == 0) err = errno;
    if (err != 0) {
      std::remove(tmp.c_str());
      std::fprintf(stderr, "[meshtrain] rank %d: cannot write %s\n", g_rank, tmp.c_str());
      return;
    }
    file_io::rename_durably(tmp, path);
    std::fprintf(stderr, "[meshtrain] rank %d (%s): peers lost: wrote %s (newest complete checkpoint: %s)\n", g_rank,
                 host, path.c_str(), newest.empty() ? "none" : newest.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[meshtrain] rank %d: cannot write the peers-lost record: %s\n", g_rank, e.what());
  }
}

}  // namespace

void arm_peers_lost_record(const std::string& out_dir, const std::string& ckpt_dir, int world_rank) {
  g_out_dir = out_dir;
  g_ckpt_dir = ckpt_dir;
  g_rank = world_rank;
  set_peers_lost_handler(&write_record);
}

std::string recoveries_json(const std::string& out_dir) {
  const std::string path = out_dir + "/recoveries.jsonl";
  std::ifstream in(path);
  if (!in) return "[]";
  std::string line, out = "[";
  int n = 0, lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      if (json::parse(line).kind != json::Value::Kind::Object) throw std::runtime_error("not an object");
    } catch (const std::exception& e) {
      log::warn("%s line %d is not a JSON object (%s): left out of summary.json", path.c_str(), lineno, e.what());
      continue;
    }
    out += (n++ ? ", " : "") + line;
  }
  return out + "]";
}

}  // namespace meshtrain::train
