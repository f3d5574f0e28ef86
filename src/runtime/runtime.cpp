#include "runtime/runtime.hpp"

#include <fcntl.h>     // open
#include <stdlib.h>    // mkdtemp
#include <sys/file.h>  // flock
#include <sys/stat.h>  // lstat
#include <unistd.h>    // close, getuid

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "core/check.hpp"
#include "core/error.hpp"
#include "core/kokkos_compat.hpp"
#include "core/memory.hpp"

namespace meshtrain {

namespace {

/// True when a launcher (mpirun/mpiexec of Open MPI or MPICH, srun with PMI/PMIx) started
/// this process; false for a plain `meshtrain ...` (an MPI singleton).
bool started_by_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "PMI_FD"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

/// The communicator abort_all_ranks() aborts; set once MPI is initialised.
MPI_Comm g_abort_world = MPI_COMM_NULL;

/// The private session-directory bases are `<TMPDIR>/meshtrain-mpi-<short host>_XXXXXX`, each
/// holding `owner.lock`, locked (flock) by the process it belongs to for as long as it lives.
constexpr std::string_view kSessionDirPrefix = "meshtrain-mpi-";
constexpr const char* kSessionOwnerFile = "/owner.lock";

/// `meshtrain-mpi-<host>_`: this host's short name (as Open MPI names its own session
/// directories; it keeps the paths below short) with every character but letters, digits
/// and '-' replaced by '-', so the '_' ends it and no host's prefix begins another's.
std::string session_dir_prefix() {
  const std::string host = host_name();
  std::string name(kSessionDirPrefix);
  for (const char c : host.substr(0, host.find('.'))) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
    name += keep ? c : '-';
  }
  return name + "_";
}

/// The private Open MPI session-directory base of an isolated singleton; "" when none.
std::string g_singleton_tmpdir;

void remove_singleton_tmpdir() {
  if (g_singleton_tmpdir.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(g_singleton_tmpdir, ec);
  g_singleton_tmpdir.clear();
}

/// Removes the session directories that meshtrain singletons of this host killed before
/// their exit handlers ran (SIGKILL, the OOM killer, a fatal signal) left in `base`. A
/// directory is taken only when its name has this host's `prefix`, it is this user's own
/// (not a symbolic link), it carries the owner file, and the owner's lock can be taken: the
/// kernel releases a flock when its holder dies however it dies, and a lock is seen across
/// PID namespaces that share the directory, where a process-id test would not be. Only this
/// host's: on a shared file system another host's lock may not be seen here (Lustre's
/// `localflock`). A directory without the owner file (one being made, or not meshtrain's)
/// stays.
void remove_abandoned_session_dirs(const std::string& base, const std::string& prefix) {
  std::error_code ec;
  std::filesystem::directory_iterator it(base, ec);
  if (ec) return;
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (ec) return;
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string dir = it->path().string();
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid()) continue;
    const int fd = ::open((dir + kSessionOwnerFile).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) std::filesystem::remove_all(dir, ec);  // its owner is gone
    ::close(fd);
  }
}

/// Marks `dir` as this process's own until it ends: the owner file is locked under a
/// temporary name and then renamed into place, so no other process can find it unlocked.
/// The descriptor stays open (and the lock held) until the process ends. Where the file
/// system has no locks the directory simply carries no owner file: it is removed at exit as
/// before, and never by another process.
void hold_session_dir(const std::string& dir) {
  const std::string tmp = dir + "/owner.lock.new";
  const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0 || ::rename(tmp.c_str(), (dir + kSessionOwnerFile).c_str()) != 0) {
    ::unlink(tmp.c_str());
    ::close(fd);
  }
}

/// A process started without a launcher (`meshtrain eval ...`) is an MPI singleton, and by
/// default Open MPI first forks a runtime daemon (`orted`) for it: about 0.25 s of every
/// `prepare`, `plan`, `eval` or `--version`, for MPI_Comm_spawn, which meshtrain never
/// calls. An isolated singleton skips the daemon -- but every isolated singleton of a host
/// gets the same job id, hence the same session directory, and two at once delete each
/// other's files there (the MPI-IO shared-file-pointer segment of an HDF5 open: a
/// checkpoint save failing while another `meshtrain` exits). So each one gets a private
/// session-directory base, removed at exit -- or, when the process was killed before, by the
/// next singleton to start (remove_abandoned_session_dirs). Settings the user gave either
/// variable win (nothing is changed then); other MPI implementations ignore both.
void isolate_singleton() {
  if (started_by_launcher() || std::getenv("OMPI_MCA_ess_singleton_isolated") != nullptr ||
      std::getenv("OMPI_MCA_orte_tmpdir_base") != nullptr)
    return;
  const char* tmp = std::getenv("TMPDIR");
  const std::string base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  const std::string prefix = session_dir_prefix();
  remove_abandoned_session_dirs(base, prefix);
  std::string pattern = base + "/" + prefix + "XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) return;  // Open MPI's default then: a daemon-backed singleton
  hold_session_dir(pattern);
  g_singleton_tmpdir = pattern;
  std::atexit(remove_singleton_tmpdir);  // exit() after an error as well as a normal return
  setenv("OMPI_MCA_orte_tmpdir_base", g_singleton_tmpdir.c_str(), 1);
  setenv("OMPI_MCA_ess_singleton_isolated", "1", 1);
}

