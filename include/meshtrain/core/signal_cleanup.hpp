#pragma once
/// \brief Removal of a command's partial output when the scheduler cancels it (SIGTERM),
/// the user presses Ctrl-C (SIGINT), the terminal goes away (SIGHUP) or the reader of its
/// output does (SIGPIPE, `| head`): while a `SignalCleanup` is live, each of these signals
/// first removes the paths registered with it, then ends the process as the signal would
/// have (the previous action is restored and the signal raised again, so the exit status is
/// 128 + signal). A signal the process ignores when it is created stays ignored. `prepare`'s
/// staged files, `convert`'s staging directory and `bench io`'s private directory use it.
///
/// The handler may run at any instruction, so what it removes is kept in fixed arrays of
/// C strings, each published (its count raised) only once it is complete, and it uses only
/// async-signal-safe system calls: unlink, rmdir, and for a directory of files open +
/// getdents64 + unlinkat. One SignalCleanup is live at a time (a command stages one output).
/// A signal that reaches several threads at once (`timeout` sends it to the child and to its
/// process group) runs the removal once: the first handler claims it, the others wait for it
/// to finish before the process ends.
/// Destroying it (or `disarm`) restores the previous handlers and removes nothing: normal
/// exits clean up through their own destructors.

#include <csignal>
#include <string>

namespace meshtrain {

class SignalCleanup {
 public:
  SignalCleanup();
  ~SignalCleanup();
  SignalCleanup(const SignalCleanup&) = delete;
  SignalCleanup& operator=(const SignalCleanup&) = delete;

  /// On a signal: unlink `path` (a file).
  void add_file(const std::string& path);
  /// On a signal: remove the files directly inside `dir`, then `dir` (the directory of an
  /// export being staged: it holds files only; a subdirectory would stay, and so `dir`).
  void add_directory_of_files(const std::string& dir);
  /// On a signal: rmdir `dir` if it is empty by then (a directory a command created for its
  /// output). Directories are removed in the order added, after every file: add deepest first.
  void add_empty_directory(const std::string& dir);
  /// Nothing is removed on a signal any more (the output is complete); the handlers stay
  /// until destruction, so a signal now ends the process with the output in place.
  void disarm();

 private:
  struct sigaction old_[4] {};  ///< SIGTERM, SIGINT, SIGHUP, SIGPIPE (signal_cleanup.cpp's kSignals)
};

}  // namespace meshtrain
