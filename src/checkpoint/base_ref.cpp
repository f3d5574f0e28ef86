#include "base_ref.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "h5.hpp"
#include "comm/collectives.hpp"
#include "core/check.hpp"
#include "core/error.hpp"

namespace meshtrain::checkpoint {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPath = "base_weights";
constexpr const char* kBytes = "base_weights_bytes";
constexpr const char* kMtime = "base_weights_mtime_ns";
constexpr const char* kSeed = "base_weights_seed";
// A random base is a function of the seed and model.init_std: without the std a merge or an
// eval under another init_std would rebuild another base.
constexpr const char* kInitStd = "base_weights_init_std";

/// Modification time in ns since the Unix epoch (stat: std::filesystem's clock has its own
/// epoch in C++17); 0 when it cannot be read.
std::int64_t mtime_ns(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return 0;
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

}  // namespace

BaseRef describe_base(const std::string& path) {
  std::error_code ec;
  BaseRef ref;
  ref.path = fs::absolute(path, ec).lexically_normal().string();
  if (fs::is_directory(path, ec)) {
    // A Hugging Face directory: its weight files (config and tokenizer files do not matter).
    for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) {
      if (!e.is_regular_file() || e.path().extension() != ".safetensors") continue;
      ref.bytes += e.file_size(ec);
      ref.mtime_ns = std::max(ref.mtime_ns, mtime_ns(e.path()));
    }
  } else {
    ref.bytes = fs::file_size(path, ec);
    ref.mtime_ns = mtime_ns(path);
  }
  return ref;
}

void check_base(const BaseRef& ref, const std::string& checkpoint) {
  if (ref.path.empty()) return;  // random base: a pure function of the seed
  std::error_code ec;
  MESHTRAIN_REQUIRE(fs::exists(ref.path, ec),
                    "checkpoint %s holds LoRA adapters only; its base weights %s no longer exist (moved or "
                    "deleted?): put them back at that path",
                    checkpoint.c_str(), ref.path.c_str());
  const BaseRef now = describe_base(ref.path);
  MESHTRAIN_REQUIRE(now.bytes == ref.bytes && now.mtime_ns == ref.mtime_ns,
                    "checkpoint %s holds LoRA adapters only; its base weights %s changed since it was written (%llu "
                    "bytes modified %s then, %llu bytes modified %s now): restore the original base weights at "
                    "that path",
                    checkpoint.c_str(), ref.path.c_str(), static_cast<unsigned long long>(ref.bytes),
                    utc_time_text(ref.mtime_ns).c_str(), static_cast<unsigned long long>(now.bytes),
                    utc_time_text(now.mtime_ns).c_str());
}

void write_base_ref(hid_t file, const BaseRef& ref) {
  h5::write_attr(file, kPath, ref.path);
  h5::write_attr(file, kBytes, static_cast<std::uint64_t>(ref.bytes));
  h5::write_attr(file, kMtime, static_cast<std::int64_t>(ref.mtime_ns));
  h5::write_attr(file, kSeed, static_cast<std::uint64_t>(ref.seed));
  h5::write_attr(file, kInitStd, ref.init_std);
}

std::optional<BaseRef> read_base_ref(hid_t file) {
  h5::QuietErrors quiet;
  const auto path = h5::read_string_attr(file, kPath);
  if (!path) return std::nullopt;
  BaseRef ref;
  ref.path = *path;
  ref.bytes = h5::read_uint_attr(file, kBytes).value_or(0);
  ref.mtime_ns = h5::read_int_attr(file, kMtime).value_or(0);
  ref.seed = h5::read_uint_attr(file, kSeed).value_or(0);
  ref.init_std = h5::read_double_attr(file, kInitStd).value_or(0);
  return ref;
}

void broadcast(const MpiComm& comm, BaseRef& ref) {
  ref.bytes = broadcast_value(comm, ref.bytes);
  ref.mtime_ns = broadcast_value(comm, ref.mtime_ns);
  ref.seed = broadcast_value(comm, ref.seed);
  ref.init_std = broadcast_value(comm, ref.init_std);
  ref.path = broadcast_string(comm, ref.path);
}

}  // namespace meshtrain::checkpoint
