#pragma once
/// \brief Start-up checks of the places a run will write, made before it writes anything:
/// a run that cannot write its checkpoints must fail at start-up, not after training every
/// step, and a failed start-up must leave output.dir and checkpoint.dir as they were.

#include <string>
#include <vector>

#include "runtime/mpi_comm.hpp"

namespace meshtrain::train {

/// \brief UserError unless files can be created in `dir` (named `key`, e.g. "output.dir",
/// in the message): when `dir` exists it must be a directory in which a probe file can be
/// created and removed; when it does not exist yet, the same holds for its nearest existing
/// ancestor (where it will be created). Nothing is left behind, nothing is created.
void require_writable_dir(const std::string& key, const std::string& dir);

/// \brief UserError when `path` (a file the run appends to, e.g. output.dir/metrics.jsonl)
/// exists and is not a regular file: a named pipe would block the run at its first record,
/// a directory fail it after the first step. Names `key` and what the path is.
void require_appendable_file(const std::string& key, const std::string& path);

/// \brief UserError unless `path`, a file of results written at the end of a long command
/// (`bench --json`), can be written then (file_io::write_file): not a directory; when it
/// exists, it opens for writing (its content untouched); when it does not, its directory
/// exists and a file can be created there (a probe file, removed at once). Names `option`
/// ("--json") and the path; nothing is written.
void require_writable_file(const std::string& option, const std::string& path);

/// \brief Collective over `world`: UserError (status 2) on every rank unless every rank sees
/// at `dir` the directory rank 0 sees. Rank 0 creates a file with a random token in `dir`
/// (which must exist: created by the run's lock) and syncs it; every rank then reads it
/// back, and rank 0 removes it. Only rank 0 probes and creates the run's directories, but
/// every rank writes its part of each checkpoint there (a collective HDF5 create, the
/// pieces of an asynchronous save), and every rank may write output.dir/peers_lost.json and
/// reads a resumed DPO run's reference values from output.dir: a
/// node-local directory at the same path (/tmp, /scratch) or a relative path resolved
/// against different working directories would otherwise pass start-up and hang the first
/// save until parallel.collective_timeout. The message names `key` (e.g. "checkpoint.dir"),
/// the lowest rank that does not see the file, its host (`host_of_rank`) and how many
/// ranks do not, and the remedy.
void require_same_directory_on_every_rank(const MpiComm& world, const std::vector<std::string>& host_of_rank,
                                          const std::string& key, const std::string& dir);

}  // namespace meshtrain::train
