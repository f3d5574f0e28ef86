#pragma once
/// \brief The run directory's record: the effective config (config.ini), the mesh
/// (mesh.txt), and run.json with the strategy decision and the version of every library.

#include <string>

#include "formats/json.hpp"
#include "runtime/topology.hpp"
#include "plan/run_setup.hpp"

namespace meshtrain::train {

/// Versions of meshtrain and every library it uses, as a JSON object.
formats::Json library_versions();

/// Where a run started: the checkpoint it resumed from and its step (path "" for a fresh start).
struct RunStart {
  std::string resumed_from;
  int step = 0;
};

/// Writes config.ini, mesh.txt and run.json into `dir` (rank 0 only; creates the dir).
/// config.ini is the run's to rerun: checkpoint.resume is written as auto (the app layer's
/// record_ini), and a comment above it says where this run started and what was given.
void write_run_record(const plan::RunSetup& setup, const Topology& topo, const std::string& dir, const RunStart& start = {});

/// record_ini with that comment above `resume = ` in [checkpoint] (config.ini's text after
/// its first line).
std::string record_with_resume_note(const plan::RunSetup& setup, const RunStart& start);

}  // namespace meshtrain::train
