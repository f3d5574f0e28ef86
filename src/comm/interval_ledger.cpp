#include "comm/interval_ledger.hpp"

namespace meshtrain {

void IntervalLedger::add(int id, Kind kind, std::uint64_t tag) { queue_.push_back({id, kind, tag}); }

double IntervalLedger::drain(Clock& clock, std::map<std::uint64_t, DeviceCommTimes>& out) {
  double total = 0;
  while (!queue_.empty()) {
    const Entry e = queue_.front();
    if (!clock.done(e.id)) break;
    const double s = clock.seconds(e.id);
    DeviceCommTimes& t = out[e.tag];
    (e.kind == Kind::Busy ? t.busy : t.exposed) += s;
    total += s;
    clock.recycle(e.id);
    queue_.pop_front();
  }
  return total;
}

}  // namespace meshtrain
