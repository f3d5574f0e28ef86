// checkpoint::load and load_weights: validate once (rank 0, serially), then every rank
// reads exactly the hyperslabs of its own state range, so any mesh loads any checkpoint.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>

#include "base_ref.hpp"
#include "format.hpp"
#include "h5.hpp"
#include "gguf_import.hpp"
#include "import.hpp"
#include "comm/collectives.hpp"
#include "checkpoint/checkpoint.hpp"
#include "checkpoint/weights_path.hpp"
#include "comm/agree.hpp"
#include "core/check.hpp"
#include "core/timer.hpp"
#include "formats/gguf_dequant.hpp"
#include "model/init.hpp"
#include "checksum.hpp"
#include "pieces.hpp"
#include "staging.hpp"

namespace meshtrain::checkpoint {
namespace {

namespace fs = std::filesystem;

/// The engine's state arrays in checkpoint order: master, exp_avg, exp_avg_sq.
Buffer<float>& state_array(parallel::UnitState& st, int k) {
  return k == 0 ? st.master : k == 1 ? st.exp_avg : st.exp_avg_sq;
}

/// The first non-finite value a rank read, if any: which tensor (spec, state array k), where.
struct NonFinite {
  int spec = -1;
  int array = 0;
  std::int64_t row = 0, col = 0;
  float value = 0;
  bool found() const { return spec >= 0; }
};

/// True when some element of [p, p + n) is NaN or Inf (host threads: a model's worth of
/// elements is scanned on every load).
bool any_non_finite(const float* p, std::int64_t n) {
  int bad = 0;
  Kokkos::parallel_reduce(
      "any_non_finite", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, n),
      [=](std::int64_t i, int& b) { b |= std::isfinite(p[i]) ? 0 : 1; }, Kokkos::BOr<int>(bad));
  return bad != 0;
}

/// Scans the elements of `piece` just read into `dst` (its first element) and records the
/// first non-finite one in `bad` (when none is recorded yet). A NaN or Inf in a checkpoint
/// or in imported weights would otherwise train into NaNs from the first step. The piece
/// is contiguous: one parallel test, and the row-by-row search only when it fails.
void find_non_finite(const Piece& piece, int array, const float* dst, NonFinite& bad) {
  if (bad.found() || !any_non_finite(dst, piece.count)) return;
  piece.for_each_row_run([&](std::int64_t at, std::int64_t row, std::int64_t col, std::int64_t n) {
    if (bad.found()) return;
    for (std::int64_t i = 0; i < n; ++i)
      if (!std::isfinite(dst[at + i])) {
        bad = NonFinite{piece.spec, array, row, col + i, dst[at + i]};
        return;
      }
  });
}

/// Sets the elements of [0, numel) outside the `written` ranges (offset, count; sorted,
/// disjoint) to zero: the padding of a unit and the parameters a load left alone.
void zero_unwritten(float* base, std::int64_t numel, const std::vector<std::pair<std::int64_t, std::int64_t>>& written) {
  std::int64_t at = 0;
  const auto zero = [&](std::int64_t end) {
    if (end > at) Kokkos::deep_copy(UView<float, HostMem>(base + at, static_cast<std::size_t>(end - at)), 0.0f);
  };
  for (const auto& [offset, count] : written) {
    MESHTRAIN_ASSERT(offset >= at, "pieces out of order (%lld < %lld)", static_cast<long long>(offset),
                     static_cast<long long>(at));
    zero(offset);
    at = offset + count;
  }
  zero(numel);
}

/// UserError on every rank when any rank found a non-finite value; `where(spec, array)`
/// names the tensor. Collective.
template <class T, class Where>
void agree_finite(const MpiComm& comm, const parallel::FsdpEngine<T>& eng, const NonFinite& bad, Where&& where) {
  agree_on_errors(comm, [&] {
    if (!bad.found()) return;
    // for_each_row_run gives a 1-D tensor's index as its row.
    const bool matrix = eng.specs()[bad.spec].shape.size() == 2;
    const std::string at = matrix ? strprintf("row %lld, column %lld", static_cast<long long>(bad.row),
                                              static_cast<long long>(bad.col))
                                  : strprintf("element %lld", static_cast<long long>(bad.row));
    throw UserError(strprintf("%s holds a non-finite value (%g at %s): the file is damaged or the weights diverged; "
                              "use an earlier checkpoint or other weights",
                              where(bad.spec, bad.array).c_str(), static_cast<double>(bad.value), at.c_str()));
  });
}

/// Fills the first `arrays` state arrays of every unit from `read(spec, piece_or_null, k, dst)`,
/// which is called for every trainable parameter slot in order on every rank (nullptr
/// where the rank's range misses the parameter) so that collective readers stay matched,
/// and returns whether it wrote the values. Padding elements become 0; so do parameters
/// `read` leaves alone, except with `init_seed`, where their master weights get their
/// initial values (model/init: LoRA adapters when loading base weights) — the only
/// initialisation a load pays for. Frozen parameters are not touched (fill_frozen). Every
/// piece read is checked for non-finite values (chunk by chunk: one piece at a time), the
/// first recorded in `bad`. With `sums`, the tensors read are marked and the elements
/// this rank owns (FsdpEngine::owned_begin: each logical element on exactly one rank) are
/// added to their checksums. Returns the bytes this rank read.
template <class T, class Read>
std::uint64_t fill_state(parallel::FsdpEngine<T>& eng, int arrays, Read&& read, NonFinite& bad,
                         std::optional<std::uint64_t> init_seed = std::nullopt, checksum::Partials* sums = nullptr) {
  std::uint64_t bytes = 0;
  for (int u = 0; u < eng.num_units(); ++u) {
    parallel::UnitState& st = eng.state(u);
    eng.master_for_write(u);  // a compute-only engine's exists from here to master_written(u)
    const model::UnitLayout& L = eng.layouts()[u];
    const std::vector<Piece> pieces =
        unit_pieces(eng.specs(), L, eng.tp_size(), eng.tp_rank(), st.begin, st.begin + st.numel, st.begin, false);
    // Host builds read straight into the state arrays (no staging copy, no second buffer
    // to first-touch); device builds stage each array through a zeroed host vector.
    std::vector<std::vector<float>> host(kDeviceIsHost ? 0 : static_cast<std::size_t>(arrays),
                                         std::vector<float>(static_cast<std::size_t>(st.numel), 0.0f));
    std::vector<float*> dst(static_cast<std::size_t>(arrays));
    for (int k = 0; k < arrays; ++k) dst[k] = kDeviceIsHost ? state_array(st, k).data() : host[k].data();
    std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> written(static_cast<std::size_t>(arrays));
    std::size_t next = 0;
    for (const model::ParamSlot& slot : L.slots) {
      if (eng.specs()[slot.spec].frozen) continue;
      const Piece* piece = next < pieces.size() && pieces[next].spec == slot.spec ? &pieces[next++] : nullptr;
      for (int k = 0; k < arrays; ++k) {
        const bool got = read(slot.spec, piece, k, piece ? dst[k] + piece->offset : nullptr);
        if (sums && got) sums->mark(slot.spec, k);
        if (piece && got) {
          find_non_finite(*piece, k, dst[k] + piece->offset, bad);
          bytes += static_cast<std::uint64_t>(piece->count) * sizeof(float);
        }
        const bool init = piece && !got && k == 0 && init_seed;
        if (init)
          model::init_unit_range(eng.specs(), L, eng.tp_size(), eng.tp_rank(), st.begin + piece->offset,
                                 st.begin + piece->offset + piece->count, *init_seed, dst[k] + piece->offset);
        if (piece && (got || init)) written[k].emplace_back(piece->offset, piece->count);
      }
    }
    if (sums) {
      // The owned range lies inside the state range just read: offsets relative to st.begin.
      const std::int64_t ob = eng.owned_begin(u), on = eng.owned_numel(u);
      for (const Piece& p : unit_pieces(eng.specs(), L, eng.tp_size(), eng.tp_rank(), ob, ob + on, st.begin, true))
        for (int k = 0; k < arrays; ++k)
          if (!eng.specs()[p.spec].frozen && sums->touched(p.spec, k)) sums->add(k, p, dst[k] + p.offset);
    }
    for (int k = 0; k < arrays; ++k) {
      if constexpr (kDeviceIsHost) zero_unwritten(dst[k], st.numel, written[k]);
      else stage_to_device(host[k], state_array(st, k));
    }
    eng.master_written(u);
  }
  return bytes;
}

/// A base given as values (not a GGUF file) for an engine that keeps its base in the
/// GGUF file's blocks: UserError naming the fix. Every rank alike (the same engine options).
template <class T>
void require_values_base(const parallel::FsdpEngine<T>& eng) {
  MESHTRAIN_REQUIRE(eng.options().base_quant != BaseQuant::Gguf,
                    "model.base_quant=gguf keeps the frozen base in the blocks of its GGUF file, but this run's base "
                    "weights are not a GGUF file: set checkpoint.init_from to a .gguf file (or to a LoRA checkpoint "
                    "whose base is one), or model.base_quant=nf4 or none");
}

/// Fills the rank's frozen values of unit u from `read(spec, piece_or_null, 0, dst)`, called
/// for every frozen slot of the unit in order on every rank; padding becomes 0; each piece is
/// checked for non-finite values (the first recorded in `bad`). With `sums` (and `coord`,
/// this rank's mesh coordinates) the values this rank is the one to verify are added to the
/// checksums of /model. Returns the bytes this rank read.
template <class T, class Read>
std::uint64_t fill_frozen_unit(parallel::FsdpEngine<T>& eng, int u, Read& read, NonFinite& bad,
                               checksum::Partials* sums = nullptr, const MeshCoord* coord = nullptr) {
  std::uint64_t bytes = 0;
  const std::int64_t b = eng.frozen_begin(u), n = eng.frozen_numel(u);
  if (n == 0) return 0;
  const model::UnitLayout& L = eng.layouts()[u];
  const std::vector<Piece> pieces = unit_pieces(eng.specs(), L, eng.tp_size(), eng.tp_rank(), b, b + n, b, false);
  std::vector<float> host(static_cast<std::size_t>(n), 0.0f);
  std::size_t next = 0;
  for (const model::ParamSlot& slot : L.slots) {
    if (!eng.specs()[slot.spec].frozen) continue;
    const Piece* piece = next < pieces.size() && pieces[next].spec == slot.spec ? &pieces[next++] : nullptr;
    const bool got = read(slot.spec, piece, 0, piece ? host.data() + piece->offset : nullptr);
    if (sums && got) sums->mark(slot.spec, 0);
    if (piece && got) {
      find_non_finite(*piece, 0, host.data() + piece->offset, bad);
      bytes += static_cast<std::uint64_t>(piece->count) * sizeof(float);
    }
  }
  // Frozen values have no owned range: replicas (dp_replicate; every dp rank without
  // sharding) hold the same values, so replicate 0 verifies its shard, or dp rank 0 the
  // whole segment when it is not sharded; counted_only leaves replicated-over-tp
  // parameters to tp rank 0.
  const bool sharded = n < L.frozen_padded();
  if (sums && coord && coord->replicate == 0 && (sharded || coord->shard == 0))
    for (const Piece& p : unit_pieces(eng.specs(), L, eng.tp_size(), eng.tp_rank(), b, b + n, b, true))
      if (eng.specs()[p.spec].frozen && sums->touched(p.spec, 0)) sums->add(0, p, host.data() + p.offset);
  // From the host: set_frozen stages it in chunks, so no fp32 copy of the shard is in the
  // pool (SmolLM2's embedding alone is 108 MiB, beyond what `plan` counts on one rank).
  eng.set_frozen(u, host.data());
  return bytes;
}

/// fill_frozen_unit for every unit: the rank's frozen values (the base under LoRA).
template <class T, class Read>
std::uint64_t fill_frozen(parallel::FsdpEngine<T>& eng, Read&& read, NonFinite& bad,
                          checksum::Partials* sums = nullptr, const MeshCoord* coord = nullptr) {
  require_values_base(eng);
  std::uint64_t bytes = 0;
  for (int u = 0; u < eng.num_units(); ++u) bytes += fill_frozen_unit(eng, u, read, bad, sums, coord);
  return bytes;
}

/// model.base_quant=gguf: the rank's frozen shards straight from the mapped GGUF file. For
/// each unit, the blocks of this rank's shard (FsdpEngine::gguf_map) are copied as the file
/// stores them into one shard-sized byte buffer (staged on the host, then set), and the 1-D
/// parameters (norm weights) are read as floats: no matrix is ever dequantized here, so no
/// fp32 copy of one exists (the values come from kernels::dequantize_gguf, unit by unit,
/// before each compute). A block whose scale (or a float weight) is NaN or infinite is
/// recorded in `bad`, as fill_frozen records a non-finite value. The outer unit with
/// model.base_quant_embeddings=false is not kept in blocks: its values come from `read` (the
/// file's dequantization, as fill_frozen_unit reads them), rounded to T. Returns this rank's
/// bytes. Not collective.
template <class T, class Read>
std::uint64_t fill_frozen_gguf(parallel::FsdpEngine<T>& eng, const GgufWeights& w, Read&& read, NonFinite& bad) {
  std::uint64_t bytes = 0;
  const int shard = eng.frozen_shard();
  for (int u = 0; u < eng.num_units(); ++u) {
    if (eng.frozen_numel(u) == 0) continue;
    if (eng.unit_quant(u) != BaseQuant::Gguf) {
      bytes += fill_frozen_unit(eng, u, read, bad);
      continue;
    }
    const parallel::GgufMap& map = eng.gguf_map(u);
    std::vector<std::uint8_t> payload(static_cast<std::size_t>(map.stride), 0);
    for (std::size_t r = 0; r < map.runs.size(); ++r) {
      const parallel::GgufMap::Source& src = map.sources[r];
      if (src.spec < 0 || src.shard != shard) continue;
      const model::ParamSpec& p = eng.specs()[static_cast<std::size_t>(src.spec)];
      const auto type = static_cast<formats::GgmlType>(map.runs[r].type);
      MESHTRAIN_REQUIRE(w.type(src.spec) == type,
                        "base weights: tensor %s is %s, but the run was laid out for %s: the file changed while the "
                        "run started; start it again",
                        w.file_tensor_name(src.spec).c_str(), formats::ggml_type_name(w.type(src.spec)),
                        formats::ggml_type_name(type));
      const formats::GgmlTypeTraits& tr = *formats::ggml_type_traits(map.runs[r].type);
      const std::int64_t cols = p.shape[1], be = tr.block_elements, bb = tr.block_bytes;
      // The run's blocks, row by row (rows of a q/k projection are permuted in the file).
      std::uint8_t* dst = payload.data() + src.shard_byte;
      for (std::int64_t g = src.global, left = map.runs[r].numel; left > 0;) {
        const std::int64_t row = g / cols, col = g % cols, n = std::min(left, cols - col);
        const std::byte* from = w.row_data(src.spec, row) + (col / be) * bb;
        const std::int64_t bad_block = formats::gguf_first_nonfinite_block(type, from, n / be);
        if (bad_block >= 0 && !bad.found())
          bad = NonFinite{src.spec, 0, row, col + bad_block * be, std::numeric_limits<float>::quiet_NaN()};
        std::memcpy(dst, from, static_cast<std::size_t>(n / be * bb));
        dst += n / be * bb;
        g += n;
        left -= n;
      }
    }
    std::vector<float> dense(static_cast<std::size_t>(map.dense_numel()));
    std::int64_t at = 0;
    for (const model::DenseSlot& d : map.dense) {
      for (const Piece& piece : unit_pieces(eng.specs(), eng.layouts()[u], eng.tp_size(), eng.tp_rank(), d.offset,
                                            d.offset + d.numel, d.offset - at, false)) {
        w.read(piece, dense.data() + piece.offset);
        find_non_finite(piece, 0, dense.data() + piece.offset, bad);
      }
      at += d.numel;
    }
    bytes += static_cast<std::uint64_t>(map.shard_bytes[static_cast<std::size_t>(shard)]) + dense.size() * sizeof(float);
    eng.set_frozen_gguf(u, payload.data(), dense.data());
  }
  return bytes;
}

/// The trainable parameters: the datasets an adapters-only (LoRA) checkpoint holds, and
/// every parameter of a run without frozen ones.
std::vector<model::ParamSpec> trainable_specs(const std::vector<model::ParamSpec>& specs) {
  std::vector<model::ParamSpec> out;
  for (const model::ParamSpec& p : specs)
    if (!p.frozen) out.push_back(p);
  return out;
}

/// The first tensor whose read failed on this rank (spec, state array): HDF5 decodes each
/// chunk of a chunked dataset through its filters, so a chunk that fails its Fletcher32
/// checksum or does not decompress fails H5Dread itself, before the CRC-32C of the tensor
/// is computed. Recorded instead of aborting, so that every rank still makes the same
/// H5Dread calls, and agreed on afterwards (agree_readable): one "damaged" UserError.
struct DamagedRead {
  int spec = -1;
  int array = 0;
  bool found() const { return spec >= 0; }
  void record(int s, int k) {
    if (!found()) *this = DamagedRead{s, k};
  }
};

/// UserError on every rank when any rank's read of a tensor failed; `where(spec, array)`
/// names the tensor. Collective; before the checksums (whose mismatch would be a
/// consequence, not the cause).
template <class Where>
void agree_readable(const MpiComm& comm, const DamagedRead& damaged, Where&& where) {
  agree_on_errors(comm, [&] {
    if (!damaged.found()) return;
    throw UserError(strprintf("%s cannot be read: the file is damaged (an HDF5 chunk fails its checksum or does not "
                              "decompress); use an earlier checkpoint or other weights",
                              where(damaged.spec, damaged.array).c_str()));
  });
}

/// Read of `piece` (nullptr: an empty selection) of dataset `ds` into `dst`; false when
/// HDF5 could not decode the data (a damaged chunk: DamagedRead), without HDF5's error stack.
bool read_piece(hid_t ds, hid_t dxpl, const Piece* piece, float* dst) {
  h5::Handle fspace = h5::space(H5_CHECK(H5Dget_space(ds)));
  H5_CHECK(H5Sselect_none(fspace.get()));
  const hsize_t n = piece ? static_cast<hsize_t>(piece->count) : 1;
  h5::Handle mspace = h5::space(H5_CHECK(H5Screate_simple(1, &n, nullptr)));
  float dummy = 0;
  if (piece) h5::select_piece(fspace.get(), *piece);
  else H5_CHECK(H5Sselect_none(mspace.get()));
  h5::QuietErrors quiet;
  return H5Dread(ds, H5T_NATIVE_FLOAT, mspace.get(), fspace.get(), dxpl, piece ? dst : &dummy) >= 0;
}

/// Reads arrays 0..arrays-1 (/model, /optim/exp_avg, /optim/exp_avg_sq) of a validated
/// checkpoint collectively into the engine's trainable state (and, with `frozen`, /model
/// into its frozen values); returns this rank's bytes. With `lora_init_seed` LoRA adapters
/// the file lacks get their initial values (the same decision on every rank: same file).
/// A tensor that does not match its checksum, or else a non-finite value in any of them,
/// is a UserError naming the dataset (every rank alike).
template <class T>
std::uint64_t read_checkpoint_state(parallel::FsdpEngine<T>& eng, const parallel::DeviceMesh& mesh, hid_t file,
                                    const std::string& file_path, int arrays,
                                    std::optional<std::uint64_t> lora_init_seed = std::nullopt, bool frozen = false) {
  const MpiComm& comm = mesh.world().mpi();
  const char* groups[3] = {format::kModelGroup, format::kExpAvgGroup, format::kExpAvgSqGroup};
  h5::Handle dxpl = h5::piece_dxpl();
  NonFinite bad;
  DamagedRead damaged;
  const auto read = [&](int spec, const Piece* piece, int k, float* dst) {
    const std::string path = format::dataset_path(groups[k], eng.specs()[spec].name);
    if (lora_init_seed && eng.specs()[spec].is_lora && !h5::link_exists(file, path)) return false;
    h5::Handle ds = h5::dataset(H5_CHECK(H5Dopen2(file, path.c_str(), H5P_DEFAULT)));
    if (!read_piece(ds.get(), dxpl.get(), piece, dst)) damaged.record(spec, k);
    return true;
  };
  checksum::Partials sums(eng.specs(), arrays);
  std::uint64_t bytes = frozen ? fill_frozen(eng, read, bad, &sums, &mesh.coord()) : 0;
  bytes += fill_state(eng, arrays, read, bad, lora_init_seed, &sums);
  const auto ds_path = [&](int spec, int k) { return format::dataset_path(groups[k], eng.specs()[spec].name); };
  const auto where = [&](int spec, int k) {
    return strprintf("checkpoint %s: dataset %s", file_path.c_str(), ds_path(spec, k).c_str());
  };
  // Unreadable chunks, then checksums: a damaged value is named as damage, not as divergence.
  agree_readable(comm, damaged, where);
  checksum::verify(comm, file, file_path, sums, ds_path, where);
  agree_finite(comm, eng, bad, where);
  return bytes;
}

std::uint64_t sum_over(const MpiComm& comm, std::uint64_t v) { return all_reduce_value(comm, v, ReduceOp::Sum); }

/// Progress attributes of an open checkpoint (written by every format version). A damaged
/// counter must not reach the schedule (a negative step gives a negative learning rate) or
/// the sampler: each is range-checked against what a save can write.
TrainState read_train_state(hid_t file, const std::string& path) {
  auto need = [&](const char* key) {
    const auto v = h5::read_int_attr(file, key);
    MESHTRAIN_REQUIRE(v.has_value(), "checkpoint %s lacks the attribute '%s'", path.c_str(), key);
    return *v;
  };
  auto need_unsigned = [&](const char* key) {
    const auto v = h5::read_uint_attr(file, key);
    MESHTRAIN_REQUIRE(v.has_value(), "checkpoint %s lacks the attribute '%s'", path.c_str(), key);
    return *v;
  };
  auto impossible = [&](const char* key, const std::string& value, const char* rule) {
    return UserError(strprintf("checkpoint %s: attribute '%s' = %s is impossible (%s); the file is damaged, use an "
                               "earlier checkpoint",
                               path.c_str(), key, value.c_str(), rule));
  };
  auto in_range = [&](const char* key, std::int64_t v, std::int64_t lo, std::int64_t hi, const char* rule) {
    if (v < lo || v > hi) throw impossible(key, std::to_string(v), rule);
    return v;
  };
  TrainState st;
  st.step = static_cast<int>(in_range("step", need("step"), 0, INT32_MAX, "it must be in 0 .. 2^31-1"));
  st.updates = static_cast<int>(
      in_range("optimizer_updates", need("optimizer_updates"), 0, st.step, "it must be in 0 .. step"));
  st.skipped = static_cast<int>(in_range("skipped_steps", need("skipped_steps"), 0, st.step - st.updates,
                                         "it must be in 0 .. step - optimizer_updates"));
  // Windows and tokens are uint64 counters. A step reads at most train.global_batch
  // (<= 2^30) windows of at most model.max_seq_len (<= 2^22) tokens; a wrapped counter
  // (a "negative" one) is far past both.
  st.cursor = need_unsigned("data_cursor");
  if (st.cursor > static_cast<std::uint64_t>(st.step) << 30)
    throw impossible("data_cursor", std::to_string(st.cursor),
                     "a step reads at most 2^30 windows, so it must be at most step x 2^30");
  st.tokens_seen = need_unsigned("tokens_seen");
  if (static_cast<unsigned __int128>(st.tokens_seen) > static_cast<unsigned __int128>(st.cursor) << 22)
    throw impossible("tokens_seen", std::to_string(st.tokens_seen),
                     "a window holds at most 2^22 tokens, so it must be at most data_cursor x 2^22");
  st.seed = static_cast<std::uint64_t>(need("seed"));  // any 64-bit pattern is a seed
  return st;
}

/// What `path` of checkpoint.init_from names (weights_path.hpp), decided on rank 0 and shared.
std::pair<WeightsKind, std::string> classify_weights(const MpiComm& comm, const std::string& path) {
  WeightsPath w;
  agree_on_errors(comm, [&] {
    if (comm.rank() == 0) w = classify_weights_path(path, "checkpoint.init_from=" + path);
  });
  const int kind = broadcast_value(comm, static_cast<int>(w.kind));
  return {static_cast<WeightsKind>(kind), broadcast_string(comm, w.path)};
}

/// Frozen values (the base under LoRA) from weights `resolved` of kind `kind`: an HDF5
/// checkpoint's /model, a safetensors file/directory or a GGUF file. Returns this rank's bytes. Collective.
/// Safetensors or GGUF weights at `resolved`, mapped and validated alike on every rank (the
/// same bytes give the same verdict); rank 0 alone runs the whole-file checks (a tied head
/// equal to the embedding). Collective.
std::unique_ptr<ImportedWeights> open_imported(const MpiComm& comm, WeightsKind kind, const std::string& resolved,
                                               const std::vector<model::ParamSpec>& specs, const model::ModelDims& dims) {
  std::unique_ptr<ImportedWeights> w;
  agree_on_errors(comm, [&] {
    if (kind == WeightsKind::Gguf) w = std::make_unique<GgufWeights>(resolved, specs, dims);
    else w = std::make_unique<SafetensorsWeights>(resolved, specs, dims);
    if (comm.rank() == 0) w->check_once();
  });
  return w;
}

/// The fill_frozen / fill_state reader over imported weights: a parameter the file lacks is
/// left to the caller (false), a piece is read as the file stores it.
auto imported_reader(const ImportedWeights& w) {
  return [&w](int spec, const Piece* piece, int, float* dst) {
    if (!w.has(spec)) return false;
    if (piece) w.read(*piece, dst);
    return true;
  };
}

template <class T>
std::uint64_t read_frozen_from(parallel::FsdpEngine<T>& eng, const parallel::DeviceMesh& mesh,
                               const model::ModelDims& dims, WeightsKind kind, const std::string& resolved) {
  const MpiComm& comm = mesh.world().mpi();
  if (kind == WeightsKind::Hdf5) {
    std::vector<model::ParamSpec> frozen;
    for (const model::ParamSpec& p : eng.specs())
      if (p.frozen) frozen.push_back(p);
    agree_on_errors(comm, [&] {
      if (comm.rank() == 0) format::validate(resolved, frozen, {false, nullptr, false});
    });
    h5::Handle fapl = h5::mpio_fapl(comm.get());
    h5::Handle file = h5::file(H5_CHECK(H5Fopen(resolved.c_str(), H5F_ACC_RDONLY, fapl.get())));
    h5::Handle dxpl = h5::piece_dxpl();
    NonFinite bad;
    DamagedRead damaged;
    checksum::Partials sums(eng.specs(), 1);
    const std::uint64_t bytes = fill_frozen(eng, [&](int spec, const Piece* piece, int, float* dst) {
      const std::string path = format::dataset_path(format::kModelGroup, eng.specs()[spec].name);
      h5::Handle ds = h5::dataset(H5_CHECK(H5Dopen2(file.get(), path.c_str(), H5P_DEFAULT)));
      if (!read_piece(ds.get(), dxpl.get(), piece, dst)) damaged.record(spec, 0);
      return true;
    }, bad, &sums, &mesh.coord());
    const auto ds_path = [&](int spec, int) { return format::dataset_path(format::kModelGroup, eng.specs()[spec].name); };
    const auto where = [&](int spec, int k) {
      return strprintf("base weights %s: dataset %s", resolved.c_str(), ds_path(spec, k).c_str());
    };
    agree_readable(comm, damaged, where);
    checksum::verify(comm, file.get(), resolved, sums, ds_path, where);
    agree_finite(comm, eng, bad, where);
    return bytes;
  }
  if (kind != WeightsKind::Gguf) require_values_base(eng);
  const std::unique_ptr<ImportedWeights> w = open_imported(comm, kind, resolved, eng.specs(), dims);
  NonFinite bad;
  const std::uint64_t bytes = eng.options().base_quant == BaseQuant::Gguf
                                  ? fill_frozen_gguf(eng, static_cast<const GgufWeights&>(*w), imported_reader(*w), bad)
                                  : fill_frozen(eng, imported_reader(*w), bad);
  agree_finite(comm, eng, bad, [&](int spec, int) {
    return strprintf("base weights %s: tensor %s", resolved.c_str(), w->file_tensor_name(spec).c_str());
  });
  return bytes;
}

/// The base weights `ref` of LoRA checkpoint `checkpoint` into the engine's frozen values,
/// after checking on rank 0 that they are still the same (UserError naming the path). A
/// random base is re-initialised from its seed, which also resets the trainable state:
/// call this before reading it. Returns this rank's bytes. Collective.
template <class T>
std::uint64_t read_base(parallel::FsdpEngine<T>& eng, const parallel::DeviceMesh& mesh, const model::ModelDims& dims,
                        const BaseRef& ref, const std::string& checkpoint) {
  const MpiComm& comm = mesh.world().mpi();
  if (ref.path.empty()) {
    // The initialisation from the recorded seed is the base only under the same init_std.
    MESHTRAIN_REQUIRE(ref.init_std == 0 || ref.init_std == dims.init_std,
                      "checkpoint %s holds LoRA adapters only; its base is the random initialisation from "
                      "train.seed=%llu with model.init_std=%g, and this run has model.init_std=%g, which would "
                      "rebuild another base: set model.init_std=%g",
                      checkpoint.c_str(), static_cast<unsigned long long>(ref.seed), ref.init_std, dims.init_std,
                      ref.init_std);
    require_values_base(eng);
    eng.init_parameters(ref.seed);
    return 0;
  }
  agree_on_errors(comm, [&] {
    if (comm.rank() == 0) check_base(ref, checkpoint);
  });
  const std::pair<WeightsKind, std::string> classified = classify_weights(comm, ref.path);
  return read_frozen_from(eng, mesh, dims, classified.first, classified.second);
}

/// The base reference of `path` when it is a readable checkpoint that has one (quiet: the
/// validation that follows names any problem with the file). Not collective.
std::optional<BaseRef> peek_base_ref(const std::string& path) {
  h5::QuietErrors quiet;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec) || H5Fis_hdf5(path.c_str()) <= 0) return std::nullopt;
  h5::Handle f = h5::file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, h5::serial_fapl().get()));
  return f.valid() ? read_base_ref(f.get()) : std::nullopt;
}

