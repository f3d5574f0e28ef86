// What a resume reads of a checkpoint's run before its load: the run-settings record (root
// attribute `run_settings`) and the resolved shape (stored_choices), both written by save.cpp.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "h5.hpp"
#include "checkpoint/checkpoint.hpp"
#include "comm/agree.hpp"
#include "comm/collectives.hpp"

namespace meshtrain::checkpoint {

namespace {

/// Runs `read` on checkpoint `path` opened serially, when it is a file HDF5 recognises and
/// opens; a damaged one is left to load()'s validation, which names the problem. HDF5's
/// error stack stays quiet throughout.
template <class Read>
void read_if_readable(const std::string& path, Read&& read) {
  h5::QuietErrors quiet;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec) || H5Fis_hdf5(path.c_str()) <= 0) return;
  h5::Handle f = h5::file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, h5::serial_fapl().get()));
  if (f.valid()) read(f.get());
}

/// The root attributes of a StoredChoices, as int64 in this order (an array to broadcast).
constexpr const char* kChoiceAttrs[] = {"world_size", "ranks_per_node", "mesh_dp_replicate", "mesh_dp_shard",
                                        "mesh_tp",    "micro_batch",    "activation_checkpointing"};
constexpr int kChoiceInts = sizeof(kChoiceAttrs) / sizeof(kChoiceAttrs[0]);

}  // namespace

StoredRunSettings stored_run_settings(const MpiComm& comm, const std::string& path) {
  StoredRunSettings out;
  if (comm.rank() == 0)
    read_if_readable(path, [&](hid_t f) {
      out.readable = true;
      if (const auto text = h5::read_string_attr(f, "run_settings")) {
        out.recorded = true;
        out.text = *text;
      }
      // A window length meshtrain can run (config.cpp bounds train.seq_len by 2^22).
      if (const auto t = h5::read_int_attr(f, "seq_len"); t && *t >= 1 && *t <= (1 << 22))
        out.seq_len = static_cast<int>(*t);
    });
  out.readable = broadcast_value(comm, out.readable);
  out.recorded = broadcast_value(comm, out.recorded);
  out.text = broadcast_string(comm, out.text);
  out.seq_len = broadcast_value(comm, out.seq_len);
  return out;
}

StoredChoices stored_choices(const MpiComm& comm, const std::string& path) {
  // values[0] = 1 when recorded, then kChoiceAttrs, then the strategy's index in `strategies`.
  const parallel::Strategy strategies[] = {parallel::Strategy::FullShard, parallel::Strategy::ShardGradOp,
                                           parallel::Strategy::NoShard, parallel::Strategy::HybridShard};
  std::vector<std::int64_t> values(kChoiceInts + 2, 0);
  // A file that does not open, or lacks an attribute (written before them), records none.
  if (comm.rank() == 0)
    read_if_readable(path, [&](hid_t f) {
      bool all = true;
      for (int i = 0; i < kChoiceInts && all; ++i) {
        const std::optional<std::int64_t> v = h5::read_int_attr(f, kChoiceAttrs[i]);
        all = v.has_value();
        if (all) values[i + 1] = *v;
      }
      const std::optional<std::string> name = h5::read_string_attr(f, "mesh_strategy");
      int found = -1;
      for (int i = 0; name && i < 4; ++i)
        if (*name == parallel::strategy_name(strategies[i])) found = i;
      values[0] = all && found >= 0 ? 1 : 0;
      values[kChoiceInts + 1] = found;
    });
  broadcast_values(comm, values.data(), static_cast<int>(values.size()));
  StoredChoices c;
  // Small counts a save wrote from ints; a value out of range leaves the choices unrecorded.
  for (int i = 1; i <= kChoiceInts; ++i)
    if (values[i] < 0 || values[i] > (1 << 30)) return c;
  c.recorded = values[0] == 1;
  if (!c.recorded) return c;
  c.path = path;
  c.world_size = static_cast<int>(values[1]);
  c.ranks_per_node = static_cast<int>(values[2]);
  c.mesh_shape = {static_cast<int>(values[3]), static_cast<int>(values[4]), static_cast<int>(values[5])};
  c.micro_batch = static_cast<int>(values[6]);
  c.activation_checkpointing = values[7] != 0;
  c.strategy = strategies[values[kChoiceInts + 1]];
  return c;
}

}  // namespace meshtrain::checkpoint
