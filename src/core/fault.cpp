// MESHTRAIN_FAULT: parsing the spec and firing it (fault.hpp has the grammar).
#include "core/fault.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.hpp"

namespace meshtrain::fault {
namespace detail {
int g_armed = -1;
int g_step = 0;  ///< the trainer's current step (set_step)
}

namespace {

enum class Action { Kill, Stall, Stop, Eio, Enospc, Enomem };

struct Spec {
  std::string text;
  int rank = -1;  // -1: every rank
  int step = -1;  // -1: any step
  long after = 0;
  Action action = Action::Kill;
};

Spec g_spec;
long g_passes = 0;
bool g_fired = false;

struct PointName {
  Point point;
  const char* name;
  bool io;     // eio/enospc allowed
  bool alloc;  // enomem allowed
};
constexpr PointName kPoints[] = {
    {Point::SaveDataset, "save.dataset", true, false},
    {Point::SaveBeforeRename, "save.before_rename", true, false},
    {Point::SaveAfterRename, "save.after_rename", true, false},
    {Point::Collective, "collective", false, false},
    {Point::RecordWrite, "record.write", true, false},
    {Point::MetricsWrite, "metrics.write", true, false},
    {Point::PrepareWrite, "prepare.write", true, false},
    {Point::ConvertWrite, "convert.write", true, false},
    {Point::SaveBackground, "save.background", true, false},
    {Point::PoolAllocate, "pool.allocate", false, true},
    {Point::TrainStartup, "train.startup", false, false},
};

const char* action_name(Action a) {
  switch (a) {
    case Action::Kill: return "kill";
    case Action::Stall: return "stall";
    case Action::Stop: return "stop";
    case Action::Eio: return "eio";
    case Action::Enospc: return "enospc";
    case Action::Enomem: return "enomem";
  }
  return "?";
}

const char* point_name(Point p) {
  for (const PointName& n : kPoints)
    if (n.point == p) return n.name;
  return "none";
}

long parse_number(const std::string& spec, const std::string& key, const std::string& value, long min) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(value.c_str(), &end, 10);
  MESHTRAIN_REQUIRE(!value.empty() && *end == '\0' && errno == 0 && v >= min,
                    "MESHTRAIN_FAULT=%s: %s=%s is not an integer >= %ld", spec.c_str(), key.c_str(), value.c_str(), min);
  return v;
}

std::string point_list() {
  std::string s;
  for (const PointName& n : kPoints) s += (s.empty() ? "" : ", ") + std::string(n.name);
  return s;
}

}  // namespace

void configure(const std::string& spec) {
  detail::g_armed = -1;
  g_spec = Spec();
  g_passes = 0;
  g_fired = false;
  if (spec.empty()) return;
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t colon = spec.find(':', start);
    parts.push_back(spec.substr(start, colon == std::string::npos ? std::string::npos : colon - start));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  Spec s;
  s.text = spec;
  Point point = Point::None;
  bool io_point = false, alloc_point = false;
  for (const PointName& n : kPoints)
    if (parts[0] == n.name) point = n.point, io_point = n.io, alloc_point = n.alloc;
  MESHTRAIN_REQUIRE(point != Point::None, "MESHTRAIN_FAULT=%s: unknown fault point '%s' (one of: %s)", spec.c_str(),
                    parts[0].c_str(), point_list().c_str());
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const std::size_t eq = parts[i].find('=');
    const std::string key = parts[i].substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : parts[i].substr(eq + 1);
    if (key == "rank") {
      s.rank = static_cast<int>(parse_number(spec, key, value, 0));
    } else if (key == "step") {
      s.step = static_cast<int>(parse_number(spec, key, value, 0));
    } else if (key == "after") {
      s.after = parse_number(spec, key, value, 0);
    } else if (key == "action") {
      const Action all[] = {Action::Kill, Action::Stall, Action::Stop, Action::Eio, Action::Enospc, Action::Enomem};
      bool found = false;
      for (Action a : all)
        if (value == action_name(a)) s.action = a, found = true;
      MESHTRAIN_REQUIRE(found, "MESHTRAIN_FAULT=%s: unknown action '%s' (kill, stall, stop, eio, enospc or enomem)",
                        spec.c_str(), value.c_str());
    } else {
      throw UserError(strprintf("MESHTRAIN_FAULT=%s: unknown option '%s' (rank=R, step=S, after=K, action=A)",
                                spec.c_str(), parts[i].c_str()));
    }
  }
  MESHTRAIN_REQUIRE(io_point || (s.action != Action::Eio && s.action != Action::Enospc),
                    "MESHTRAIN_FAULT=%s: action %s needs an I/O point; %s is not one", spec.c_str(),
                    action_name(s.action), parts[0].c_str());
  MESHTRAIN_REQUIRE(alloc_point || s.action != Action::Enomem,
                    "MESHTRAIN_FAULT=%s: action enomem needs an allocation point (pool.allocate); %s is not one",
                    spec.c_str(), parts[0].c_str());
  g_spec = s;
  detail::g_armed = static_cast<int>(point);
}

void configure_from_environment() {
  const char* v = std::getenv("MESHTRAIN_FAULT");
  configure(v ? v : "");
}

std::string armed_spec() { return detail::g_armed < 0 ? "" : g_spec.text; }

void set_step(int step) { detail::g_step = step; }

int detail::fire(Point p, int step) {
  if (g_fired) return 0;
  if (g_spec.rank >= 0 && g_spec.rank != world_rank()) return 0;
  if (g_spec.step >= 0 && g_spec.step != step) return 0;
  if (g_passes++ < g_spec.after) return 0;
  g_fired = true;
  std::fflush(stdout);
  std::fprintf(stderr, "[meshtrain] rank %d: MESHTRAIN_FAULT=%s fires: %s at %s (step %d, pass %ld)\n", world_rank(),
               g_spec.text.c_str(), action_name(g_spec.action), point_name(p), step, g_passes);
  std::fflush(stderr);
  switch (g_spec.action) {
    case Action::Kill:
      ::kill(::getpid(), SIGKILL);
      for (;;) ::pause();
    case Action::Stall:
      // Alive but making no progress, as a rank stuck in a driver call: no collective is
      // entered and no watchdog heartbeat is published from here on.
      for (;;) ::pause();
    case Action::Stop:
      // SIGSTOP: frozen at a known place until a test sends SIGCONT, then it goes on as if
      // nothing happened (a run held alive at an exact step while another one is tried).
      ::raise(SIGSTOP);
      return 0;
    case Action::Eio: return EIO;
    case Action::Enospc: return ENOSPC;
    case Action::Enomem: return ENOMEM;
  }
  return 0;
}

}  // namespace meshtrain::fault
