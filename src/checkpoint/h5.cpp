#include "h5.hpp"

#include <sys/statvfs.h>

#include <cerrno>

#include "runtime/mpi_info.hpp"
#include "core/check.hpp"
#include "core/file_io.hpp"

namespace meshtrain::checkpoint::h5 {

QuietErrors::QuietErrors() {
  H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

QuietErrors::~QuietErrors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

namespace {

/// What a checkpoint file looks like, whoever creates it: the file format bounded to
/// 1.8..1.10 (h5py of any recent age reads it; large attributes go to dense storage), and
/// tensors of 1 MiB and more starting on 1 MiB boundaries: parallel file systems stripe in
/// units of that size, so no two ranks' hyperslabs of a large tensor share a stripe edge
/// because of where the tensor starts.
void set_file_layout(hid_t fapl) {
  H5_CHECK(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V110));
  H5_CHECK(H5Pset_alignment(fapl, 1 << 20, 1 << 20));
}

}  // namespace

Handle mpio_fapl(MPI_Comm comm) {
  Handle fapl = plist(H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
  // Hints are advice: an MPI-IO component that does not know one ignores it (OMPIO, Open
  // MPI's default, never sieves independent writes; ROMIO reads this one).
  MpiInfo info;
  info.set("romio_ds_write", "disable");
  H5_CHECK(H5Pset_fapl_mpio(fapl.get(), comm, info.get()));  // HDF5 keeps its own copy
  H5_CHECK(H5Pset_all_coll_metadata_ops(fapl.get(), true));
  // Metadata writes are not collective: HDF5 then splits the dirty metadata among the
  // ranks and each writes its share independently, instead of one collective (two-phase)
  // MPI_File_write_at_all, which was slower in every paired run (perf/notes.md, "HDF5
  // metadata writes").
  H5_CHECK(H5Pset_coll_metadata_write(fapl.get(), false));
  set_file_layout(fapl.get());
  return fapl;
}

Handle serial_create_fapl() {
  Handle fapl = serial_fapl();
  set_file_layout(fapl.get());
  return fapl;
}

Handle serial_fapl() {
  Handle fapl = plist(H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
#if H5_VERSION_GE(1, 10, 7)
  H5_CHECK(H5Pset_file_locking(fapl.get(), false, true));
#endif
  return fapl;
}

Handle piece_dxpl() {
  Handle dxpl = plist(H5_CHECK(H5Pcreate(H5P_DATASET_XFER)));
  H5_CHECK(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_INDEPENDENT));
  return dxpl;
}

namespace {

void write_scalar(hid_t obj, const char* name, hid_t file_type, hid_t mem_type, const void* v) {
  Handle sp = space(H5_CHECK(H5Screate(H5S_SCALAR)));
  Handle a = attribute(H5_CHECK(H5Acreate2(obj, name, file_type, sp.get(), H5P_DEFAULT, H5P_DEFAULT)));
  H5_CHECK(H5Awrite(a.get(), mem_type, v));
}

/// Opens attribute `name` of `obj` when it exists and its type class is `cls`.
Handle open_attr(hid_t obj, const char* name, H5T_class_t cls) {
  QuietErrors quiet;
  if (H5Aexists(obj, name) <= 0) return {};
  Handle a = attribute(H5Aopen(obj, name, H5P_DEFAULT));
  if (!a.valid()) return {};
  Handle t = type(H5Aget_type(a.get()));
  if (!t.valid() || H5Tget_class(t.get()) != cls) return {};
  Handle sp = space(H5Aget_space(a.get()));
  if (!sp.valid() || H5Sget_simple_extent_npoints(sp.get()) != 1) return {};
  return a;
}

}  // namespace

void write_attr(hid_t obj, const char* name, std::int64_t v) {
  write_scalar(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}
void write_attr(hid_t obj, const char* name, std::uint64_t v) {
  write_scalar(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v);
}
void write_attr(hid_t obj, const char* name, std::uint32_t v) {
  write_scalar(obj, name, H5T_STD_U32LE, H5T_NATIVE_UINT32, &v);
}
void write_attr(hid_t obj, const char* name, double v) {
  write_scalar(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
}
void write_attr(hid_t obj, const char* name, const std::string& v) {
  // Fixed-length UTF-8 (variable-length data cannot be written through MPI-IO); h5py
  // reads it as bytes, `.decode()` gives the text.
  Handle t = type(H5_CHECK(H5Tcopy(H5T_C_S1)));
  H5_CHECK(H5Tset_size(t.get(), v.empty() ? 1 : v.size()));
  H5_CHECK(H5Tset_strpad(t.get(), H5T_STR_NULLPAD));
  H5_CHECK(H5Tset_cset(t.get(), H5T_CSET_UTF8));
  const std::string padded = v.empty() ? std::string(1, '\0') : v;
  write_scalar(obj, name, t.get(), t.get(), padded.data());
}

std::optional<std::int64_t> read_int_attr(hid_t obj, const char* name) {
  Handle a = open_attr(obj, name, H5T_INTEGER);
  if (!a.valid()) return std::nullopt;
  std::int64_t v = 0;
  if (H5Aread(a.get(), H5T_NATIVE_INT64, &v) < 0) return std::nullopt;
  return v;
}

std::optional<std::uint64_t> read_uint_attr(hid_t obj, const char* name) {
  Handle a = open_attr(obj, name, H5T_INTEGER);
  if (!a.valid()) return std::nullopt;
  std::uint64_t v = 0;
  if (H5Aread(a.get(), H5T_NATIVE_UINT64, &v) < 0) return std::nullopt;
  return v;
}

std::optional<double> read_double_attr(hid_t obj, const char* name) {
  Handle a = open_attr(obj, name, H5T_FLOAT);
  if (!a.valid()) return std::nullopt;
  double v = 0;
  if (H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v) < 0) return std::nullopt;
  return v;
}

std::optional<std::string> read_string_attr(hid_t obj, const char* name) {
  Handle a = open_attr(obj, name, H5T_STRING);
  if (!a.valid()) return std::nullopt;
  Handle ft = type(H5Aget_type(a.get()));
  if (H5Tis_variable_str(ft.get()) > 0) {
    // Written by another tool (h5py writes variable-length strings).
    Handle mt = type(H5Tcopy(H5T_C_S1));
    H5Tset_size(mt.get(), H5T_VARIABLE);
    char* s = nullptr;
    if (H5Aread(a.get(), mt.get(), &s) < 0 || !s) return std::nullopt;
    std::string out(s);
    H5free_memory(s);
    return out;
  }
  const std::size_t n = H5Tget_size(ft.get());
  std::string buf(n, '\0');
  if (H5Aread(a.get(), ft.get(), buf.data()) < 0) return std::nullopt;
  buf.resize(buf.find('\0') == std::string::npos ? n : buf.find('\0'));
  return buf;
}

namespace {
herr_t find_no_space(unsigned, const H5E_error2_t* e, void* found) {
  const std::string text = std::string(e->desc ? e->desc : "") + " " + (e->func_name ? e->func_name : "");
  for (const char* needle : {"No space", "no space", "NO_SPACE", "not enough space", "ENOSPC", "quota"})
    if (text.find(needle) != std::string::npos) *static_cast<bool*>(found) = true;
  return 0;
}
}  // namespace

int io_errno(const std::string& dir, std::uint64_t bytes_needed) {
  const int err = errno;
  if (file_io::is_storage_error(err)) return err;
  bool no_space = false;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, find_no_space, &no_space);
  if (no_space) return ENOSPC;
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) == 0 && static_cast<double>(fs.f_bavail) * fs.f_frsize < bytes_needed) return ENOSPC;
  return EIO;
}

bool link_exists(hid_t file, const std::string& path) {
  QuietErrors quiet;
  std::size_t pos = 1;
  while (true) {
    const std::size_t next = path.find('/', pos);
    const std::string prefix = path.substr(0, next);
    if (H5Lexists(file, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    if (next == std::string::npos) return true;
    pos = next + 1;
  }
}

Handle simple_space(const std::vector<std::int64_t>& shape) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  return space(H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
}

void select_piece(hid_t space, const Piece& piece) {
  for (const model::BoxPair& bp : piece.boxes) {
    const hsize_t start[2] = {static_cast<hsize_t>(bp.global.row0), static_cast<hsize_t>(bp.global.col0)};
    const hsize_t count[2] = {static_cast<hsize_t>(bp.global.nrows), static_cast<hsize_t>(bp.global.ncols)};
    H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_OR, start, nullptr, count, nullptr));
  }
}

}  // namespace meshtrain::checkpoint::h5
