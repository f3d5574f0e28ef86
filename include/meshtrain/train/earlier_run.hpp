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

/// \brief output.dir's record (run.json, config.ini, metrics.jsonl, summary.json) of a run
/// whose checkpoints are in another directory than this run's checkpoint.dir.
///
/// The record is what describes those checkpoints (its config.ini reruns them); a run that
/// writes its own record over it without continuing that run would leave them described by
/// nothing, and `train output.dir/config.ini` would continue the wrong run. run.json names
/// the directory (`checkpoint_dir`, absolute); a record written before it is not checked.
struct EarlierRecord {
  std::string checkpoint_dir;        ///< the other run's checkpoint.dir, absolute
  std::vector<std::string> complete;  ///< its step_*.h5, oldest first
  bool empty() const { return complete.empty(); }
};

/// The record in `out_dir` of a run whose checkpoints lie in another directory than
/// cc.dir, when that directory still holds checkpoints. Reads only.
EarlierRecord earlier_record(const std::string& out_dir, const plan::CheckpointSpec& cc);

/// Whether this run's record would replace `record`'s: not when `resumed_from` (the
/// checkpoint this run resumed, "" for none) lies in the record's directory (that run,
/// continued with its checkpoints now saved to cc.dir) or in cc.dir (a run continued there,
/// such as a copy of the run's directories: the record is that run's own).
bool replaces_record(const plan::CheckpointSpec& cc, const EarlierRecord& record, const std::string& resumed_from);

/// The refusal of a start that replaces `record` (one UserError text naming output.dir, the
/// other run's checkpoints and the ways on); "" when it does not or checkpoint.overwrite is set.
std::string earlier_record_refusal(const std::string& out_dir, const plan::CheckpointSpec& cc,
                                   const EarlierRecord& record, const std::string& resumed_from);

/// The warning for checkpoint.overwrite=true that has nothing to replace, "" otherwise:
/// with checkpoint.resume=auto (the run continues checkpoint.dir's checkpoints, or there are
/// none) or a resume of the directory's own older step (a rewind), when `earlier` is empty
/// and no other run's record is replaced (`replaces`, replaces_record). resume=none or a
/// PATH outside into an empty directory says nothing: that is overwrite's normal use.
std::string overwrite_unused(const plan::CheckpointSpec& cc, const EarlierCheckpoints& earlier, bool replaces);

/// A rewind (checkpoint.resume=PATH, a checkpoint of cc.dir, of step `resumed_step`): the
/// directory's checkpoints of later steps are the abandoned continuation, whose
/// metrics.jsonl lines the resume dropped too. `latest` is first made to name the resumed
/// checkpoint (removed when that file's name is not a step_*.h5 one), then they are deleted:
/// checkpoint.keep then counts this run's checkpoints alone (a higher abandoned step would
/// have outlived them), and a resume -- auto, a requeued job -- continues this run, never the
/// abandoned one. Returns a one-line account for the log ("" when no step is after it). A
/// file that cannot be deleted is a UserError naming it (the run has written nothing yet),
/// and so is `lora_base` (the frozen base the resumed LoRA checkpoint names, "" for none)
/// among the files, before anything is deleted.
std::string remove_abandoned_steps(const plan::CheckpointSpec& cc, const std::string& resumed_from, int resumed_step,
                                   const std::string& lora_base = "");

/// checkpoint.overwrite: deletes `earlier`'s files (complete checkpoints first, then
/// `latest` and the temporaries) and returns a one-line account for the log. A file that
/// cannot be deleted is a UserError naming it (the run has not written anything yet).
std::string remove_earlier_checkpoints(const plan::CheckpointSpec& cc, const EarlierCheckpoints& earlier);

}  // namespace meshtrain::train
