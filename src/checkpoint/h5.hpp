#pragma once
// HDF5 helpers private to src/checkpoint: RAII handles, a guard that silences HDF5's
// automatic error-stack printing (validation reports one sentence instead), attribute
// read/write, property lists for collective MPI-IO.

#include <hdf5.h>
#include <mpi.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pieces.hpp"

namespace meshtrain::checkpoint::h5 {

/// Owns one HDF5 identifier; closes it with the matching H5?close.
class Handle {
 public:
  Handle() = default;
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      close_ = o.close_;
      o.id_ = -1;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  /// Closes now (HDF5 file close is collective under MPI-IO: every rank calls it in order).
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }
  /// Closes now and returns the close call's result (0 when there was nothing to close):
  /// a file's close flushes its metadata, which is where a full disk can show up.
  herr_t close() {
    const herr_t rc = id_ >= 0 && close_ ? close_(id_) : 0;
    id_ = -1;
    return rc;
  }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

inline Handle file(hid_t id) { return Handle(id, H5Fclose); }
inline Handle group(hid_t id) { return Handle(id, H5Gclose); }
inline Handle dataset(hid_t id) { return Handle(id, H5Dclose); }
inline Handle space(hid_t id) { return Handle(id, H5Sclose); }
inline Handle plist(hid_t id) { return Handle(id, H5Pclose); }
inline Handle type(hid_t id) { return Handle(id, H5Tclose); }
inline Handle attribute(hid_t id) { return Handle(id, H5Aclose); }

/// Turns off HDF5's automatic error-stack printing for its lifetime.
class QuietErrors {
 public:
  QuietErrors();
  ~QuietErrors();
  QuietErrors(const QuietErrors&) = delete;
  QuietErrors& operator=(const QuietErrors&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

/// File access list for MPI-IO on `comm` with collective metadata reads (rank 0 reads and
/// broadcasts) and metadata writes split among the ranks (independent); the file format is
/// bounded to 1.8..1.10 so h5py of any recent age reads it and large attributes (the config
/// text) go to dense storage. MPI-IO hints: no data sieving for independent writes (a
/// read-modify-write of the holes between a rank's pieces, under file locks).
Handle mpio_fapl(MPI_Comm comm);
/// File access list for one process reading a file (validation, export): the default
/// driver without HDF5's file locking, which parallel file systems often refuse (Lustre
/// without flock) and which a read-only reader does not need.
Handle serial_fapl();
/// File access list for rank 0 creating a checkpoint file alone (the asynchronous save lays
/// the file out before each rank writes its bytes): serial_fapl with the file format and
/// alignment of mpio_fapl, so the file is laid out as a collective save lays it out.
Handle serial_create_fapl();
/// Transfer list for tensor pieces: independent MPI-IO. Each rank writes (reads) the file
/// ranges of the pieces it owns straight to (from) the file system, so no tensor byte
/// crosses the network between ranks. Collective transfers (two-phase I/O) route every
/// byte through aggregator ranks: over TCP between hosts that made a 37 MiB save ~30x
/// slower than the file system (perf/README.md, "Checkpoint saves across hosts").
/// Every rank still calls H5Dwrite/H5Dread for every dataset (with an empty selection
/// when it owns nothing): the metadata operations stay collective.
Handle piece_dxpl();

// ---- attributes (scalars and strings on any object) ---------------------------------------
void write_attr(hid_t obj, const char* name, std::int64_t v);
void write_attr(hid_t obj, const char* name, std::uint64_t v);
void write_attr(hid_t obj, const char* name, std::uint32_t v);  ///< uint32 (a tensor's CRC-32C)
void write_attr(hid_t obj, const char* name, double v);
void write_attr(hid_t obj, const char* name, const std::string& v);

/// nullopt when the attribute is absent or of another class (integer vs float vs string).
std::optional<std::int64_t> read_int_attr(hid_t obj, const char* name);
std::optional<std::uint64_t> read_uint_attr(hid_t obj, const char* name);
std::optional<double> read_double_attr(hid_t obj, const char* name);
std::optional<std::string> read_string_attr(hid_t obj, const char* name);

/// True when `path` (absolute inside the file, e.g. "/model/x") names an existing link;
/// checks every intermediate group (H5Lexists needs that).
bool link_exists(hid_t file, const std::string& path);

/// Dataspace of a logical tensor shape (1-D or 2-D).
Handle simple_space(const std::vector<std::int64_t>& shape);

/// \brief The errno behind a failed HDF5 call that wrote to `dir` (call it right after the
/// failure): errno itself when it is a storage error (HDF5 and MPI-IO leave the failed
/// write's errno in place), else ENOSPC when HDF5's error stack or the file system's free
/// space says the disk is full, else EIO.
int io_errno(const std::string& dir, std::uint64_t bytes_needed);

/// Selects (in addition to what is selected) the union of the piece's logical rectangles
/// in the dataspace of its tensor (1-D tensors use the rows of each box).
///
/// With a contiguous memory buffer on the other side this is exactly the piece: HDF5
/// transfers a selection's elements in the dataset's row-major order, the piece is a run
/// of TP-local elements in row-major order, and the TP-local -> logical map is monotone in
/// row-major order (a row split maps local rows to increasing logical rows with columns
/// unchanged; a column split maps the columns of each row to increasing logical columns,
/// chunk by chunk for fused splits such as q|k|v). So element i of the run is element i
/// of the selection.
void select_piece(hid_t space, const Piece& piece);

}  // namespace meshtrain::checkpoint::h5
