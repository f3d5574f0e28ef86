#include "checksum.hpp"

#include <mpi.h>

#include "h5.hpp"
#include "comm/agree.hpp"
#include "core/check.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"

// The checksums are of the bytes as stored, little-endian float32: memory holds the same
// bytes only on a little-endian host.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "checkpoint checksums assume a little-endian host");

namespace meshtrain::checkpoint::checksum {

Partials::Partials(const std::vector<model::ParamSpec>& specs, int arrays)
    : specs_(specs), arrays_(arrays), touched_(specs.size() * static_cast<std::size_t>(arrays), 0) {
  parts_.reserve(touched_.size());
  for (const model::ParamSpec& p : specs)
    for (int k = 0; k < arrays; ++k) parts_.emplace_back(static_cast<std::uint64_t>(p.numel()) * sizeof(float));
}

void Partials::add(int k, const Piece& piece, const float* data) {
  const double t0 = now_seconds();
  const model::ParamSpec& p = specs_[piece.spec];
  const std::int64_t cols = p.shape.size() > 1 ? p.shape[1] : 1;
  crc32c::Contribution& c = parts_[slot(piece.spec, k)];
  piece.for_each_contiguous_run(cols, [&](std::int64_t at, std::int64_t pos, std::int64_t n) {
    c.add(static_cast<std::uint64_t>(pos) * sizeof(float), data + at, static_cast<std::size_t>(n) * sizeof(float));
  });
  seconds_ += now_seconds() - t0;
}

std::vector<std::uint32_t> Partials::reduce(const MpiComm& comm) const {
  std::vector<std::uint32_t> v(parts_.size());
  for (std::size_t i = 0; i < parts_.size(); ++i) v[i] = parts_[i].get();
  // xor: the contributions of disjoint segments add up over GF(2). (The communicator
  // wrappers reduce with sum, max and min only.)
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_UINT32_T, MPI_BXOR, comm.get()));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const model::ParamSpec& p = specs_[i / static_cast<std::size_t>(arrays_)];
    v[i] = crc32c::finish(v[i], static_cast<std::uint64_t>(p.numel()) * sizeof(float));
  }
  return v;
}

void write(hid_t file, const Partials& parts, const std::vector<std::uint32_t>& crcs, const std::vector<hid_t>& datasets) {
  h5::write_attr(file, kFileAttr, std::string(kAlgorithm));
  for (std::size_t i = 0; i < datasets.size(); ++i)
    if (datasets[i] >= 0) h5::write_attr(datasets[i], kTensorAttr, crcs[i]);
}

bool present(hid_t file, const std::string& path, bool notice) {
  h5::QuietErrors quiet;
  const std::optional<std::string> algo = h5::read_string_attr(file, kFileAttr);
  if (!algo) {
    // Warnings are printed by every rank: one line per file is enough.
    if (notice)
      log::warn("checkpoint %s has no tensor checksums (written before meshtrain stored them): its tensors are read "
                "unverified",
                path.c_str());
    return false;
  }
  MESHTRAIN_REQUIRE(*algo == kAlgorithm,
                    "checkpoint %s: attribute '%s' = '%s' names an unknown checksum algorithm (this meshtrain knows "
                    "'%s'): the file is damaged or a newer meshtrain wrote it",
                    path.c_str(), kFileAttr, algo->c_str(), kAlgorithm);
  return true;
}

std::uint32_t stored(hid_t file, const std::string& ds_path, const std::string& where) {
  h5::QuietErrors quiet;
  h5::Handle ds = h5::dataset(H5Dopen2(file, ds_path.c_str(), H5P_DEFAULT));
  const std::optional<std::uint64_t> v = ds.valid() ? h5::read_uint_attr(ds.get(), kTensorAttr) : std::nullopt;
  MESHTRAIN_REQUIRE(v && *v <= 0xFFFFFFFFu,
                    "%s has no valid checksum (attribute '%s') although the file records checksums: the file is "
                    "damaged; use an earlier checkpoint",
                    where.c_str(), kTensorAttr);
  return static_cast<std::uint32_t>(*v);
}

void require_match(std::uint32_t expected, std::uint32_t computed, const std::string& where) {
  MESHTRAIN_REQUIRE(expected == computed,
                    "%s does not match its checksum (CRC-32C 0x%08x in the file, 0x%08x of the bytes read): the file "
                    "is damaged; use an earlier checkpoint",
                    where.c_str(), expected, computed);
}

void verify(const MpiComm& comm, hid_t file, const std::string& path, const Partials& parts,
            const std::function<std::string(int, int)>& ds_path, const std::function<std::string(int, int)>& where) {
  // Every rank reads the same attributes (collective metadata reads), so every rank
  // reaches the same verdict; agree_on_errors keeps it so should one rank fail alone.
  bool have = false;
  agree_on_errors(comm, [&] { have = present(file, path, comm.rank() == 0); });
  if (!have) return;
  const std::vector<std::uint32_t> crcs = parts.reduce(comm);
  agree_on_errors(comm, [&] {
    for (int s = 0; s < static_cast<int>(parts.specs().size()); ++s)
      for (int k = 0; k < parts.arrays(); ++k)
        if (parts.touched(s, k))
          require_match(stored(file, ds_path(s, k), where(s, k)), crcs[parts.slot(s, k)], where(s, k));
  });
}

}  // namespace meshtrain::checkpoint::checksum
