#pragma once
/// \brief A run that would write its checkpoints among another run's.
///
/// A run saves `step_XXXXXXXX.h5` into checkpoint.dir, replaces `latest` there and deletes
/// all but the newest checkpoint.keep files of that directory. A run that does not continue
/// the checkpoints already there -- checkpoint.resume=none, or a resume from a checkpoint
/// outside the directory -- would overwrite them step by step, its retention would delete
/// the earlier run's files (or the earlier run's higher steps would outlive its own), and a
/// later resume could load either run's. Such a start is refused once the run's inputs are
/// validated, before anything is written, unless checkpoint.overwrite=true asks for the
/// earlier checkpoints to be deleted first.

#include <string>
#include <vector>

#include "plan/run_spec.hpp"

namespace meshtrain::train {

/// The earlier run's checkpoint files in checkpoint.dir that this run would not continue.
struct EarlierCheckpoints {
  std::vector<std::string> complete;  ///< step_*.h5, oldest first
  std::vector<std::string> others;    ///< `latest` and the .tmp files of unfinished saves
  bool rewind = false;                ///< checkpoint.resume=PATH is inside cc.dir: the run's own older step
  bool empty() const { return complete.empty(); }
};

/// What `cc` leaves of another run in cc.dir: nothing for checkpoint.resume=auto and for a
/// resume from a checkpoint inside cc.dir (a rewind within the run), nothing when cc.dir
/// holds no complete checkpoint (a stale `latest` or .tmp alone is replaced by the first
/// save). Reads the directory only.
EarlierCheckpoints earlier_checkpoints(const plan::CheckpointSpec& cc);

/// The refusal of a start over `earlier` (one UserError text naming the directory, the
/// checkpoints and the three ways on); "" when `earlier` is empty or checkpoint.overwrite
/// is set -- unless checkpoint.init_from, or `lora_base` (the frozen base a resumed LoRA
/// checkpoint names, BaseRef::path; "" for none), is one of the files (or the directory) it
/// would delete.
std::string earlier_run_refusal(const plan::CheckpointSpec& cc, const EarlierCheckpoints& earlier,
                                const std::string& lora_base = "");

/// checkpoint.overwrite: deletes `earlier`'s files (complete checkpoints first, then
/// `latest` and the temporaries) and returns a one-line account for the log. A file that
/// cannot be deleted is a UserError naming it (the run has not written anything yet).
std::string remove_earlier_checkpoints(const plan::CheckpointSpec& cc, const EarlierCheckpoints& earlier);

}  // namespace meshtrain::train
