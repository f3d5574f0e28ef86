// checkpoint::AsyncSave (async_save.hpp): the state copied to host memory at a step
// boundary, the file laid out by rank 0 on the main thread, each rank's bytes written by
// its own background thread (DirectWriter: O_DIRECT, not through the page cache), and the
// commit at a later step boundary.
//
// Why not HDF5 and MPI-IO on the background thread: MPI is initialised with
// MPI_THREAD_FUNNELED (runtime.cpp; the watchdog's monitor thread and the NCCL path are
// built on that), and Debian's parallel HDF5 is not thread-safe, so a thread inside HDF5
// while the main thread is in MPI would need MPI_THREAD_MULTIPLE for every collective of
// the run and a second communicator. The HDF5 file's layout is decided entirely when its
// datasets are created (contiguous, allocated at creation), so rank 0 creates it alone and
// the background threads need nothing but each dataset's file offset: the rows of a piece
// are plain byte ranges of the file (h5::select_piece's order, little-endian float32).
#include "checkpoint/async_save.hpp"


#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <thread>

#include "checksum.hpp"
#include "format.hpp"
#include "h5.hpp"
#include "checkpoint/direct_writer.hpp"
#include "comm/agree.hpp"
#include "comm/collectives.hpp"
#include "comm/watchdog.hpp"
#include "core/error.hpp"
#include "core/fault.hpp"
#include "core/file_io.hpp"
#include "core/log.hpp"
#include "core/memory.hpp"
#include "core/timer.hpp"
#include "pieces.hpp"
#include "save_common.hpp"

namespace meshtrain::checkpoint {

using namespace save_common;

namespace {

#if defined(KOKKOS_ENABLE_CUDA)
// Pinned: the device-to-host copies of the step boundary run at full PCIe rate.
using StagingSpace = Kokkos::CudaHostPinnedSpace;
#else
using StagingSpace = Kokkos::HostSpace;
#endif

const char* const kGroups[3] = {format::kModelGroup, format::kExpAvgGroup, format::kExpAvgSqGroup};

/// One piece of array k (0: master, 1: exp_avg, 2: exp_avg_sq) this rank writes, its
/// elements contiguous in a staging buffer from `data`.
struct Job {
  int k = 0;
  Piece piece;
  const float* data = nullptr;
};

/// Rank 0: the reduced checksums into the placeholders the layout wrote (same type and
/// size: overwritten in place). False when a call failed.
bool write_checksum_values(const std::string& tmp, const std::vector<model::ParamSpec>& specs,
                           const std::vector<std::uint32_t>& crcs, const checksum::Partials& sums) {
  h5::Handle fapl = h5::serial_create_fapl();
  h5::Handle file = h5::file(H5Fopen(tmp.c_str(), H5F_ACC_RDWR, fapl.get()));
  if (!file.valid()) return false;
  bool ok = true;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].frozen) continue;
    for (int k = 0; k < 3; ++k) {
      h5::Handle ds = h5::dataset(H5Dopen2(file.get(), format::dataset_path(kGroups[k], specs[i].name).c_str(),
                                           H5P_DEFAULT));
      h5::Handle a = ds.valid() ? h5::attribute(H5Aopen(ds.get(), checksum::kTensorAttr, H5P_DEFAULT)) : h5::Handle();
      const std::uint32_t v = crcs[sums.slot(static_cast<int>(i), k)];
      ok = ok && a.valid() && H5Awrite(a.get(), H5T_NATIVE_UINT32, &v) >= 0;
    }
  }
  return file.close() >= 0 && ok;
}

}  // namespace

struct AsyncSave::Impl {
  // The save in flight (set by start on the main thread; read-only for the thread).
  bool pending = false;
  std::string dir, tmp, path, name;
  int keep = 3, step = 0;
  std::uint64_t bytes_needed = 0;
  std::vector<model::ParamSpec> specs;  ///< a copy: `sums` refers to it while the thread runs
  std::vector<Job> jobs;
  std::vector<std::uint64_t> offsets;   ///< file offset of dataset (spec, k) at sums->slot(spec, k)
  /// This rank's owned state of every unit end to end, one buffer per array (reused by the
  /// next save: no save starts before the previous one is complete).
  Kokkos::View<float*, StagingSpace> staging[3];
  double t0 = 0, held = 0;
  // Written by the thread, read by the main thread after `done` (or the join).
  std::thread thread;
  std::atomic<bool> done{false};
  int err = 0;
  std::uint64_t nonfinite = 0, my_bytes = 0;
  double data_seconds = 0, cpu_seconds = 0, sync_seconds = 0;
  std::uint64_t direct_bytes = 0;  ///< of my_bytes, written with O_DIRECT (direct_writer.hpp)
  std::unique_ptr<checksum::Partials> sums;

