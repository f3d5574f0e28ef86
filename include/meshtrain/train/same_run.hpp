#pragma once
/// \brief Every rank of a run must run the same configuration on the same data. Nothing in
/// the launch guarantees it: an MPMD line (`mpirun ... : ... --train.lr=...`), a per-node
/// copy of the configuration file, or a node-local copy of the dataset that is stale on one
/// node all start fine, and the ranks then train something no single configuration
/// describes (each FSDP shard with its own learning rate, each data-parallel rank on its
/// own corpus) while config.ini and the checkpoints record rank 0's. Start-up compares a
/// CRC-32C of each rank's resolved settings and dataset identity and refuses a difference.

#include <string>
#include <vector>

#include "runtime/mpi_comm.hpp"
#include "train/resume_settings.hpp"

namespace meshtrain::train {

/// Every `section.key = value` of `config_ini` (the effective configuration as config.ini
/// is written), its comments and output.log_level / output.log_all_ranks left out (below).
RunSettings config_settings(const std::string& config_ini);

/// What is compared across the ranks: every `section.key = value` of `config_ini` (the
/// effective configuration as config.ini is written; its comments, which only explain
/// resolved values, and output.log_level / output.log_all_ranks, which change only what a
/// rank prints, left out), then `dataset_identity` (resume_settings: train.bin's length and
/// a CRC-32C of tokens sampled across it) under the key "data.dir contents".
RunSettings compared_settings(const std::string& config_ini, const std::string& dataset_identity);

/// Collective over `world`: returns when `mine` is the same on every rank; otherwise every
/// rank throws the same UserError (status 2) naming the ranks whose settings differ from
/// rank 0's, and for the lowest of them the first differing key with both values and hosts
/// (`host_of_rank`). One 4-byte broadcast and one all-reduce when they agree.
void require_same_run_on_every_rank(const MpiComm& world, const std::vector<std::string>& host_of_rank,
                                    const RunSettings& mine);

/// As require_same_run_on_every_rank, for a command that reads no dataset (`bench`): the
/// message says "the same settings" and names the launch line and the configuration file.
void require_same_settings_on_every_rank(const MpiComm& world, const std::vector<std::string>& host_of_rank,
                                         const RunSettings& mine);

}  // namespace meshtrain::train
