#include "comm/watchdog.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <string>
#include <utility>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "comm/peers_lost.hpp"
#include "core/check.hpp"
#include "core/format.hpp"
#include "core/timer.hpp"

namespace meshtrain {
namespace {

constexpr int kMaxGroups = 32;
constexpr int kNameLen = 32;

// One rank's public record. Group ids are assigned per process in first-use order, which
// can differ between ranks (a rank that skips a collective may never use its group), so
// a slot also publishes the name of each id and peers are looked up by name.
struct Slot {
  char name[kMaxGroups][kNameLen];     // group name of each id ("" = unused)
  std::uint64_t entered[kMaxGroups];   // collectives entered per group id
  double heartbeat;                    // now_seconds() when this rank last entered or polled a collective
};

struct Board {
  MpiComm world;
  MpiComm node;
  MPI_Win window = MPI_WIN_NULL;
  Slot* mine = nullptr;
  std::vector<int> world_rank_of_local;  // node-local rank -> world rank
  std::vector<const Slot*> peer_slots;   // node-local rank -> its slot (read without MPI calls)
  std::vector<std::string> host_of_rank;  // world rank -> host name (names remote ranks' nodes)
  std::map<std::string, int> group_ids;
  std::map<std::string, std::uint64_t> counters;  // used when no board exists
};

Board& board() {
  static Board b;
  return b;
}

int group_id(const std::string& group) {
  Board& b = board();
  auto it = b.group_ids.find(group);
  if (it != b.group_ids.end()) return it->second;
  const int id = static_cast<int>(b.group_ids.size());
  b.group_ids[group] = id;
  if (b.mine && id < kMaxGroups) {
    // Published before the first increment of its counter; peers read it only after a
    // timeout of seconds.
    std::strncpy(b.mine->name[id], group.c_str(), kNameLen - 1);
    b.mine->name[id][kNameLen - 1] = '\0';
  }
  return id;
}

/// Collectives of `group` that a peer's slot says it entered (0 if it never used it).
std::uint64_t entered_by(const Slot* slot, const std::string& group) {
  char key[kNameLen];
  std::strncpy(key, group.c_str(), kNameLen - 1);
  key[kNameLen - 1] = '\0';
  for (int g = 0; g < kMaxGroups; ++g) {
    const volatile char* n = slot->name[g];
    if (n[0] == '\0') break;
    if (std::strncmp(const_cast<const char*>(n), key, kNameLen) == 0)
      return *reinterpret_cast<const volatile std::uint64_t*>(&slot->entered[g]);
  }
  return 0;
}

/// A rank that entered a collective but stopped polling it (SIGSTOP, a stuck kernel) is
/// still "arrived" by its counter; its heartbeat tells it apart from the ranks waiting.
void beat(double now) {
  Board& b = board();
  if (b.mine) *reinterpret_cast<volatile double*>(&b.mine->heartbeat) = now;
}

}  // namespace

void watchdog_init(const MpiComm& world) {
  Board& b = board();
  b.world = world;
  b.node = world.split_shared();
  MPI_Aint bytes = sizeof(Slot);
  void* base = nullptr;
  MPI_CHECK(MPI_Win_allocate_shared(bytes, 1, MPI_INFO_NULL, b.node.get(), &base, &b.window));
  b.mine = static_cast<Slot*>(base);
  std::memset(b.mine, 0, sizeof(Slot));
  beat(now_seconds());
  for (const auto& [name, id] : b.group_ids) {  // groups used before init
    if (id >= kMaxGroups) continue;
    std::strncpy(b.mine->name[id], name.c_str(), kNameLen - 1);
    b.mine->entered[id] = b.counters[name];
  }
  const int local = b.node.size();
  b.world_rank_of_local.resize(local);
  const int me = world.rank();
  MPI_CHECK(MPI_Allgather(&me, 1, MPI_INT, b.world_rank_of_local.data(), 1, MPI_INT, b.node.get()));
  b.peer_slots.assign(static_cast<std::size_t>(local), nullptr);
  for (int l = 0; l < local; ++l) {
    MPI_Aint size;
    int disp;
    void* ptr = nullptr;
    MPI_CHECK(MPI_Win_shared_query(b.window, l, &size, &disp, &ptr));
    b.peer_slots[static_cast<std::size_t>(l)] = static_cast<const Slot*>(ptr);
  }
  // Host names of all ranks, so that a timeout can say on which node the ranks it cannot
  // inspect run (a node cut off from the network shows up as all of its ranks).
  constexpr int kHostLen = 64;
  char host[kHostLen] = {0};
  gethostname(host, kHostLen - 1);
  std::vector<char> hosts(static_cast<std::size_t>(world.size()) * kHostLen);
  MPI_CHECK(MPI_Allgather(host, kHostLen, MPI_CHAR, hosts.data(), kHostLen, MPI_CHAR, world.get()));
  b.host_of_rank.clear();
  for (int r = 0; r < world.size(); ++r) b.host_of_rank.emplace_back(hosts.data() + static_cast<std::size_t>(r) * kHostLen);
  MPI_CHECK(MPI_Barrier(b.node.get()));
}

namespace {

/// World ranks of the members of `group_comm` (MPI calls: main thread only).
std::vector<int> world_ranks_of(const MpiComm& group_comm) {
  Board& b = board();
  MPI_Group g_group, w_group;
  MPI_Comm_group(group_comm.get(), &g_group);
  MPI_Comm_group(b.world.get(), &w_group);
  const int n = group_comm.size();
  std::vector<int> members(n), world_ranks(n);
  for (int i = 0; i < n; ++i) members[i] = i;
  MPI_Group_translate_ranks(g_group, n, members.data(), w_group, world_ranks.data());
  MPI_Group_free(&g_group);
  MPI_Group_free(&w_group);
  return world_ranks;
}

/// Which members (`world_ranks`) of `group` have not entered collective #`sequence`, and
/// (unless `blocking`) which entered it but stopped polling. Reads the shared board only,
/// no MPI calls, so the blocking-call monitor thread can call it. With `blocking` every
/// member that arrived sits in the same blocking call and publishes no heartbeat either,
/// so only the absent ones are named.
/// `out` (when given) receives the same ranks, with their hosts, for the peers-lost record.
std::string diagnose(const std::string& group, std::uint64_t sequence, const std::vector<int>& world_ranks,
                     double timeout, bool blocking, PeersLost* out = nullptr) {
  Board& b = board();
  std::vector<std::string> absent, stalled, remote;
  const double now = now_seconds();
  const double stall_after = std::min(1.0, 0.5 * timeout);
  auto host_of = [&](int wr) {
    return static_cast<std::size_t>(wr) < b.host_of_rank.size() ? b.host_of_rank[static_cast<std::size_t>(wr)]
                                                                  : std::string("?");
  };
  auto note = [&](bool certain, int wr, const char* why) {
    if (out) (certain ? out->lost : out->unverified).push_back({wr, host_of(wr), why});
  };
  for (int wr : world_ranks) {
    int local = -1;
    for (std::size_t l = 0; l < b.world_rank_of_local.size(); ++l)
      if (b.world_rank_of_local[l] == wr) local = static_cast<int>(l);
    if (local < 0 || static_cast<std::size_t>(local) >= b.peer_slots.size()) {
      remote.push_back(std::to_string(wr));
      note(false, wr, "not inspectable");
      continue;
    }
    const Slot* peer = b.peer_slots[static_cast<std::size_t>(local)];
    const double idle = now - *reinterpret_cast<const volatile double*>(&peer->heartbeat);
    if (entered_by(peer, group) < sequence) {
      absent.push_back(std::to_string(wr));
      note(true, wr, "did not arrive");
    } else if (!blocking && wr != b.world.rank() && idle > stall_after) {
      stalled.push_back(strprintf("%d (idle %.1f s)", wr, idle));
      note(true, wr, "stalled");
    }
  }
  std::vector<std::string> parts;
  if (!absent.empty()) parts.push_back("rank(s) " + join(absent, ", ") + " did not arrive");
  if (!stalled.empty()) parts.push_back("rank(s) " + join(stalled, ", ") + " entered it but stopped progressing (stalled)");
  std::string detail = parts.empty() ? "no node-local member is missing" : join(parts, "; ");
  if (!remote.empty()) {
    // Ranks of other nodes, grouped by host in order of first appearance (a node cut off
    // from the network shows up as all of its ranks).
    std::vector<std::pair<std::string, std::vector<std::string>>> by_host;
    for (const std::string& r : remote) {
      const std::size_t wr = std::stoul(r);
      const std::string h = wr < b.host_of_rank.size() ? b.host_of_rank[wr] : "?";
      auto it = std::find_if(by_host.begin(), by_host.end(), [&](const auto& e) { return e.first == h; });
      if (it == by_host.end()) by_host.push_back({h, {r}});
      else it->second.push_back(r);
    }
    std::vector<std::string> named;
    for (const auto& [h, ranks] : by_host) named.push_back("rank(s) " + join(ranks, ", ") + " on " + h);
    detail += "; on other nodes (not inspectable: unreachable, dead, stalled or slow): " + join(named, "; ");
  }
  return detail;
}

std::string timeout_message(const char* what, const std::string& group, std::uint64_t sequence, double timeout,
                            const std::string& detail) {
  return strprintf("collective watchdog: %s #%llu on the '%s' group did not complete within "
                   "parallel.collective_timeout=%g s: %s",
                   what, static_cast<unsigned long long>(sequence), group.c_str(), timeout, detail.c_str());
}

/// \brief The thread behind WatchedBlockingCall: the calling thread is blocked inside MPI
/// (HDF5's collective MPI-IO) and cannot poll, so this thread waits for the deadline of the
/// armed call and, if the call is still armed then, diagnoses and aborts the job. Started
/// at the first blocking call, stopped by watchdog_finalize.
struct BlockingMonitor {
  std::mutex mutex;
  std::condition_variable cv;
  std::thread thread;
  bool stop = false;
  bool armed = false;
  std::uint64_t generation = 0;  // arming count: a new call is never mistaken for an old one
  std::chrono::steady_clock::time_point deadline;
  std::string what, group;
  std::uint64_t sequence = 0;
  std::vector<int> world_ranks;
  double timeout = 0;

