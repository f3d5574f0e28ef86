#pragma once
/// \brief Device-timed intervals of the communication path, accounted once they have
/// happened and attributed to the step that issued them.
///
/// On GPUs the host issues a step's work long before the device runs it, so the time a
/// collective took (its comm-stream interval, "busy") and the time the compute stream sat
/// waiting for one ("exposed": an event recorded on the compute stream just before its wait
/// on the collective's completion event, another just after) are known only later. Each
/// interval is added here in issue order with the tag of the step that issued it
/// (CommStats::tag); `drain` accounts every interval that has completed, in issue order,
/// stopping at the first one still pending, and never blocks. The trainer reads a step's
/// totals one step late (train/step.hpp, StepRunner::collect), when the step's last event
/// has completed and with it every interval the step issued.
///
/// The events themselves belong to the backend (comm/cuda/nccl_communicator.cpp); the
/// ledger sees them through `Clock`, so the bookkeeping is tested on the CPU with a fake
/// clock (tests/comm/test_interval_ledger.cpp).

#include <cstdint>
#include <deque>
#include <map>

namespace meshtrain {

/// Seconds of one step's device-timed communication.
struct DeviceCommTimes {
  double busy = 0;     ///< comm-stream time of its collectives
  double exposed = 0;  ///< compute-stream time spent waiting for them
};

class IntervalLedger {
 public:
  enum class Kind { Busy, Exposed };

  /// How the ledger reads an interval (a pair of events) named by the backend's id.
  class Clock {
   public:
    virtual ~Clock() = default;
    /// The interval's end has happened (a query; never blocks).
    virtual bool done(int id) = 0;
    /// Its length in seconds (called once, after done(id)).
    virtual double seconds(int id) = 0;
    /// The ledger is finished with it: its events may be reused.
    virtual void recycle(int id) = 0;
  };

  /// Interval `id`, issued now (after every interval added before it) by step `tag`.
  void add(int id, Kind kind, std::uint64_t tag);
  /// Accounts the completed intervals in issue order into `out` (per tag), stopping at the
  /// first pending one. Returns the seconds accounted (both kinds).
  double drain(Clock& clock, std::map<std::uint64_t, DeviceCommTimes>& out);
  /// Intervals added and not yet accounted.
  std::size_t pending() const { return queue_.size(); }
  /// Oldest pending interval's tag (meaningless when pending() == 0).
  std::uint64_t oldest_tag() const { return queue_.front().tag; }

 private:
  struct Entry {
    int id;
    Kind kind;
    std::uint64_t tag;
  };
  std::deque<Entry> queue_;
};

}  // namespace meshtrain
