#include "train/same_run.hpp"

#include <cstdint>

#include "comm/agree.hpp"
#include "comm/collectives.hpp"
#include "core/crc32c.hpp"
#include "core/error.hpp"
#include "core/format.hpp"

namespace meshtrain::train {
namespace {

std::string trim(const std::string& s) {
  const std::size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const std::size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

/// "1, 3, 4" (at most 16 named, then how many more).
std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  const std::size_t shown = std::min<std::size_t>(ranks.size(), 16);
  for (std::size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > shown) s += strprintf(" and %zu more", ranks.size() - shown);
  return s;
}

}  // namespace

RunSettings config_settings(const std::string& config_ini) {
  RunSettings out;
  std::string section;
  std::size_t start = 0;
  while (start < config_ini.size()) {
    std::size_t end = config_ini.find('\n', start);
    if (end == std::string::npos) end = config_ini.size();
    const std::string line = trim(config_ini.substr(start, end - start));
    start = end + 1;
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = line.substr(1, line.size() - 2);
      continue;
    }
    const std::size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = (section.empty() ? "" : section + ".") + trim(line.substr(0, eq));
    if (key == "output.log_level" || key == "output.log_all_ranks") continue;  // what a rank prints
    out.emplace_back(key, trim(line.substr(eq + 1)));
  }
  return out;
}

RunSettings compared_settings(const std::string& config_ini, const std::string& dataset_identity) {
  RunSettings out = config_settings(config_ini);
  out.emplace_back("data.dir contents", dataset_identity);
  return out;
}

namespace {

/// The comparison behind both checks: `subject` ("settings and data") is what must be the
/// same, `advice` the sentence that ends the message (where such a difference comes from).
void require_same_on_every_rank(const MpiComm& world, const std::vector<std::string>& host_of_rank,
                                const RunSettings& mine, const char* subject, const char* advice) {
  const std::string record = settings_record(mine);
  const std::uint32_t crc = crc32c::value(record.data(), record.size());
  const bool differs = broadcast_value(world, crc, 0) != crc;
  if (all_reduce_value(world, differs ? 1 : 0, ReduceOp::Max) == 0) return;
  // A difference (every rank knows now): which ranks, and what differs on the lowest of them.
  std::vector<int> flags(static_cast<std::size_t>(world.size()), 0);
  flags[static_cast<std::size_t>(world.rank())] = differs ? 1 : 0;
  all_reduce_in_place(world, flags.data(), world.size(), ReduceOp::Sum);
  std::vector<int> ranks;
  for (int r = 0; r < world.size(); ++r)
    if (flags[static_cast<std::size_t>(r)]) ranks.push_back(r);
  const RunSettings on_root = parse_settings_record(broadcast_string(world, record, 0));
  agree_on_errors(world, [&] {
    if (!differs) return;
    const auto host = [&](int rank) {
      return rank < static_cast<int>(host_of_rank.size()) ? host_of_rank[static_cast<std::size_t>(rank)] : "?";
    };
    // The first key whose value differs (or a key only one side has: another build).
    std::string what = "their settings differ";
    for (std::size_t i = 0; i < std::max(mine.size(), on_root.size()); ++i) {
      const std::string key = i < mine.size() ? mine[i].first : on_root[i].first;
      const std::string value = i < mine.size() ? mine[i].second : "(none)";
      const std::string root_value =
          i < on_root.size() && on_root[i].first == key ? on_root[i].second : std::string("(none)");
      if (value == root_value) continue;
      what = strprintf("%s is '%s' on rank %d (host %s) but '%s' on rank 0 (host %s)", key.c_str(), value.c_str(),
                       world.rank(), host(world.rank()).c_str(), root_value.c_str(), host(0).c_str());
      break;
    }
    throw UserError(strprintf("the ranks were not started with the same %s: %s (rank%s %s differ%s from rank 0). %s",
                              subject, what.c_str(), ranks.size() > 1 ? "s" : "", rank_list(ranks).c_str(),
                              ranks.size() > 1 ? "" : "s", advice));
  });
}

}  // namespace

void require_same_run_on_every_rank(const MpiComm& world, const std::vector<std::string>& host_of_rank,
                                    const RunSettings& mine) {
  require_same_on_every_rank(world, host_of_rank, mine, "settings and data",
                             "Every rank must run the same command line with the same configuration and the same "
                             "dataset: check the launch line (an MPMD `:` part with other arguments), per-node copies "
                             "of the configuration file, and node-local copies of data.dir");
}

void require_same_settings_on_every_rank(const MpiComm& world, const std::vector<std::string>& host_of_rank,
                                         const RunSettings& mine) {
  require_same_on_every_rank(world, host_of_rank, mine, "settings",
                             "Every rank must run the same command line with the same configuration: check the "
                             "launch line (an MPMD `:` part with other arguments) and per-node copies of the "
                             "configuration file");
}

}  // namespace meshtrain::train
