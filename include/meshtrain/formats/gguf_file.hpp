#pragma once
/// \file
/// \brief A read-only, memory-mapped GGUF file (llama.cpp's model format, versions 2 and 3).
///
/// Layout (all little-endian): magic "GGUF", u32 version, u64 tensor count, u64 metadata
/// count; the metadata key/value pairs (key = u64 length + bytes, u32 value type, value;
/// an array is u32 element type + u64 count + elements); the tensor infos (name, u32
/// n_dims, n_dims x u64 ne, u32 ggml type, u64 offset); padding to `general.alignment`
/// (default 32); the tensor data, each tensor at data_start + offset.
///
/// The reader trusts nothing in the file: every length, count, type, dimension and offset
/// is checked against the bytes actually present before it is used, so a truncated or
/// hostile file gives one UserError naming the file and the rule broken, never a crash or
/// a huge allocation. Rules: magic, version 2 or 3, known value and ggml types, no
/// duplicate keys or tensor names, n_dims in 1..4, element counts that fit in 63 bits,
/// ne[0] a multiple of the type's block size, power-of-two alignment, offsets multiples of
/// it, every tensor's bytes inside the file and no two tensors overlapping.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "formats/mapped_file.hpp"

namespace meshtrain::formats {

/// GGUF metadata value types (the numbers are the file's).
enum class GgufValueType : std::uint32_t {
  UInt8 = 0, Int8 = 1, UInt16 = 2, Int16 = 3, UInt32 = 4, Int32 = 5, Float32 = 6, Bool = 7,
  String = 8, Array = 9, UInt64 = 10, Int64 = 11, Float64 = 12,
};

/// "UINT8", "STRING", ... (for messages).
const char* gguf_value_type_name(GgufValueType t);

/// ggml tensor types (the numbers are the file's; gaps are retired types).
enum class GgmlType : std::uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};

/// Elements per block and bytes per block of a ggml type (F32: 1 and 4; Q4_1: 32 and 20).
struct GgmlTypeTraits {
  const char* name;
  std::uint32_t block_elements;
  std::uint32_t block_bytes;
};

/// Traits of `t`; nullptr when the number is not a known ggml type.
const GgmlTypeTraits* ggml_type_traits(std::uint32_t t);
/// Name of `t` ("Q4_1"); "unknown" when not known.
const char* ggml_type_name(GgmlType t);

/// \brief One metadata value. Integers of every width are held in `i` (signed types and
/// bool) or `u` (unsigned types); Float32/Float64 in `f`; String in `s`; Array in
/// `array_type` + `array` (each element a GgufValue of that type).
struct GgufValue {
  GgufValueType type = GgufValueType::UInt8;
  std::int64_t i = 0;
  std::uint64_t u = 0;
  double f = 0;
  std::string s;
  GgufValueType array_type = GgufValueType::UInt8;
  std::vector<GgufValue> array;

  bool is_integer() const;  ///< any (un)signed integer type (not Bool)
  bool is_float() const { return type == GgufValueType::Float32 || type == GgufValueType::Float64; }
};

/// \brief A tensor's description. `ne` is in ggml order (ne[0] is the contiguous
/// dimension); `shape()` is the row-major (numpy, PyTorch) order, i.e. `ne` reversed.
struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<std::int64_t> ne;
  std::uint64_t offset = 0;  ///< relative to the start of the data section
  std::uint64_t nbytes = 0;
  std::vector<std::int64_t> shape() const;
  std::int64_t numel() const;
};

/// \brief A tensor's bytes inside the mapping (valid while the GgufFile lives).
struct GgufTensor {
  GgmlType type = GgmlType::F32;
  std::vector<std::int64_t> shape;  ///< row-major (outermost first), = ne reversed
  const std::byte* data = nullptr;
  std::size_t nbytes = 0;
};

/// \brief A validated, memory-mapped GGUF file.
class GgufFile {
 public:
  /// Opens, maps and validates `path` (UserError naming the file on any violation).
  explicit GgufFile(const std::string& path);
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return file_.path(); }
  std::uint32_t version() const { return version_; }
  std::uint64_t alignment() const { return alignment_; }
  /// Offset of the data section from the start of the file.
  std::uint64_t data_offset() const { return data_offset_; }

  /// All metadata, in file order (keys unique).
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  /// The value of `key`, or nullptr.
  const GgufValue* find_metadata(const std::string& key) const;
  bool has_metadata(const std::string& key) const { return find_metadata(key) != nullptr; }

  /// Typed accessors: UserError naming the file and key when the key is missing or has
  /// another type. metadata_int accepts every integer type (and Bool as 0/1), erroring on
  /// a UINT64 above INT64_MAX; metadata_float accepts floats and integers.
  std::string metadata_string(const std::string& key) const;
  std::int64_t metadata_int(const std::string& key) const;
  double metadata_float(const std::string& key) const;
  bool metadata_bool(const std::string& key) const;
  /// Same, returning `fallback` when the key is absent (still an error on a wrong type).
  std::string metadata_string(const std::string& key, const std::string& fallback) const;
  std::int64_t metadata_int(const std::string& key, std::int64_t fallback) const;
  double metadata_float(const std::string& key, double fallback) const;
  bool metadata_bool(const std::string& key, bool fallback) const;
  /// An array value (UserError when missing or not an array).
  const GgufValue& metadata_array(const std::string& key) const;
  /// Arrays of a given element kind (strings; any integer type; float32/64).
  std::vector<std::string> metadata_string_array(const std::string& key) const;
  std::vector<std::int64_t> metadata_int_array(const std::string& key) const;
  std::vector<double> metadata_float_array(const std::string& key) const;

  /// Tensor infos in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  /// The tensor called `name` (UserError naming the file when absent).
  GgufTensor tensor(const std::string& name) const;
  GgufTensor tensor(const GgufTensorInfo& info) const;

  /// The whole mapped file (e.g. to hash it).
  const std::byte* file_data() const { return reinterpret_cast<const std::byte*>(file_.data()); }
  std::size_t file_size() const { return static_cast<std::size_t>(file_.size()); }

 private:
  void parse();
  MappedFile file_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, std::size_t> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, std::size_t> tensor_index_;
};

/// True when `path` starts with the GGUF magic (a cheap check before opening).
bool looks_like_gguf(const std::string& path);

}  // namespace meshtrain::formats