  ~BlockingMonitor() {  // a process that exits without watchdog_finalize
    if (!thread.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    cv.notify_all();
    thread.join();
  }

  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stop) {
      if (!armed) {
        cv.wait(lock);
        continue;
      }
      const std::uint64_t gen = generation;
      if (cv.wait_until(lock, deadline, [&] { return stop || !armed || generation != gen; })) continue;
      PeersLost report;
      const std::string detail = diagnose(group, sequence, world_ranks, timeout, /*blocking=*/true, &report);
      report.message = timeout_message(what.c_str(), group, sequence, timeout, detail);
      report.collective = strprintf("%s #%llu on the '%s' group", what.c_str(), static_cast<unsigned long long>(sequence),
                                    group.c_str());
      lock.unlock();
      peers_lost(report);
    }
  }
};

BlockingMonitor& monitor() {
  static BlockingMonitor m;
  return m;
}

}  // namespace

void watchdog_finalize() {
  BlockingMonitor& m = monitor();
  if (m.thread.joinable()) {
    {
      std::lock_guard<std::mutex> lock(m.mutex);
      m.stop = true;
    }
    m.cv.notify_all();
    m.thread.join();
  }
  Board& b = board();
  if (b.window != MPI_WIN_NULL) MPI_Win_free(&b.window);
  b.mine = nullptr;
  b.peer_slots.clear();
  b.group_ids.clear();
  b.host_of_rank.clear();
  b.node = MpiComm();
  b.world = MpiComm();
}