  void join() {
    if (thread.joinable()) thread.join();
  }
  void write_background();
  IoStats complete(const MpiComm& comm);
};

/// The background thread: this rank's pieces into the laid-out `.tmp`, their checksums and
/// non-finite count, then fdatasync. Stops at the first failure (reported by complete()).
/// No MPI, no HDF5, no Kokkos.
void AsyncSave::Impl::write_background() {
  const double t = now_seconds();
  const double cpu0 = thread_cpu_seconds();
  DirectWriter out(tmp);
  err = out.open_error();
  for (const Job& j : jobs) {
    if (err != 0) break;
    // An injected fault: a kill or stall mid-write, or this rank's write failing.
    if (const int e = fault::pass_at_step(fault::Point::SaveBackground, step)) {
      err = e;
      break;
    }
    const Piece& piece = j.piece;
    nonfinite += count_nonfinite(j.data, piece.count);
    sums->add(j.k, piece, j.data);
    my_bytes += static_cast<std::uint64_t>(piece.count) * sizeof(float);
    const model::ParamSpec& p = specs[piece.spec];
    const std::int64_t cols = p.shape.size() > 1 ? p.shape[1] : 1;
    const std::uint64_t base = offsets[sums->slot(piece.spec, j.k)];
    // One write per contiguous run (a piece without tensor parallelism is one write).
    piece.for_each_contiguous_run(cols, [&](std::int64_t at, std::int64_t pos, std::int64_t n) {
      if (err == 0)
        err = out.write(j.data + at, static_cast<std::size_t>(n) * sizeof(float),
                        base + static_cast<std::uint64_t>(pos) * sizeof(float));
    });
  }
  if (out.open_error() == 0) {
    // This rank's bytes are durable before the ranks agree; rank 0's fsync at the commit
    // then covers the checksum attributes only.
    const double s0 = now_seconds();
    if (err == 0) err = out.sync();
    sync_seconds = now_seconds() - s0;
    if (const int e = out.close(); e != 0 && err == 0) err = e;
  }
  direct_bytes = out.direct_bytes();
  data_seconds = now_seconds() - t;
  cpu_seconds = thread_cpu_seconds() - cpu0;
  done.store(true, std::memory_order_release);
}

IoStats AsyncSave::Impl::complete(const MpiComm& comm) {
  join();
  pending = false;
  const double c0 = now_seconds();
  const bool root = comm.rank() == 0;
  IoStats stats;
  stats.path = path;
  stats.async = true;
  const auto fail = [&](int e) {
    // Nothing of this save may remain: the previous checkpoint and `latest` are untouched.
    if (root) std::remove(tmp.c_str());
    watched_barrier("barrier", kWatchGroup, comm);
    throw file_io::write_error(path, e, bytes_needed, "checkpoint");
  };
  // No rank may commit what another failed to write.
  if (const int e = agree_errno(comm, err)) fail(e);
  const std::uint64_t any_nonfinite =
      watched_all_reduce_value<std::uint64_t>("all_reduce", kWatchGroup, comm, nonfinite, ReduceOp::Sum);
  if (any_nonfinite > 0) {
    if (root) {
      std::remove(tmp.c_str());
      log::warn("checkpoint at step %d NOT saved: %llu non-finite values in the weights or optimizer moments", step,
                static_cast<unsigned long long>(any_nonfinite));
    }
    watched_barrier("barrier", kWatchGroup, comm);
    stats.written = false;
    stats.seconds = now_seconds() - t0;
    stats.held_seconds = held + (now_seconds() - c0);
    return stats;
  }
  std::vector<std::uint32_t> crcs;
  {
    WatchedBlockingCall watch("MPI_Allreduce", kWatchGroup, comm);
    crcs = sums->reduce(comm);
  }
  int werr = 0;
  const double attrs_t0 = now_seconds();
  if (root) {
    h5::QuietErrors quiet;
    if (!write_checksum_values(tmp, specs, crcs, *sums)) werr = h5::io_errno(dir, bytes_needed);
  }
  const double attrs_s = now_seconds() - attrs_t0;
  // The .tmp is complete and closed on every rank; rank 0 commits it (as save()).
  if (werr == 0) werr = fault::pass(fault::Point::SaveBeforeRename);
  if (const int e = agree_errno(comm, werr)) fail(e);
  commit(comm, dir, tmp, path, name, keep);
  stats.seconds = now_seconds() - t0;
  stats.held_seconds = held + (now_seconds() - c0);
  stats.bytes = bytes_needed;
  reduce_write_stats(comm, my_bytes, data_seconds, stats);
  stats.background_cpu_seconds = watched_all_reduce_value<double>("all_reduce", kWatchGroup, comm, cpu_seconds, ReduceOp::Max);
  stats.background_sync_seconds = watched_all_reduce_value<double>("all_reduce", kWatchGroup, comm, sync_seconds, ReduceOp::Max);
  stats.direct_bytes = watched_all_reduce_value<std::uint64_t>("all_reduce", kWatchGroup, comm, direct_bytes, ReduceOp::Sum);
  stats.checksum_seconds =
      watched_all_reduce_value("all_reduce", kWatchGroup, comm, sums->seconds() + attrs_s, ReduceOp::Max);
  return stats;
}