/// UserError when `path` holds LoRA adapters only but the engine has no frozen base: the
/// run lacks the model.lora_* settings of the run that wrote it. `what` names the setting.
template <class T>
void require_lora_settings(const parallel::FsdpEngine<T>& eng, const std::string& path, const char* what) {
  if (eng.has_frozen()) return;
  const std::optional<BaseRef> ref = peek_base_ref(path);
  if (!ref) return;
  // Name the adapters the file holds, so the user can copy them (files from before the LoRA
  // settings were stored only say that some are needed).
  const LoraSettings stored = stored_lora_settings(path);
  const std::string settings = stored.recorded && stored.rank > 0 ? stored.str() : std::string("the model.lora_* settings");
  MESHTRAIN_REQUIRE(false,
                    "%s%s holds LoRA adapters only (base weights: %s), but this run has no LoRA adapters: set %s "
                    "(those of the run that wrote it)",
                    what, path.c_str(), !ref->path.empty() ? ref->path.c_str() : "random initialisation",
                    settings.c_str());
}

/// The base reference of checkpoint `path` (every rank reads the same file: same answer).
std::optional<BaseRef> base_ref_of(const MpiComm& comm, const std::string& path) {
  std::optional<BaseRef> ref;
  agree_on_errors(comm, [&] {
    h5::Handle f = h5::file(H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, h5::serial_fapl().get())));
    ref = read_base_ref(f.get());
  });
  return ref;
}

}  // namespace

