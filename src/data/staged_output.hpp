#pragma once
// All-or-nothing output files: each is written to NAME.tmp and renamed into place by
// commit(); until then the destructor removes the temporaries (and the directory when it
// created it and left it empty), and so does a SIGTERM, SIGINT, SIGHUP or SIGPIPE (the
// scheduler's cancel, Ctrl-C: core/signal_cleanup.hpp), which then ends the process as the
// signal would have. It writes only the files of a meshtrain dataset, and replaces only such
// files that meshtrain wrote. Private to src/data.

#include <string>
#include <vector>

#include "core/signal_cleanup.hpp"

namespace meshtrain::data {

/// True for the name of a file `meshtrain prepare` writes into a dataset directory
/// (meta.json, train/val .bin/.mask/.docs), also staged (NAME.tmp).
bool is_dataset_file_name(const std::string& name);

class StagedOutput {
 public:
  /// Creates `dir` (and parents) when missing; UserError when it cannot be created or written,
  /// and when it holds a file of a dataset's name that meshtrain did not write (another
  /// tool's train.bin): one message naming every such file, before anything is written.
  /// Until commit() the directories it created are removed again when they are empty.
  explicit StagedOutput(std::string dir);
  ~StagedOutput();
  StagedOutput(const StagedOutput&) = delete;
  StagedOutput& operator=(const StagedOutput&) = delete;

  /// The temporary path for the final file `name` (dir/name.tmp; is_dataset_file_name),
  /// registered for commit.
  std::string stage(const std::string& name);
  /// Renames every staged file into place, in the order staged (so the last one staged
  /// appears last and can mark completion). Final names are removed first, last one first.
  void commit();

 private:
  std::string dir_;
  bool created_dir_ = false;
  std::vector<std::string> created_;  ///< directories this object created, deepest first
  bool committed_ = false;
  std::vector<std::string> names_;
  SignalCleanup on_signal_;  ///< a SIGTERM/SIGINT/SIGHUP/SIGPIPE before commit() removes the same files and directories
};

}  // namespace meshtrain::data