AsyncSave::AsyncSave() : impl_(std::make_unique<Impl>()) {}

AsyncSave::~AsyncSave() {
  if (impl_) impl_->join();
}

bool AsyncSave::pending() const { return impl_->pending; }

std::optional<IoStats> AsyncSave::poll(const MpiComm& comm) {
  if (!impl_->pending) return std::nullopt;
  const int mine = impl_->done.load(std::memory_order_acquire) ? 1 : 0;
  // All ranks agree on whether the save is complete everywhere, so all commit (or fail) at
  // the same step boundary.
  if (watched_all_reduce_value("all_reduce", kWatchGroup, comm, mine, ReduceOp::Min) == 0) return std::nullopt;
  return impl_->complete(comm);
}

IoStats AsyncSave::wait(const MpiComm& comm) {
  MESHTRAIN_ASSERT(impl_->pending, "AsyncSave::wait without a save in flight");
  return impl_->complete(comm);
}

template <class T>
std::optional<IoStats> AsyncSave::start(const parallel::FsdpEngine<T>& eng, const parallel::DeviceMesh& mesh,
                                        const CheckpointMeta& meta, const TrainState& st, const std::string& dir) {
  Impl& m = *impl_;
  const MpiComm& comm = mesh.world().mpi();
  std::optional<IoStats> previous;
  if (m.pending) previous = wait(comm);  // one save in flight at a time
  const bool root = comm.rank() == 0;
  watched_barrier("barrier", kWatchGroup, comm);
  m.t0 = now_seconds();
  m.dir = dir;
  m.name = checkpoint_file_name(st.step);
  m.path = dir + "/" + m.name;
  m.tmp = m.path + ".tmp";
  m.keep = meta.keep;
  m.step = st.step;
  m.specs = eng.specs();
  m.bytes_needed = tensor_bytes(m.specs);
  agree_on_errors(comm, [&] {
    if (root) prepare_directory(dir, m.tmp);
  }, kWatchGroup);

  // Host copies of this rank's owned state: the pieces save() writes, unit by unit.
  std::int64_t total = 0;
  for (int u = 0; u < eng.num_units(); ++u) total += eng.owned_numel(u);
  agree_on_errors(comm, [&] {
    if (static_cast<std::int64_t>(m.staging[0].extent(0)) == total) return;
    for (auto& v : m.staging) v = {};
    require_host_memory(3.0 * static_cast<double>(total) * sizeof(float),
                        "checkpoint.async (a host copy of this rank's weights and optimizer moments)");
    for (auto& v : m.staging)
      v = Kokkos::View<float*, StagingSpace>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "checkpoint_async"),
                                             static_cast<std::size_t>(total));
  }, kWatchGroup);
  m.jobs.clear();
  std::int64_t at = 0;
  for (int u = 0; u < eng.num_units(); ++u) {
    const parallel::UnitState& state = eng.state(u);
    const std::int64_t ob = eng.owned_begin(u), on = eng.owned_numel(u);
    const Buffer<float>* arrays[3] = {&state.master, &state.exp_avg, &state.exp_avg_sq};
    for (int k = 0; k < 3; ++k)
      if (on > 0)
        Kokkos::deep_copy(UView<float, StagingSpace>(m.staging[k].data() + at, static_cast<std::size_t>(on)),
                          arrays[k]->view(static_cast<std::size_t>(ob - state.begin), static_cast<std::size_t>(on)));
    for (Piece& piece : unit_pieces(m.specs, eng.layouts()[u], eng.tp_size(), eng.tp_rank(), ob, ob + on, ob, true)) {
      if (m.specs[piece.spec].frozen) continue;
      for (int k = 0; k < 3; ++k) m.jobs.push_back({k, piece, m.staging[k].data() + at + piece.offset});
    }
    at += on;
  }
  Kokkos::fence();

  // Rank 0 lays the file out: every attribute, the sampler's windows, every dataset
  // allocated (placeholder checksums), and their offsets for everyone.
  checksum::Partials layout_slots(m.specs, 3);
  std::vector<std::uint64_t> offsets(m.specs.size() * 3, 0);
  int err = 0;
  if (root) {
    h5::QuietErrors quiet;
    const auto failed = [&](bool bad) {
      if (bad && err == 0) err = h5::io_errno(dir, m.bytes_needed);
    };
    try {
      h5::Handle fapl = h5::serial_create_fapl();
      h5::Handle file = h5::file(H5Fcreate(m.tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()));
      failed(!file.valid());
      if (file.valid()) {
        std::vector<std::array<h5::Handle, 3>> datasets(m.specs.size());
        create_metadata(m.specs, eng.has_frozen(), mesh, meta, st, file.get(), H5P_DEFAULT, true, datasets, failed);
        if (err == 0) {
          std::vector<hid_t> ids(m.specs.size() * 3, -1);
          for (std::size_t i = 0; i < m.specs.size(); ++i)
            for (int k = 0; k < 3; ++k) {
              const hid_t ds = datasets[i][k].get();
              ids[layout_slots.slot(static_cast<int>(i), k)] = ds;
              if (ds < 0) continue;
              const haddr_t off = H5Dget_offset(ds);
              failed(off == HADDR_UNDEF);
              offsets[layout_slots.slot(static_cast<int>(i), k)] = off;
            }
          checksum::write(file.get(), layout_slots, std::vector<std::uint32_t>(ids.size(), 0), ids);
        }
        for (auto& d : datasets)
          for (h5::Handle& h : d) failed(h.close() < 0);
        failed(file.close() < 0);
      }
    } catch (const std::exception&) {
      failed(true);  // an HDF5 call that H5_CHECK refused: the file cannot be laid out
    }
  }
  if (const int e = agree_errno(comm, err)) {
    if (root) std::remove(m.tmp.c_str());
    throw file_io::write_error(m.path, e, m.bytes_needed, "checkpoint");
  }
  watched_broadcast_bytes("broadcast", kWatchGroup, comm, offsets.data(),
                          static_cast<std::int64_t>(offsets.size() * sizeof(std::uint64_t)), 0);
  m.offsets = std::move(offsets);

  m.sums = std::make_unique<checksum::Partials>(m.specs, 3);
  m.err = 0;
  m.nonfinite = m.my_bytes = 0;
  m.data_seconds = m.cpu_seconds = m.sync_seconds = 0;
  m.direct_bytes = 0;
  m.done.store(false);
  m.held = now_seconds() - m.t0;
  m.thread = std::thread([&m] { m.write_background(); });
  m.pending = true;
  return previous;
}

template std::optional<IoStats> AsyncSave::start<float>(const parallel::FsdpEngine<float>&, const parallel::DeviceMesh&,
                                                        const CheckpointMeta&, const TrainState&, const std::string&);
template std::optional<IoStats> AsyncSave::start<bf16>(const parallel::FsdpEngine<bf16>&, const parallel::DeviceMesh&,
                                                       const CheckpointMeta&, const TrainState&, const std::string&);

}  // namespace meshtrain::checkpoint
