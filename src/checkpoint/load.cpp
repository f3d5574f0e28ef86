// checkpoint::load and load_weights: validate once (rank 0, serially), then every rank
// reads exactly the hyperslabs of its own state range, so any mesh loads any checkpoint.
#include <filesystem>
#include <optional>

#include "format.hpp"
#include "h5.hpp"
#include "gguf_import.hpp"
#include "import.hpp"
#include "meshtrain/checkpoint/checkpoint.hpp"
#include "meshtrain/comm/agree.hpp"
#include "meshtrain/core/check.hpp"
#include "meshtrain/core/timer.hpp"
#include "meshtrain/model/init.hpp"
#include "pieces.hpp"
#include "staging.hpp"

namespace meshtrain::checkpoint {
namespace {

namespace fs = std::filesystem;

/// The engine's state arrays in checkpoint order: master, exp_avg, exp_avg_sq.
Buffer<float>& state_array(parallel::UnitState& st, int k) {
  return k == 0 ? st.master : k == 1 ? st.exp_avg : st.exp_avg_sq;
}

/// Fills the first `arrays` state arrays of every unit from `read(spec, piece_or_null, k, dst)`,
/// which is called for every parameter slot in order on every rank (nullptr where the
/// rank's range misses the parameter) so that collective readers stay matched, and returns
/// whether it wrote the values. Padding elements become 0; so do parameters `read` leaves
/// alone, except with `init_seed`, where their master weights get their initial values
/// (model/init: LoRA adapters when loading base weights) — the only initialisation a load
/// pays for. Returns the bytes this rank read.
template <class T, class Read>
std::uint64_t fill_state(parallel::FsdpEngine<T>& eng, int arrays, Read&& read,
                         std::optional<std::uint64_t> init_seed = std::nullopt) {
  std::uint64_t bytes = 0;
  for (int u = 0; u < eng.num_units(); ++u) {
    parallel::UnitState& st = eng.state(u);
    const model::UnitLayout& L = eng.layouts()[u];
    const std::vector<Piece> pieces =
        unit_pieces(eng.specs(), L, eng.tp_size(), eng.tp_rank(), st.begin, st.begin + st.numel, st.begin, false);
    std::vector<std::vector<float>> host(static_cast<std::size_t>(arrays),
                                         std::vector<float>(static_cast<std::size_t>(st.numel), 0.0f));
    std::size_t next = 0;
    for (const model::ParamSlot& slot : L.slots) {
      const Piece* piece = next < pieces.size() && pieces[next].spec == slot.spec ? &pieces[next++] : nullptr;
      for (int k = 0; k < arrays; ++k) {
        const bool got = read(slot.spec, piece, k, piece ? host[k].data() + piece->offset : nullptr);
        if (piece && got) bytes += static_cast<std::uint64_t>(piece->count) * sizeof(float);
        if (piece && !got && k == 0 && init_seed)
          model::init_unit_range(eng.specs(), L, eng.tp_size(), eng.tp_rank(), st.begin + piece->offset,
                                 st.begin + piece->offset + piece->count, *init_seed, host[0].data() + piece->offset);
      }
    }
    for (int k = 0; k < arrays; ++k) stage_to_device(host[k], state_array(st, k));
  }
  return bytes;
}

/// Collective read of `piece` (nullptr: an empty selection) of dataset `ds` into `dst`.
void read_piece(hid_t ds, hid_t dxpl, const Piece* piece, float* dst) {
  h5::Handle fspace = h5::space(H5_CHECK(H5Dget_space(ds)));
  H5_CHECK(H5Sselect_none(fspace.get()));
  const hsize_t n = piece ? static_cast<hsize_t>(piece->count) : 1;
  h5::Handle mspace = h5::space(H5_CHECK(H5Screate_simple(1, &n, nullptr)));
  float dummy = 0;
  if (piece) h5::select_piece(fspace.get(), *piece);
  else H5_CHECK(H5Sselect_none(mspace.get()));
  H5_CHECK(H5Dread(ds, H5T_NATIVE_FLOAT, mspace.get(), fspace.get(), dxpl, piece ? dst : &dummy));
}

/// Reads arrays 0..arrays-1 (/model, /optim/exp_avg, /optim/exp_avg_sq) of a validated
/// checkpoint collectively into the engine; returns this rank's bytes. With `lora_init_seed`
/// LoRA adapters the file lacks get their initial values (the same decision on every rank:
/// same file).
template <class T>
std::uint64_t read_checkpoint_state(parallel::FsdpEngine<T>& eng, hid_t file, int arrays,
                                    std::optional<std::uint64_t> lora_init_seed = std::nullopt) {
  const char* groups[3] = {format::kModelGroup, format::kExpAvgGroup, format::kExpAvgSqGroup};
  h5::Handle dxpl = h5::collective_dxpl();
  return fill_state(eng, arrays, [&](int spec, const Piece* piece, int k, float* dst) {
    const std::string path = format::dataset_path(groups[k], eng.specs()[spec].name);
    if (lora_init_seed && eng.specs()[spec].is_lora && !h5::link_exists(file, path)) return false;
    h5::Handle ds = h5::dataset(H5_CHECK(H5Dopen2(file, path.c_str(), H5P_DEFAULT)));
    read_piece(ds.get(), dxpl.get(), piece, dst);
    return true;
  }, lora_init_seed);
}

std::uint64_t sum_over(const MpiComm& comm, std::uint64_t v) {
  std::uint64_t total = 0;
  MPI_CHECK(MPI_Allreduce(&v, &total, 1, MPI_UINT64_T, MPI_SUM, comm.get()));
  return total;
}

/// Progress attributes of an open checkpoint (written by every format version).
TrainState read_train_state(hid_t file, const std::string& path) {
  auto need = [&](const char* key) {
    const auto v = h5::read_int_attr(file, key);
    MESHTRAIN_REQUIRE(v.has_value(), "checkpoint %s lacks the attribute '%s'", path.c_str(), key);
    return *v;
  };
  TrainState st;
  st.step = static_cast<int>(need("step"));
  st.cursor = static_cast<std::uint64_t>(need("data_cursor"));
  st.updates = static_cast<int>(need("optimizer_updates"));
  st.skipped = static_cast<int>(need("skipped_steps"));
  st.seed = static_cast<std::uint64_t>(need("seed"));
  st.tokens_seen = static_cast<std::uint64_t>(need("tokens_seen"));
  return st;
}

/// What `path` of checkpoint.init_from is.
enum class WeightsKind { Hdf5, Safetensors, Gguf };

/// Decides on rank 0 (file-system lookups) and shares the answer; resolves a checkpoint
/// directory to its newest checkpoint.
std::pair<WeightsKind, std::string> classify_weights(const MpiComm& comm, const std::string& path) {
  std::string resolved;
  int kind = 0;
  agree_on_errors(comm, [&] {
    if (comm.rank() != 0) return;
    std::error_code ec;
    MESHTRAIN_REQUIRE(fs::exists(path, ec), "checkpoint.init_from=%s: no such file or directory", path.c_str());
    if (fs::is_directory(path, ec) && !fs::exists(path + "/model.safetensors", ec) &&
        !fs::exists(path + "/model.safetensors.index.json", ec)) {
      resolved = newest_checkpoint(path);  // a checkpoint directory: its newest checkpoint
      MESHTRAIN_REQUIRE(!resolved.empty(),
                        "checkpoint.init_from=%s: the directory holds no model.safetensors, no "
                        "model.safetensors.index.json and no complete checkpoint (step_*.h5)",
                        path.c_str());
      kind = 0;
      return;
    }
    resolved = path;
    h5::QuietErrors quiet;
    kind = fs::is_regular_file(path, ec) && H5Fis_hdf5(path.c_str()) > 0 ? 0
           : fs::is_regular_file(path, ec) && looks_like_gguf(path)     ? 2
                                                                        : 1;
  });
  MPI_CHECK(MPI_Bcast(&kind, 1, MPI_INT, 0, comm.get()));
  long long n = static_cast<long long>(resolved.size());
  MPI_CHECK(MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, comm.get()));
  resolved.resize(static_cast<std::size_t>(n));
  if (n > 0) MPI_CHECK(MPI_Bcast(resolved.data(), static_cast<int>(n), MPI_CHAR, 0, comm.get()));
  return {kind == 0 ? WeightsKind::Hdf5 : kind == 1 ? WeightsKind::Safetensors : WeightsKind::Gguf, resolved};
}

}  // namespace

