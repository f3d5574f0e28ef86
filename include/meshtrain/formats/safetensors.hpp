#pragma once
/// \brief The safetensors format (Hugging Face): an 8-byte little-endian header length N,
/// N bytes of JSON header {name: {"dtype", "shape", "data_offsets": [begin, end]}, ...,
/// optional "__metadata__": {string: string}}, then the data buffer, every tensor
/// row-major little-endian at [8 + N + begin, 8 + N + end).
///
/// The reader validates like the reference implementation and rejects anything else with
/// a UserError naming the file and the rule broken:
///   * the file holds at least the 8-byte length, N <= kMaxHeaderBytes, 8 + N <= file size
///   * the header is UTF-8 JSON, starts with '{', is an object; every entry other than
///     __metadata__ is an object with exactly dtype (known), shape (non-negative integers)
///     and data_offsets (two integers, begin <= end); __metadata__ maps strings to strings;
///     no name appears twice
///   * end - begin == number of elements x dtype size
///   * sorted by offset the tensors are contiguous and non-overlapping, start at 0 and
///     cover the data buffer exactly (no gaps, no trailing bytes)

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "formats/mapped_file.hpp"

namespace meshtrain::formats {

/// Largest header the reader accepts (the reference implementation's limit).
inline constexpr std::uint64_t kMaxHeaderBytes = 100000000;

/// Bytes per element of a safetensors dtype name ("F32" -> 4); 0 when unknown.
std::size_t safetensors_dtype_size(const std::string& dtype);

struct SafetensorsTensor {
  std::string name;
  std::string dtype;                 ///< "F32", "BF16", "F16", "F64", ...
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  ///< byte offsets in the data buffer
  std::int64_t numel() const;
};

/// \brief A validated, memory-mapped safetensors file (read-only).
class SafetensorsFile {
 public:
  /// Opens and validates `path` (UserError on any violation).
  explicit SafetensorsFile(const std::string& path);
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return file_.path(); }
  /// Tensors in header order.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  /// Elements [first, first + n) (row-major) of `t` converted to fp32 into `out`.
  /// Floating dtypes only (F32, F16, BF16, F64); UserError for others.
  void read_f32(const SafetensorsTensor& t, std::int64_t first, std::int64_t n, float* out) const;

 private:
  MappedFile file_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::size_t> index_;
  std::map<std::string, std::string> metadata_;
  const unsigned char* data_ = nullptr;  ///< start of the data buffer inside the mapping
};

/// One tensor to write: name, dtype ("F32" or "BF16"), shape.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t bytes() const;
};

/// \brief Writes a safetensors file: the header (tensors in the given order, padded with
/// spaces to a multiple of 8 bytes as the reference writer does), then for each entry in
/// order `fill(i, out)` which must append exactly entries[i].bytes() bytes to the empty
/// `out`. The file is fsynced; on an I/O failure it is removed and UserError is thrown.
void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata,
                       const std::function<void(std::size_t, std::vector<unsigned char>&)>& fill);

}  // namespace meshtrain::formats