constexpr const char* kIallreduceAlgorithmVar = "OMPI_MCA_coll_libnbc_iallreduce_algorithm";

/// Open MPI's libnbc runs an in-place MPI_Iallreduce (the gradients' all-reduce) as a
/// binomial reduce to rank 0 and a binomial broadcast back: every hop carries the whole
/// buffer, one direction of a link at a time. Rabenseifner's algorithm (libnbc's
/// "rabenseifner", 3) exchanges halves, quarters, ... in both directions at once and moves
/// 2(n-1)/n of the buffer per rank. On the shaped two-host cluster (perf/allreduce_ab.sh,
/// 1 Gbit/s) it made `no_shard` steps 1.3x (1 x 2 x 2) and 1.8x (1 x 4 x 1) faster and
/// `hybrid_shard` 2 x 2 x 1 1.2x (perf/README.md). It needs a commutative operation and at least
/// as many elements as the power of two below the group size; libnbc runs a ring otherwise.
/// A user's own choice of the variable wins; other MPI implementations ignore it.
void choose_all_reduce_algorithm() { setenv(kIallreduceAlgorithmVar, "3", /*overwrite=*/0); }
}  // namespace

MpiAllReduce mpi_all_reduce_algorithm() {
  const char* v = std::getenv(kIallreduceAlgorithmVar);
  const std::string s = v != nullptr ? v : "";
  if (s == "3" || s == "rabenseifner") return MpiAllReduce::HalvingDoubling;
  if (s == "1" || s == "ring") return MpiAllReduce::Ring;
  return MpiAllReduce::BinomialTree;
}

const char* describe(MpiAllReduce a) {
  switch (a) {
    case MpiAllReduce::HalvingDoubling: return "halving-doubling";
    case MpiAllReduce::Ring: return "ring";
    case MpiAllReduce::BinomialTree: break;
  }
  return "binomial tree";
}

Runtime::Runtime(int& argc, char**& argv, MPI_Comm world) {
  isolate_singleton();
  choose_all_reduce_algorithm();
  // FUNNELED: only the main thread calls MPI (OpenMP threads never do).
  MPI_CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &thread_level_));
  g_abort_world = world;
  world_ = MpiComm::duplicate(world);
  error_agreement_ = MpiComm::duplicate(world);
  topology_ = Topology::discover(world_);
  std::string why;
  const int devices = kokkos_visible_devices(&why);
  if constexpr (!kDeviceIsHost) {
    if (devices == 0) {
      // Kokkos would abort inside its initialization with a less direct message.
      std::fprintf(stderr,
                   "[meshtrain] rank %d: this is a GPU build of meshtrain and no CUDA device is usable (%s). "
                   "Run it on a GPU node, or use a CPU build (cmake --preset cpu).\n",
                   topology_.world_rank, why.c_str());
      MPI_Abort(world, kExitAbort);
    }
  }
  device_id_ = devices > 0 ? topology_.local_rank % devices : -1;
  kokkos_initialize(device_id_, -1);
}

void abort_all_ranks(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized && g_abort_world != MPI_COMM_NULL) {
    remove_singleton_tmpdir();  // MPI_Abort may end the process without exit handlers
    MPI_Abort(g_abort_world, code);
  }
}

namespace detail {
std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, static_cast<std::size_t>(len));
}
}  // namespace detail

Runtime::~Runtime() {
  if (Kokkos::is_initialized()) {
    Kokkos::fence();
    MemoryPool::instance().trim();
    Kokkos::finalize();
  }
  world_ = MpiComm();
  error_agreement_ = MpiComm();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
  remove_singleton_tmpdir();
}

std::string mpi_library_version() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(buf, &len);
  std::string s(buf, static_cast<std::size_t>(len));
  const auto nl = s.find_first_of("\n,");
  return nl == std::string::npos ? s : s.substr(0, nl);
}

}  // namespace meshtrain
