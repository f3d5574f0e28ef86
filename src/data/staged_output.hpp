#pragma once
// All-or-nothing output files: each is written to NAME.tmp and renamed into place by
// commit(); until then the destructor removes the temporaries (and the directory when it
// created it and left it empty). Private to src/data.

#include <string>
#include <vector>

namespace meshtrain::data {

class StagedOutput {
 public:
  /// Creates `dir` (and parents) when missing; UserError when it cannot be created or written.
  explicit StagedOutput(std::string dir);
  ~StagedOutput();
  StagedOutput(const StagedOutput&) = delete;
  StagedOutput& operator=(const StagedOutput&) = delete;

  /// The temporary path for the final file `name` (dir/name.tmp), registered for commit.
  std::string stage(const std::string& name);
  /// Renames every staged file into place, in the order staged (so the last one staged
  /// appears last and can mark completion). Final names are removed first, last one first.
  void commit();

 private:
  std::string dir_;
  bool created_dir_ = false;
  bool committed_ = false;
  std::vector<std::string> names_;
};

}  // namespace meshtrain::data
