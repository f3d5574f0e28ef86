#include "staged_output.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "meshtrain/core/error.hpp"
#include "meshtrain/core/file_io.hpp"

namespace meshtrain::data {
namespace fs = std::filesystem;

namespace {

// What a signal handler removes, in plain arrays of C strings it can read safely at any
// moment: a path is copied in full before the count that publishes it is raised. One
// StagedOutput at a time (prepare writes one dataset).
constexpr int kMaxStaged = 16, kMaxDirs = 16;
char g_tmp_paths[kMaxStaged][4096];
char g_dirs[kMaxDirs][4096];                   // the directories created, deepest first
volatile std::sig_atomic_t g_staged = 0;       // published entries of g_tmp_paths
volatile std::sig_atomic_t g_dir_count = 0;    // published entries of g_dirs
volatile std::sig_atomic_t g_active = 0;       // a StagedOutput is live and not committed
struct sigaction g_old_term {}, g_old_int {};

void copy_path(char* to, const std::string& from) {
  const std::size_t n = std::min(from.size(), std::size_t{4095});
  std::memcpy(to, from.data(), n);
  to[n] = '\0';
}

// Removes the staged files (unlink and rmdir are async-signal-safe), then lets the signal do
// what it did before: the previous handler's action, by default ending the process.
void remove_staged_on_signal(int sig) {
  if (g_active) {
    for (int i = 0; i < g_staged; ++i) ::unlink(g_tmp_paths[i]);
    for (int i = 0; i < g_dir_count; ++i) ::rmdir(g_dirs[i]);  // only when empty
    g_active = 0;
  }
  ::sigaction(sig, sig == SIGTERM ? &g_old_term : &g_old_int, nullptr);
  ::raise(sig);
}

}  // namespace

StagedOutput::StagedOutput(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  if (!fs::exists(dir_, ec)) {
    // The directories about to be created, deepest first: removed again on failure.
    fs::path p = fs::absolute(dir_, ec).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();  // a trailing '/'
    for (; p.has_relative_path() && !fs::exists(p, ec); p = p.parent_path()) created_.push_back(p.string());
    fs::create_directories(dir_, ec);
    MESHTRAIN_REQUIRE(!ec, "cannot create the output directory %s: %s", dir_.c_str(), ec.message().c_str());
    created_dir_ = true;
  }
  MESHTRAIN_REQUIRE(fs::is_directory(dir_, ec), "the output %s exists and is not a directory", dir_.c_str());
  MESHTRAIN_REQUIRE(::access(dir_.c_str(), W_OK | X_OK) == 0, "the output directory %s is not writable",
                    dir_.c_str());
  g_staged = 0;
  g_dir_count = 0;
  for (const std::string& d : created_)
    if (g_dir_count < kMaxDirs) {
      copy_path(g_dirs[g_dir_count], d);
      g_dir_count = g_dir_count + 1;
    }
  g_active = 1;
  struct sigaction sa {};
  sa.sa_handler = remove_staged_on_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, &old_term_);
  ::sigaction(SIGINT, &sa, &old_int_);
  g_old_term = old_term_;
  g_old_int = old_int_;
}

StagedOutput::~StagedOutput() {
  g_active = 0;
  ::sigaction(SIGTERM, &old_term_, nullptr);
  ::sigaction(SIGINT, &old_int_, nullptr);
  if (committed_) return;
  std::error_code ec;
  for (const std::string& n : names_) fs::remove(fs::path(dir_) / (n + ".tmp"), ec);
  for (const std::string& d : created_) fs::remove(d, ec);  // removes only an empty directory
}

std::string StagedOutput::stage(const std::string& name) {
  names_.push_back(name);
  const std::string tmp = (fs::path(dir_) / (name + ".tmp")).string();
  if (g_staged < kMaxStaged) {
    copy_path(g_tmp_paths[g_staged], tmp);
    g_staged = g_staged + 1;  // published once the path is complete
  }
  return tmp;
}

void StagedOutput::commit() {
  // Remove the old completion marker first: a crash between renames then leaves a
  // directory without it, which readers reject, rather than a marker over mixed files.
  for (auto it = names_.rbegin(); it != names_.rend(); ++it) {
    std::error_code ec;
    fs::remove(fs::path(dir_) / *it, ec);
  }
  for (const std::string& n : names_) {
    const fs::path from = fs::path(dir_) / (n + ".tmp"), to = fs::path(dir_) / n;
    file_io::rename_durably(from.string(), to.string());
  }
  committed_ = true;
  g_active = 0;  // the dataset is complete: a signal now leaves it
}

}  // namespace meshtrain::data
