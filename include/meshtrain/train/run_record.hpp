#pragma once
/// \brief The run directory's record: the effective config (config.ini), the mesh
/// (mesh.txt), and run.json with the strategy decision and the version of every library.

#include <string>

#include "meshtrain/runtime/topology.hpp"
#include "meshtrain/train/run_setup.hpp"

namespace meshtrain::train {

/// Versions of meshtrain and every library it uses, as a JSON object.
std::string library_versions_json();

/// Writes config.ini, mesh.txt and run.json into `dir` (rank 0 only; creates the dir).
void write_run_record(const RunSetup& setup, const Topology& topo, const std::string& dir);

}  // namespace meshtrain::train