std::uint64_t watchdog_enter(const std::string& group) {
  Board& b = board();
  const int id = group_id(group);
  beat(now_seconds());
  if (b.mine && id < kMaxGroups) {
    // A plain store is enough: peers only read it after a timeout of seconds.
    auto* slot = reinterpret_cast<volatile std::uint64_t*>(&b.mine->entered[id]);
    *slot = *slot + 1;
    return *slot;
  }
  return ++b.counters[group];
}

void watchdog_leave(const std::string&, std::uint64_t) {}

void watchdog_wait(const char* what, const std::string& group, std::uint64_t sequence,
                   const MpiComm& group_comm, const std::function<bool()>& done) {
  const double timeout = collective_timeout();
  if (timeout <= 0) {
    while (!done()) {
    }
    return;
  }
  const double start = now_seconds();
  int spins = 0;
  while (!done()) {
    if (++spins % 1024 != 0) continue;
    const double now = now_seconds();
    beat(now);
    if (now - start < timeout) {
      if (spins % (1 << 16) == 0) usleep(50);  // long waits: yield the core to peers
      continue;
    }
    // Diagnose: which members of the group have not entered this collective?
    Board& b = board();
    std::string detail;
    PeersLost report;
    const bool on_board = group_id(group) < kMaxGroups;
    if (b.mine && on_board && b.world.valid() && group_comm.valid()) {
      detail = diagnose(group, sequence, world_ranks_of(group_comm), timeout, /*blocking=*/false, &report);
    } else {
      detail = on_board ? "the absent ranks cannot be named (watchdog board not initialised)"
                        : "the absent ranks cannot be named (more than 32 communicator groups)";
    }
    // A collective that does not complete means ranks are gone: the distinct outcome a
    // supervisor recovers from (peers_lost.hpp), not the generic abort.
    report.message = timeout_message(what, group, sequence, timeout, detail);
    report.collective = strprintf("%s #%llu on the '%s' group", what, static_cast<unsigned long long>(sequence),
                                  group.c_str());
    peers_lost(report);
  }
}