template <class T>
TrainState load(parallel::FsdpEngine<T>& eng, const parallel::DeviceMesh& mesh, const CheckpointMeta& meta,
                const std::string& path, IoStats* stats) {
  const MpiComm& comm = mesh.world().mpi();
  barrier(comm);
  const double t0 = now_seconds();
  // A LoRA run's checkpoint holds the adapters only and names its base; one written before
  // base references (or by a run without frozen parameters) holds every parameter.
  const std::vector<model::ParamSpec> trainable = trainable_specs(eng.specs());
  agree_on_errors(comm, [&] {
    if (comm.rank() != 0) return;
    require_lora_settings(eng, path, "checkpoint ");
    format::validate(path, trainable, {true, &meta.dims});
  });
  const std::optional<BaseRef> ref = base_ref_of(comm, path);
  agree_on_errors(comm, [&] {
    if (comm.rank() == 0 && eng.has_frozen() && !ref) format::validate(path, eng.specs(), {true, &meta.dims});
  });
  TrainState st;
  std::uint64_t bytes = 0;
  if (eng.has_frozen() && ref) bytes += read_base(eng, mesh, meta.dims, *ref, path);
  {
    h5::Handle fapl = h5::mpio_fapl(comm.get());
    h5::Handle file = h5::file(H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get())));
    agree_on_errors(comm, [&] { st = read_train_state(file.get(), path); });
    // A forward-only engine (eval, generate) has no moments to read them into.
    const int arrays = eng.options().forward_only ? 1 : 3;
    bytes += read_checkpoint_state(eng, mesh, file.get(), path, arrays, std::nullopt,
                                   /*frozen=*/eng.has_frozen() && !ref);
  }
  // An old full LoRA checkpoint: its base is in the file itself.
  if (eng.has_frozen()) st.base = ref ? *ref : describe_base(path);
  eng.params_updated();
  bytes = sum_over(comm, bytes);
  barrier(comm);
  if (stats) *stats = IoStats{path, now_seconds() - t0, bytes, true};
  return st;
}

