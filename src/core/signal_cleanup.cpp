#include "core/signal_cleanup.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace meshtrain {
namespace {

enum Kind : int { kFile = 0, kDirectoryOfFiles = 1, kEmptyDirectory = 2 };
constexpr int kMaxPaths = 32;
constexpr std::size_t kMaxPath = 4096;

char g_paths[kMaxPaths][kMaxPath];
int g_kinds[kMaxPaths];
// Published entries. The handler may run on another thread (a process-directed signal goes
// to any thread that does not block it, e.g. an MPI progress thread), and the compiler may
// move plain stores past a volatile one: the count is stored with release after the entry
// is written and loaded with acquire, so a handler never reads a half-written path.
std::atomic<int> g_count{0};
// kArmed: a live SignalCleanup removes its paths on a signal; kCleaning: a handler is removing
// them; kIdle: disarmed, or done. Lock-free atomics are async-signal-safe.
enum State : int { kIdle = 0, kArmed = 1, kCleaning = 2 };
std::atomic<int> g_state{kIdle};
std::atomic<bool> g_live{false};  // a SignalCleanup exists (one at a time)
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free,
              "the handler's flags must be lock-free to be async-signal-safe");
// The signals that end a command it should clean up after (signal_cleanup.hpp), and the
// actions they had before, restored before the signal is raised again.
constexpr int kSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGPIPE};
constexpr int kNumSignals = sizeof kSignals / sizeof kSignals[0];
struct sigaction g_old[kNumSignals];

// linux_dirent64 as getdents64(2) fills it.
struct Dirent64 {
  ino64_t d_ino;
  off64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[1];
};

void remove_files_in(const char* dir) {
  const int fd = ::open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  alignas(8) char buf[8192];
  for (;;) {
    const long n = ::syscall(SYS_getdents64, fd, buf, sizeof buf);
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      const auto* d = reinterpret_cast<const Dirent64*>(buf + off);
      off += d->d_reclen;
      const char* name = d->d_name;
      if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) continue;
      ::unlinkat(fd, name, 0);  // a subdirectory fails here and stays
    }
  }
  ::close(fd);
}

void clean_up_on_signal(int sig) {
  // The handler returns before the process ends: `sig` is blocked while it runs, so the
  // raise below only marks it pending. The interrupted code must not see the errno that
  // unlink/rmdir left (ThreadSanitizer: "signal handler spoils errno").
  const int saved_errno = errno;
  // A process-directed signal may reach several threads at once (`timeout` sends it to the
  // child and again to its process group): only the first handler removes the paths, and
  // the others wait until it is done before ending the process, which would otherwise cut
  // the removal short (a staged file left behind under load).
  int expected = kArmed;
  if (!g_state.compare_exchange_strong(expected, kCleaning)) {
    const timespec pause{0, 1000000};  // 1 ms; nanosleep is async-signal-safe
    while (g_state.load() == kCleaning) ::nanosleep(&pause, nullptr);
  } else {
    const int n = g_count.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i)
      if (g_kinds[i] == kFile) ::unlink(g_paths[i]);
    for (int i = 0; i < n; ++i)
      if (g_kinds[i] == kDirectoryOfFiles) {
        remove_files_in(g_paths[i]);
        ::rmdir(g_paths[i]);
      }
    for (int i = 0; i < n; ++i)
      if (g_kinds[i] == kEmptyDirectory) ::rmdir(g_paths[i]);  // fails unless empty
    g_state.store(kIdle);
  }
  for (int i = 0; i < kNumSignals; ++i)
    if (kSignals[i] == sig) ::sigaction(sig, &g_old[i], nullptr);
  ::raise(sig);
  errno = saved_errno;
}

void add(int kind, const std::string& path) {
  MESHTRAIN_ASSERT(path.size() < kMaxPath, "SignalCleanup: path of %zu bytes", path.size());
  const int i = g_count.load(std::memory_order_relaxed);  // only this thread adds
  if (i >= kMaxPaths) return;  // more than a command stages: those stay on a signal
  std::memcpy(g_paths[i], path.c_str(), path.size() + 1);
  g_kinds[i] = kind;
  g_count.store(i + 1, std::memory_order_release);  // published once the entry is complete
}

}  // namespace

SignalCleanup::SignalCleanup() {
  MESHTRAIN_ASSERT(!g_live.load(), "SignalCleanup: one at a time");
  g_live.store(true);
  g_count.store(0);
  g_state.store(kArmed);
  struct sigaction sa {};
  sa.sa_handler = clean_up_on_signal;
  sigemptyset(&sa.sa_mask);
  static_assert(sizeof old_ / sizeof old_[0] == kNumSignals, "one saved action per signal");
  for (int i = 0; i < kNumSignals; ++i) {
    ::sigaction(kSignals[i], &sa, &old_[i]);
    // A signal the process ignores stays ignored (a background job of a non-interactive
    // shell has SIGINT ignored, nohup SIGHUP): removing the output and then not ending
    // would leave the command running without its files.
    if (old_[i].sa_handler == SIG_IGN) ::sigaction(kSignals[i], &old_[i], nullptr);
    g_old[i] = old_[i];
  }
}

SignalCleanup::~SignalCleanup() {
  g_state.store(kIdle);
  for (int i = 0; i < kNumSignals; ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
  g_count.store(0);
  g_live.store(false);
}

void SignalCleanup::add_file(const std::string& path) { add(kFile, path); }
void SignalCleanup::add_directory_of_files(const std::string& dir) { add(kDirectoryOfFiles, dir); }
void SignalCleanup::add_empty_directory(const std::string& dir) { add(kEmptyDirectory, dir); }
void SignalCleanup::disarm() {
  int expected = kArmed;
  g_state.compare_exchange_strong(expected, kIdle);  // a removal under way finishes first
}

}  // namespace meshtrain
