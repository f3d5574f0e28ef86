// checkpoint::save: every rank writes the hyperslabs it owns into one HDF5 file through
// MPI-IO (collective metadata, each rank's pieces written independently: h5::piece_dxpl
// says why), then rank 0 commits the file (fsync, rename, `latest`, retention).
#include <array>
#include <cmath>
#include <cstdio>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>

#include "base_ref.hpp"
#include "files.hpp"
#include "format.hpp"
#include "h5.hpp"
#include "save_common.hpp"
#include "tokenizer_attrs.hpp"
#include "comm/collectives.hpp"
#include "build_config.hpp"
#include "checkpoint/checkpoint.hpp"
#include "comm/agree.hpp"
#include "comm/watchdog.hpp"
#include "core/check.hpp"
#include "core/fault.hpp"
#include "core/file_io.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "checksum.hpp"
#include "pieces.hpp"
#include "staging.hpp"

namespace meshtrain::checkpoint {

namespace fs = std::filesystem;

namespace save_common {

void prepare_directory(const std::string& dir, const std::string& probe) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  MESHTRAIN_REQUIRE(fs::is_directory(dir, ec), "cannot create the checkpoint directory %s (checkpoint.dir): %s",
                    dir.c_str(), ec ? ec.message().c_str() : "a file of that name exists");
  std::FILE* f = std::fopen(probe.c_str(), "w");
  if (!f && file_io::is_storage_error(errno)) throw file_io::write_error(probe, errno);
  MESHTRAIN_REQUIRE(f, "cannot write in the checkpoint directory %s (checkpoint.dir): %s", dir.c_str(),
                    std::strerror(errno));
  std::fclose(f);
}

}  // namespace save_common

using namespace save_common;

