#include "comm/peers_lost.hpp"

#include <atomic>

#include "core/error.hpp"

namespace meshtrain {
namespace {

std::atomic<PeersLostHandler> g_handler{nullptr};
std::atomic<bool> g_reported{false};

}  // namespace

void set_peers_lost_handler(PeersLostHandler handler) { g_handler.store(handler); }

void peers_lost(const PeersLost& report) {
  // The main thread and the monitor thread can both time out at once; one record is enough.
  if (!g_reported.exchange(true)) {
    if (PeersLostHandler h = g_handler.load()) h(report);
  }
  abort_job(report.message, kExitPeersLost);
}

}  // namespace meshtrain
