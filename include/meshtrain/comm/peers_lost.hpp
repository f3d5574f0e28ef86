#pragma once
/// \brief The "peers lost" outcome (issue 31): the collective watchdog found ranks that no
/// longer take part (dead, cut off, stalled), so the job cannot go on with this set of
/// ranks, but nothing is wrong with the input or the code. Every rank that finds it
/// calls `peers_lost`: the registered handler writes the run's record of it
/// (train/peers_lost_record.hpp: `output.dir/peers_lost.json`), then the job ends with
/// `kExitPeersLost`, which a supervisor (scripts/meshtrain-supervise) tells apart from bad
/// input (2), an abort (3), an I/O error (74) and a preemption (75). Nothing is saved:
/// the newest complete checkpoint stays the newest.

#include <string>
#include <vector>

namespace meshtrain {

/// Exit status of a job that lost ranks (documented in doc/batch.md). Chosen next to
/// EX_TEMPFAIL (75): "try again", but on fewer hosts.
inline constexpr int kExitPeersLost = 76;

/// One rank as the watchdog names it.
struct LostRank {
  int rank = -1;
  std::string host;
  std::string why;  ///< "did not arrive", "stalled", "not inspectable" (on another node)
};

/// What the watchdog knew when it gave up.
struct PeersLost {
  std::string collective;            ///< e.g. "all_reduce #46 on the 'world' group"
  std::vector<LostRank> lost;        ///< node-local ranks seen absent or stalled: certainly lost
  std::vector<LostRank> unverified;  ///< ranks on other nodes: lost, slow or cut off (cannot be told)
  std::string message;               ///< the watchdog's one-line message
};

/// Called once, on the thread that detects the loss (the main thread, or the watchdog's
/// monitor thread during a blocking HDF5 call), before the job ends. Must not call MPI.
using PeersLostHandler = void (*)(const PeersLost&);
void set_peers_lost_handler(PeersLostHandler handler);

/// Runs the handler (once per process) and ends the whole job with kExitPeersLost after
/// printing the message. Never returns.
[[noreturn]] void peers_lost(const PeersLost& report);

}  // namespace meshtrain