template <class T>
BaseRef load_weights(parallel::FsdpEngine<T>& eng, const parallel::DeviceMesh& mesh, const model::ModelDims& dims,
                     const std::string& path, std::uint64_t seed, IoStats* stats, bool* adapters_loaded) {
  const MpiComm& comm = mesh.world().mpi();
  barrier(comm);
  const double t0 = now_seconds();
  // Plain variables, not a structured binding: the lambdas below capture them (C++17 does
  // not allow capturing structured bindings; nvcc warns about it).
  const std::pair<WeightsKind, std::string> classified = classify_weights(comm, path);
  const WeightsKind kind = classified.first;
  const std::string& resolved = classified.second;
  std::uint64_t bytes = 0;
  BaseRef base;
  if (comm.rank() == 0) base = describe_base(resolved);
  broadcast(comm, base);
  if (kind == WeightsKind::Hdf5) {
    // A LoRA checkpoint brings its adapters and names its base: the base comes from there.
    agree_on_errors(comm, [&] {
      if (comm.rank() != 0) return;
      require_lora_settings(eng, resolved, "checkpoint.init_from=");
      const bool adapters_only = peek_base_ref(resolved).has_value();
      format::validate(resolved, adapters_only ? trainable_specs(eng.specs()) : eng.specs(), {false, nullptr, true, &dims});
    });
    const std::optional<BaseRef> ref = base_ref_of(comm, resolved);
    if (ref) {
      bytes += read_base(eng, mesh, dims, *ref, resolved);
      base = *ref;
    }
    h5::Handle fapl = h5::mpio_fapl(comm.get());
    h5::Handle file = h5::file(H5_CHECK(H5Fopen(resolved.c_str(), H5F_ACC_RDONLY, fapl.get())));
    if (adapters_loaded)
      *adapters_loaded = std::any_of(eng.specs().begin(), eng.specs().end(), [&](const model::ParamSpec& p) {
        return p.is_lora && h5::link_exists(file.get(), format::dataset_path(format::kModelGroup, p.name));
      });
    bytes += read_checkpoint_state(eng, mesh, file.get(), resolved, 1, seed, /*frozen=*/!ref);
  } else {
    // Every rank maps the files and validates them alike (the same bytes give the same
    // verdict); rank 0 alone runs the whole-file checks (a tied head equal to the embedding).
    const std::unique_ptr<ImportedWeights> w = open_imported(comm, kind, resolved, eng.specs(), dims);
    if (adapters_loaded) {
      *adapters_loaded = false;
      for (std::size_t i = 0; i < eng.specs().size(); ++i)
        if (eng.specs()[i].is_lora && w->has(static_cast<int>(i))) *adapters_loaded = true;
    }
    NonFinite bad;
    const auto read = imported_reader(*w);
    bytes = eng.options().base_quant == BaseQuant::Gguf && kind == WeightsKind::Gguf
                ? fill_frozen_gguf(eng, static_cast<const GgufWeights&>(*w), read, bad)
                : fill_frozen(eng, read, bad);
    bytes += fill_state(eng, 1, read, bad, seed);
    agree_finite(comm, eng, bad, [&](int spec, int) {
      return strprintf("initial weights %s: tensor %s", resolved.c_str(), w->file_tensor_name(spec).c_str());
    });
  }
  for (int u = 0; u < eng.num_units(); ++u) {
    eng.state(u).exp_avg.zero();
    eng.state(u).exp_avg_sq.zero();
  }
  eng.params_updated();
  bytes = sum_over(comm, bytes);
  barrier(comm);
  if (stats) *stats = IoStats{resolved, now_seconds() - t0, bytes, true};
  return base;
}

template TrainState load<float>(parallel::FsdpEngine<float>&, const parallel::DeviceMesh&, const CheckpointMeta&,
                                const std::string&, IoStats*);
template TrainState load<bf16>(parallel::FsdpEngine<bf16>&, const parallel::DeviceMesh&, const CheckpointMeta&,
                               const std::string&, IoStats*);
template BaseRef load_weights<float>(parallel::FsdpEngine<float>&, const parallel::DeviceMesh&, const model::ModelDims&,
                                     const std::string&, std::uint64_t, IoStats*, bool*);
template BaseRef load_weights<bf16>(parallel::FsdpEngine<bf16>&, const parallel::DeviceMesh&, const model::ModelDims&,
                                    const std::string&, std::uint64_t, IoStats*, bool*);

}  // namespace meshtrain::checkpoint
