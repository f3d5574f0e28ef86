#pragma once
/// \brief What a resume must keep. A resume continues one run: the settings that shape its
/// trajectory or its data order (the batch, the optimizer and its schedule, the seed, the
/// training tokens) are recorded in every checkpoint (attribute `run_settings`) and a
/// resume that changes one is refused, naming the key, both values and the way out.
/// Bookkeeping (cadences, output, the mesh and how the global batch is split) may change;
/// doc/checkpoints.md lists both kinds.

#include <string>
#include <utility>
#include <vector>

#include "data/dataset.hpp"
#include "plan/run_setup.hpp"

namespace meshtrain::train {

/// (key, value) pairs, values as text; keys are config keys ("train.seq_len").
using RunSettings = std::vector<std::pair<std::string, std::string>>;

/// The recorded settings of this run: every key a resume must keep, plus train.steps and
/// (a dataset that records one) data.chat_system, which may change (recorded for the notice). `data` is the run's dataset: it is
/// recorded by what it holds (train.bin's length and a CRC-32C of tokens sampled across
/// it), not by its path, so a dataset moved elsewhere is the same dataset.
RunSettings run_settings(const plan::RunSetup& s, const data::Dataset& data);

/// "key = value" lines (the checkpoint attribute), and back.
std::string settings_record(const RunSettings& s);
RunSettings parse_settings_record(const std::string& text);

/// True for the keys of the record a resume may change (train.steps, data.chat_system).
bool may_change_at_resume(const std::string& key);

/// "train.seq_len: 32 in the checkpoint, 16 in this run" for every key that may not
/// change and differs; a key only one side has (a record of another meshtrain version)
/// is not compared.
std::vector<std::string> resume_conflicts(const RunSettings& recorded, const RunSettings& now);

/// The keys that may change and did, in the same form (for a notice).
std::vector<std::string> resume_changes(const RunSettings& recorded, const RunSettings& now);

}  // namespace meshtrain::train
