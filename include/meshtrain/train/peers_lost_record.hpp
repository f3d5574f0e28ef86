#pragma once
/// \brief The run's records of lost peers and of recoveries (issue 31).
///
/// - `output.dir/peers_lost.json`, written when the collective watchdog finds ranks gone
///   (comm/peers_lost.hpp), by every rank that finds it (the last rename wins; each is a
///   whole file): who reported, which ranks and hosts were lost (`lost`: node-local ranks
///   seen absent or stalled) or could not be inspected (`unverified`: ranks on other
///   nodes), the collective, the newest complete checkpoint and its step, the time.
/// - `output.dir/recoveries.jsonl`, written by the supervisor (scripts/meshtrain-supervise),
///   one JSON object per recovery; `summary.json` lists them under `recoveries`.

#include <string>

#include "formats/json.hpp"

namespace meshtrain::train {

/// Registers the peers-lost handler that writes `out_dir/peers_lost.json` (naming the
/// newest complete checkpoint of `ckpt_dir`). Call once the run may write in out_dir.
void arm_peers_lost_record(const std::string& out_dir, const std::string& ckpt_dir, int world_rank);

/// The objects of `out_dir/recoveries.jsonl` as a JSON array (empty when there is none);
/// a line that is not a JSON object is left out with a warning.
formats::Json recoveries(const std::string& out_dir);

}  // namespace meshtrain::train