template <class T>
TrainState load(parallel::FsdpEngine<T>& eng, const Mesh& mesh, const train::RunSetup& setup, const std::string& path,
                IoStats* stats) {
  const MpiComm& comm = mesh.world();
  MPI_CHECK(MPI_Barrier(comm.get()));
  const double t0 = now_seconds();
  agree_on_errors(comm, [&] {
    if (comm.rank() == 0) format::validate(path, eng.specs(), {true, &setup.dims});
  });
  TrainState st;
  std::uint64_t bytes = 0;
  {
    h5::Handle fapl = h5::mpio_fapl(comm.get());
    h5::Handle file = h5::file(H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get())));
    agree_on_errors(comm, [&] { st = read_train_state(file.get(), path); });
    bytes = read_checkpoint_state(eng, file.get(), 3);
  }
  eng.params_updated();
  bytes = sum_over(comm, bytes);
  MPI_CHECK(MPI_Barrier(comm.get()));
  if (stats) *stats = IoStats{path, now_seconds() - t0, bytes, true};
  return st;
}

template <class T>
void load_weights(parallel::FsdpEngine<T>& eng, const Mesh& mesh, const model::ModelDims& dims, const std::string& path,
                  std::uint64_t seed, IoStats* stats) {
  const MpiComm& comm = mesh.world();
  MPI_CHECK(MPI_Barrier(comm.get()));
  const double t0 = now_seconds();
  // Plain variables, not a structured binding: the lambdas below capture them (C++17 does
  // not allow capturing structured bindings; nvcc warns about it).
  const std::pair<WeightsKind, std::string> classified = classify_weights(comm, path);
  const WeightsKind kind = classified.first;
  const std::string& resolved = classified.second;
  std::uint64_t bytes = 0;
  if (kind == WeightsKind::Hdf5) {
    agree_on_errors(comm, [&] {
      if (comm.rank() == 0) format::validate(resolved, eng.specs(), {false, nullptr, true});
    });
    h5::Handle fapl = h5::mpio_fapl(comm.get());
    h5::Handle file = h5::file(H5_CHECK(H5Fopen(resolved.c_str(), H5F_ACC_RDONLY, fapl.get())));
    bytes = read_checkpoint_state(eng, file.get(), 1, seed);
  } else {
    // Every rank maps the files and validates them alike (the same bytes give the same
    // verdict); rank 0 alone runs the whole-file checks (a tied head equal to the embedding).
    std::unique_ptr<ImportedWeights> w;
    agree_on_errors(comm, [&] {
      if (kind == WeightsKind::Gguf) w = std::make_unique<GgufWeights>(resolved, eng.specs(), dims);
      else w = std::make_unique<SafetensorsWeights>(resolved, eng.specs(), dims);
      if (comm.rank() == 0) w->check_once();
    });
    bytes = fill_state(
        eng, 1,
        [&](int spec, const Piece* piece, int, float* dst) {
          if (!w->has(spec)) return false;
          if (piece) w->read(*piece, dst);
          return true;
        },
        seed);
  }
  for (int u = 0; u < eng.num_units(); ++u) {
    eng.state(u).exp_avg.zero();
    eng.state(u).exp_avg_sq.zero();
  }
  eng.params_updated();
  bytes = sum_over(comm, bytes);
  MPI_CHECK(MPI_Barrier(comm.get()));
  if (stats) *stats = IoStats{resolved, now_seconds() - t0, bytes, true};
}

template TrainState load<float>(parallel::FsdpEngine<float>&, const Mesh&, const train::RunSetup&, const std::string&,
                                IoStats*);
template TrainState load<bf16>(parallel::FsdpEngine<bf16>&, const Mesh&, const train::RunSetup&, const std::string&,
                               IoStats*);
template void load_weights<float>(parallel::FsdpEngine<float>&, const Mesh&, const model::ModelDims&,
                                  const std::string&, std::uint64_t, IoStats*);
template void load_weights<bf16>(parallel::FsdpEngine<bf16>&, const Mesh&, const model::ModelDims&, const std::string&,
                                 std::uint64_t, IoStats*);

}  // namespace meshtrain::checkpoint
