#pragma once
/// \brief One run per directory: an advisory lock on `<dir>/.meshtrain.lock`.
///
/// Two `train` runs into one output.dir (or one checkpoint.dir) corrupt each other: the
/// second resumes from the first's in-flight checkpoint, truncates its metrics.jsonl, and
/// each one's retention deletes the other's files. Rank 0 of a run therefore takes an
/// exclusive flock(2) on the lock file before it reads or writes anything there and holds
/// it until the run ends; a second run is refused (UserError, exit 2) with the holder's
/// host and pid, which the holder writes into the file.
///
/// The lock is the kernel's, not the file's: it dies with the process, so the file left
/// behind by a killed run (kill -9, a node that went down) never blocks the next run. A run
/// that ends removes the file while it still holds the lock; a run that took the lock
/// checks that the file it locked is still the one at the path (else it retries), so the
/// removal cannot let two runs hold locks on different files. On NFS, Linux implements
/// flock with the server's byte-range locks, so runs on different hosts exclude each
/// other too; a file system without locks gets a warning, and the run goes on unlocked.

#include <string>
#include <vector>

namespace meshtrain::train {

class RunDirLock {
 public:
  /// The lock file's name inside the locked directory.
  static constexpr const char* kFileName = ".meshtrain.lock";

  /// Creates `dir` (and missing parents) and locks it. UserError naming `key` (e.g.
  /// "output.dir"), the directory, and the holder's host and pid when another process
  /// holds the lock; UserError when the directory or the lock file cannot be created.
  RunDirLock(const std::string& key, const std::string& dir);
  /// Removes the lock file (still holding the lock), then releases it. Directories this
  /// lock created are removed again if they are still empty and keep_directories() was
  /// not called: a run refused at start-up leaves no empty output.dir behind.
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

  /// The run has started writing: the directories it created are its own from now on.
  void keep_directories() { keep_dirs_ = true; }
  /// The lock file's path.
  const std::string& path() const { return path_; }
  /// Whether the lock is held (false on a file system without locks: a warning was given).
  bool held() const { return fd_ >= 0; }

 private:
  std::string path_;
  int fd_ = -1;
  std::vector<std::string> created_;  ///< directories this lock created, deepest first
  bool keep_dirs_ = false;
};

/// "host H pid P" of the lock file at `path` as its holder wrote it ("" when unreadable or
/// empty: a holder that has not written it yet).
std::string run_lock_holder(const std::string& path);

}  // namespace meshtrain::train