namespace {

void write_root_attrs(hid_t file, const parallel::DeviceMesh& mesh, const CheckpointMeta& m, const TrainState& st) {
  h5::write_attr(file, "format", std::string(format::kFormatName));
  h5::write_attr(file, "format_version", static_cast<std::int64_t>(kFormatVersion));
  h5::write_attr(file, "meshtrain_version", std::string(MESHTRAIN_VERSION " (" MESHTRAIN_GIT_DESCRIBE ")"));
  h5::write_attr(file, "step", static_cast<std::int64_t>(st.step));
  h5::write_attr(file, "tokens_seen", st.tokens_seen);
  h5::write_attr(file, "data_cursor", st.cursor);
  h5::write_attr(file, "optimizer_updates", static_cast<std::int64_t>(st.updates));
  h5::write_attr(file, "skipped_steps", static_cast<std::int64_t>(st.skipped));
  h5::write_attr(file, "seed", st.seed);
  h5::write_attr(file, "lr_schedule", std::string(choice_name(m.lr_schedule)));
  h5::write_attr(file, "lr", m.lr);
  h5::write_attr(file, "min_lr", m.min_lr);
  h5::write_attr(file, "warmup_steps", static_cast<std::int64_t>(m.warmup_steps));
  h5::write_attr(file, "total_steps", static_cast<std::int64_t>(m.total_steps));
  h5::write_attr(file, "seq_len", static_cast<std::int64_t>(m.seq_len));
  h5::write_attr(file, "micro_batch", static_cast<std::int64_t>(m.micro_batch));
  h5::write_attr(file, "global_batch", static_cast<std::int64_t>(m.global_batch));
  h5::write_attr(file, "grad_accum", static_cast<std::int64_t>(m.grad_accum));
  h5::write_attr(file, "precision", std::string(choice_name(m.precision)));
  h5::write_attr(file, "mesh_dp_replicate", static_cast<std::int64_t>(m.mesh_shape.dp_replicate));
  h5::write_attr(file, "mesh_dp_shard", static_cast<std::int64_t>(m.mesh_shape.dp_shard));
  h5::write_attr(file, "mesh_tp", static_cast<std::int64_t>(m.mesh_shape.tp));
  h5::write_attr(file, "mesh_strategy", std::string(parallel::strategy_name(m.strategy)));
  h5::write_attr(file, "world_size", static_cast<std::int64_t>(mesh.world().size()));
  // With the mesh, what a resume on this job shape keeps (stored_choices, plan::keeps).
  h5::write_attr(file, "ranks_per_node", static_cast<std::int64_t>(m.ranks_per_node));
  h5::write_attr(file, "activation_checkpointing", static_cast<std::int64_t>(m.activation_checkpointing ? 1 : 0));
  h5::write_attr(file, "config_ini", m.config_ini);
  // What a resume must keep (the trainer's train::RunSettings): compared before the next load.
  if (!st.run_settings.empty()) h5::write_attr(file, "run_settings", st.run_settings);
}

/// The dataset rank_first_window of the training-state group (format::kTrainGroup): the first
/// training window of every data-parallel rank at the next step, as the trainer's sampler
/// gave it (rank 0 writes it; the others take part with an empty selection). Returns
/// H5Dwrite's result.
herr_t write_rank_windows(hid_t file, hid_t dxpl, const TrainState& st, bool root) {
  const std::vector<std::uint64_t>& w = st.rank_first_windows;
  const int dp = static_cast<int>(w.size());
  h5::Handle fspace = h5::simple_space({dp});
  const std::string path = format::dataset_path(format::kTrainGroup, format::kRankFirstWindow);
  h5::Handle ds = h5::dataset(H5_CHECK(
      H5Dcreate2(file, path.c_str(), H5T_STD_U64LE, fspace.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  h5::Handle mspace = h5::simple_space({dp});
  if (!root) {
    H5_CHECK(H5Sselect_none(fspace.get()));
    H5_CHECK(H5Sselect_none(mspace.get()));
  }
  static const std::uint64_t none = 0;  // HDF5 wants a buffer even for an empty selection
  return H5Dwrite(ds.get(), H5T_NATIVE_UINT64, mspace.get(), fspace.get(), dxpl, w.empty() ? &none : w.data());
}

/// Writes this rank's `piece` of one parameter; returns H5Dwrite's result (nullptr: nothing, but every rank
/// calls H5Dwrite for every dataset so that HDF5's collective metadata operations stay
/// matched). `data` is the piece's first element; the
/// file selection is the union of its logical rectangles (h5::select_piece says why the
/// orders agree).
herr_t write_piece(hid_t ds, hid_t dxpl, const Piece* piece, const float* data) {
  h5::Handle fspace = h5::space(H5_CHECK(H5Dget_space(ds)));
  H5_CHECK(H5Sselect_none(fspace.get()));
  const hsize_t n = piece ? static_cast<hsize_t>(piece->count) : 1;
  h5::Handle mspace = h5::space(H5_CHECK(H5Screate_simple(1, &n, nullptr)));
  static const float dummy = 0;
  if (piece) {
    h5::select_piece(fspace.get(), *piece);
  } else {
    H5_CHECK(H5Sselect_none(mspace.get()));
  }
  return H5Dwrite(ds, H5T_NATIVE_FLOAT, mspace.get(), fspace.get(), dxpl, piece ? data : &dummy);
}

/// Keeps the newest `keep` complete checkpoints up to `newest`, the one just committed (never
/// deleted), and removes temporaries of saves that did not finish. Best effort: a file that
/// cannot be removed is reported.
void apply_retention(const std::string& dir, int keep, const std::string& newest) {
  // A run's saves go up in step, so a file of a higher step is not of this run's line: a save
  // renamed in before a crash took `latest` (the resumed run trains that step again and
  // replaces it). Counted, it would take the place of one of the run's own checkpoints.
  const int newest_step = files::step_of(fs::path(newest).filename().string()).value();
  std::vector<std::string> all;
  for (std::string& path : list_checkpoints(dir))
    if (files::step_of(fs::path(path).filename().string()).value() <= newest_step) all.push_back(std::move(path));
  const std::size_t n = all.size();
  for (std::size_t i = 0; i + static_cast<std::size_t>(std::max(keep, 1)) < n; ++i) {
    if (all[i] == newest) continue;
    std::error_code ec;
    if (!fs::remove(all[i], ec) && ec) log::warn("checkpoint retention: cannot remove %s: %s", all[i].c_str(), ec.message().c_str());
  }
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (files::step_of(name, true)) fs::remove(e.path(), ec);
  }
}

}  // namespace

namespace save_common {

std::uint64_t count_nonfinite(const float* p, std::int64_t n) {
  std::uint64_t bad = 0;
  for (std::int64_t i = 0; i < n; ++i) bad += std::isfinite(p[i]) ? 0 : 1;
  return bad;
}

int agree_errno(const MpiComm& comm, int err) {
  return watched_all_reduce_value("all_reduce", kWatchGroup, comm, err, ReduceOp::Max);
}

std::uint64_t tensor_bytes(const std::vector<model::ParamSpec>& specs) {
  std::uint64_t bytes = 0;
  for (const model::ParamSpec& p : specs)
    if (!p.frozen) bytes += 3 * static_cast<std::uint64_t>(p.numel()) * sizeof(float);
  return bytes;
}

// Under MPI-IO every rank makes these calls (collective metadata, cached by HDF5 until it is
// flushed at the close); the asynchronous save makes them on rank 0 alone, serially.
void create_metadata(const std::vector<model::ParamSpec>& specs, bool has_frozen, const parallel::DeviceMesh& mesh,
                     const CheckpointMeta& meta, const TrainState& st, hid_t file, hid_t dxpl, bool writes_windows,
                     std::vector<std::array<h5::Handle, 3>>& datasets, const std::function<void(bool)>& failed) {
  const char* groups[3] = {format::kModelGroup, format::kExpAvgGroup, format::kExpAvgSqGroup};
  write_root_attrs(file, mesh, meta, st);
  for (const char* g : {format::kModelGroup, format::kOptimGroup, format::kExpAvgGroup, format::kExpAvgSqGroup,
                        format::kTrainGroup})
    h5::group(H5_CHECK(H5Gcreate2(file, g, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  {
    h5::Handle model_group = h5::group(H5_CHECK(H5Gopen2(file, format::kModelGroup, H5P_DEFAULT)));
    format::write_model_attrs(model_group.get(), meta.dims);
    write_tokenizer_attrs(model_group.get(), st.tokenizer);  // the model's tokenizer is part of it
  }
  failed(write_rank_windows(file, dxpl, st, writes_windows) < 0);
  // LoRA: the frozen base is not stored, only where it comes from.
  if (has_frozen) write_base_ref(file, st.base);
  h5::Handle dcpl = h5::plist(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  H5_CHECK(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER));  // every element is written
  // Contiguous and allocated now: parallel HDF5 always allocates so; the asynchronous save
  // needs each dataset's file offset before any byte of it is written.
  H5_CHECK(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY));
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].frozen) continue;
    h5::Handle sp = h5::simple_space(specs[i].shape);
    for (int k = 0; k < 3; ++k) {
      datasets[i][k] = h5::dataset(H5Dcreate2(file, format::dataset_path(groups[k], specs[i].name).c_str(),
                                              H5T_IEEE_F32LE, sp.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
      failed(!datasets[i][k].valid());
    }
  }
}

void commit(const MpiComm& comm, const std::string& dir, const std::string& tmp, const std::string& path,
            const std::string& name, int keep) {
  agree_on_errors(comm, [&] {
    if (comm.rank() != 0) return;
    try {
      file_io::fsync_path(tmp);
      file_io::rename_durably(tmp, path);
    } catch (const UserError&) {
      std::remove(tmp.c_str());
      throw;
    }
    // A failure from here on leaves the complete step_*.h5 in place but `latest` naming
    // the previous checkpoint, which a resume loads.
    if (const int e = fault::pass(fault::Point::SaveAfterRename))
      throw file_io::write_error(dir + "/latest", e, name.size() + 1);
    file_io::replace_file(dir + "/latest", name + "\n");
    apply_retention(dir, keep, path);
  }, kWatchGroup);
}

}  // namespace save_common

namespace {

/// Thrown on every rank alike (after agree_errno) to unwind a failed save: the HDF5
/// handles close on the way out, in the same order everywhere (their closes are collective).
struct SaveFailed {
  int err;
};

/// The tensors' checksums as attributes: the same values written by every rank (collective
/// metadata), so the ranks' contributions are combined first. Returns their cost: the CRCs
/// computed while writing plus the attribute writes. (The reduction of 4 bytes per tensor
/// is not counted: its wall time is the ranks' skew, which the collective close right after
/// would wait for otherwise.)
double write_checksums(const MpiComm& comm, hid_t file, const checksum::Partials& sums,
                       const std::vector<std::array<h5::Handle, 3>>& datasets) {
  std::vector<std::uint32_t> crcs;
  {
    WatchedBlockingCall watch("MPI_Allreduce", kWatchGroup, comm);
    crcs = sums.reduce(comm);
  }
  std::vector<hid_t> ids(datasets.size() * 3, -1);
  for (std::size_t i = 0; i < datasets.size(); ++i)
    for (int k = 0; k < 3; ++k) ids[sums.slot(static_cast<int>(i), k)] = datasets[i][k].get();
  const double attrs_t0 = now_seconds();
  {
    WatchedBlockingCall watch("H5Awrite", kWatchGroup, comm);
    checksum::write(file, sums, crcs, ids);
  }
  return sums.seconds() + (now_seconds() - attrs_t0);
}

/// The data phase of a save: every unit's owned master weights and both moments staged to
/// the host and written piece by piece into `datasets` (spec x {master, exp_avg,
/// exp_avg_sq}), their checksums added to `sums`, their non-finite values counted. `failed`
/// records a failed call, `agree` stops the save on every rank at the same dataset (both
/// from save()). Collective: every rank makes every write call.
template <class T, class Failed, class Agree>
void write_tensor_data(const parallel::FsdpEngine<T>& eng, const MpiComm& comm, hid_t dxpl,
                       const std::vector<std::array<h5::Handle, 3>>& datasets, checksum::Partials& sums,
                       std::uint64_t& nonfinite, std::uint64_t& my_bytes, int& err, const Failed& failed,
                       const Agree& agree) {
  const auto& specs = eng.specs();
  for (int u = 0; u < eng.num_units(); ++u) {
    const parallel::UnitState& state = eng.state(u);
    const model::UnitLayout& L = eng.layouts()[u];
    const std::int64_t ob = eng.owned_begin(u), on = eng.owned_numel(u);
    const std::vector<float> host[3] = {stage_to_host(state.master, ob - state.begin, on),
                                        stage_to_host(state.exp_avg, ob - state.begin, on),
                                        stage_to_host(state.exp_avg_sq, ob - state.begin, on)};
    const std::vector<Piece> pieces = unit_pieces(specs, L, eng.tp_size(), eng.tp_rank(), ob, ob + on, ob, true);
    std::size_t next = 0;
    for (const model::ParamSlot& slot : L.slots) {
      if (specs[slot.spec].frozen) continue;
      const Piece* piece = next < pieces.size() && pieces[next].spec == slot.spec ? &pieces[next++] : nullptr;
      for (int k = 0; k < 3; ++k) {
        const float* data = piece ? host[k].data() + piece->offset : nullptr;
        if (piece) nonfinite += count_nonfinite(data, piece->count);
        if (piece) sums.add(k, *piece, data);
        if (piece) my_bytes += static_cast<std::uint64_t>(piece->count) * sizeof(float);
        // An injected I/O error is this rank's write failing: the call still takes place
        // (every rank makes it) and its result is replaced.
        const int injected = fault::pass(fault::Point::SaveDataset);
        {
          WatchedBlockingCall watch("H5Dwrite", kWatchGroup, comm);
          failed(write_piece(datasets[slot.spec][k].get(), dxpl, piece, data) < 0);
        }
        if (injected != 0 && err == 0) err = injected;
        agree();  // a failed write stops the save on every rank at the same dataset
      }
    }
  }
}

}  // namespace

template <class T>
IoStats save(const parallel::FsdpEngine<T>& eng, const parallel::DeviceMesh& mesh, const CheckpointMeta& meta,
             const TrainState& st, const std::string& dir) {
  const MpiComm& comm = mesh.world().mpi();
  const bool root = comm.rank() == 0;
  watched_barrier("barrier", kWatchGroup, comm);
  const double t0 = now_seconds();
  IoStats stats;
  const std::string name = checkpoint_file_name(st.step);
  stats.path = dir + "/" + name;
  const std::string tmp = stats.path + ".tmp";
  agree_on_errors(comm, [&] {
    if (root) prepare_directory(dir, tmp);
  }, kWatchGroup);

  const auto& specs = eng.specs();
  const std::uint64_t bytes_needed = tensor_bytes(specs);  // the file adds a little metadata
  std::uint64_t nonfinite = 0;
  std::uint64_t my_bytes = 0;       // tensor bytes this rank wrote (the save's log line)
  double my_data_seconds = 0;       // this rank's data phase
  double my_checksum_seconds = 0;   // the part of it spent on checksums
  // A failed HDF5 call (disk full, EIO) becomes one sentence below, not HDF5's error stack.
  h5::QuietErrors quiet;
  int err = 0;  // this rank's first I/O failure (an errno value)
  const auto failed = [&](bool bad) {
    if (bad && err == 0) err = h5::io_errno(dir, bytes_needed);
  };
  try {
    // Declared before the HDF5 handles, so that on a failure it is destroyed after them and
    // their collective closes run under the watchdog too.
    std::unique_ptr<WatchedBlockingCall> closing_after_failure;
    const auto agree = [&] {
      const int e = agree_errno(comm, err);
      if (e == 0) return;
      // The doomed file's space is freed before the handles close: closing flushes HDF5's
      // metadata, and that flush must succeed on every rank alike -- a rank whose flush
      // fails skips the close's barriers and the others wait in them forever.
      if (root) ::truncate(tmp.c_str(), 0);
      watched_barrier("barrier", kWatchGroup, comm);
      closing_after_failure = std::make_unique<WatchedBlockingCall>("H5Fclose", kWatchGroup, comm);
      throw SaveFailed{e};
    };
    h5::Handle fapl = h5::mpio_fapl(comm.get());
    h5::Handle file;
    {
      WatchedBlockingCall watch("H5Fcreate", kWatchGroup, comm);
      file = h5::file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()));
      failed(!file.valid());
    }
    agree();
    h5::Handle dxpl = h5::piece_dxpl();
    std::vector<std::array<h5::Handle, 3>> datasets(specs.size());
    {
      WatchedBlockingCall watch("H5Dcreate", kWatchGroup, comm);
      create_metadata(specs, eng.has_frozen(), mesh, meta, st, file.get(), dxpl.get(), root, datasets, failed);
    }
    agree();

    const double data_t0 = now_seconds();
    // The tensors' checksums, from the bytes as they are written (doc/checkpoints.md).
    checksum::Partials sums(specs, 3);
    write_tensor_data(eng, comm, dxpl.get(), datasets, sums, nonfinite, my_bytes, err, failed, agree);
    my_data_seconds = now_seconds() - data_t0;
    my_checksum_seconds = write_checksums(comm, file.get(), sums, datasets);
    {
      // Collective closes: the file's flushes the metadata, so it can fail on a full disk.
      WatchedBlockingCall watch("H5Fclose", kWatchGroup, comm);
      for (auto& d : datasets)
        for (h5::Handle& h : d) failed(h.close() < 0);
      failed(file.close() < 0);
    }
    agree();
  } catch (const SaveFailed& f) {
    // Every rank is here, at the same point; the handles are closed. Nothing of this save
    // may remain: the previous checkpoint and `latest` are untouched.
    if (root) std::remove(tmp.c_str());
    barrier(comm);
    throw file_io::write_error(stats.path, f.err, bytes_needed, "checkpoint");
  }
  const std::uint64_t any_nonfinite =
      watched_all_reduce_value<std::uint64_t>("all_reduce", kWatchGroup, comm, nonfinite, ReduceOp::Sum);
  if (any_nonfinite > 0) {
    if (root) {
      std::remove(tmp.c_str());
      log::warn("checkpoint at step %d NOT saved: %llu non-finite values in the weights or optimizer moments", st.step,
                static_cast<unsigned long long>(any_nonfinite));
    }
    barrier(comm);
    stats.written = false;
    stats.seconds = now_seconds() - t0;
    return stats;
  }
  // The .tmp is complete and closed on every rank; rank 0 commits it.
  err = fault::pass(fault::Point::SaveBeforeRename);
  if (const int e = agree_errno(comm, err)) {
    if (root) std::remove(tmp.c_str());
    throw file_io::write_error(stats.path, e, bytes_needed, "checkpoint");
  }
  commit(comm, dir, tmp, stats.path, name, meta.keep);
  stats.seconds = now_seconds() - t0;
  stats.bytes = bytes_needed;
  reduce_write_stats(comm, my_bytes, my_data_seconds, stats);
  stats.checksum_seconds =
      watched_all_reduce_value("all_reduce", kWatchGroup, comm, my_checksum_seconds, ReduceOp::Max);
  return stats;
}

template IoStats save<float>(const parallel::FsdpEngine<float>&, const parallel::DeviceMesh&, const CheckpointMeta&,
                             const TrainState&, const std::string&);
template IoStats save<bf16>(const parallel::FsdpEngine<bf16>&, const parallel::DeviceMesh&, const CheckpointMeta&,
                            const TrainState&, const std::string&);

}  // namespace meshtrain::checkpoint