WatchedBlockingCall::WatchedBlockingCall(const char* what, const std::string& group, const MpiComm& comm) {
  const std::uint64_t sequence = watchdog_enter(group);
  const double timeout = collective_timeout();
  Board& b = board();
  if (timeout <= 0 || !b.mine || !b.world.valid() || group_id(group) >= kMaxGroups) return;
  // Members are looked up per group name once (an MPI call, main thread).
  static std::map<std::string, std::vector<int>> members;
  auto it = members.find(group);
  if (it == members.end()) it = members.emplace(group, world_ranks_of(comm)).first;
  BlockingMonitor& m = monitor();
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    if (!m.thread.joinable()) {
      m.stop = false;
      m.thread = std::thread([&m] { m.run(); });
    }
    m.armed = true;
    ++m.generation;
    m.deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                        std::chrono::duration<double>(timeout));
    m.what = what;
    m.group = group;
    m.sequence = sequence;
    m.world_ranks = it->second;
    m.timeout = timeout;
  }
  m.cv.notify_all();
  armed_ = true;
}

WatchedBlockingCall::~WatchedBlockingCall() {
  if (!armed_) return;
  BlockingMonitor& m = monitor();
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    m.armed = false;
  }
  m.cv.notify_all();
  beat(now_seconds());
}

void watched_collective(const char* what, const std::string& group, const MpiComm& comm,
                        const std::function<void(MPI_Request*)>& post) {
  const std::uint64_t sequence = watchdog_enter(group);
  MPI_Request request = MPI_REQUEST_NULL;
  post(&request);
  watchdog_wait(what, group, sequence, comm, [&request] {
    int flag = 0;
    MPI_CHECK(MPI_Test(&request, &flag, MPI_STATUS_IGNORE));
    return flag != 0;
  });
  watchdog_leave(group, sequence);
}

}  // namespace meshtrain
