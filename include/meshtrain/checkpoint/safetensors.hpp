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
#include <memory>
#include <string>
#include <vector>

namespace meshtrain::checkpoint {

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
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  /// Tensors in header order.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  /// Elements [first, first + n) (row-major) of `t` converted to fp32 into `out`.
  /// Floating dtypes only (F32, F16, BF16, F64); UserError for others.
  void read_f32(const SafetensorsTensor& t, std::int64_t first, std::int64_t n, float* out) const;

 private:
  std::string path_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::size_t> index_;
  std::map<std::string, std::string> metadata_;
  const unsigned char* data_ = nullptr;  ///< start of the data buffer inside the mapping
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
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

struct ExportOptions {
  std::string dtype = "fp32";                      ///< fp32 | bf16
  std::uint64_t max_shard_bytes = 2ull << 30;      ///< shard above this many tensor bytes
  bool merge_lora = false;                         ///< LoRA checkpoint: merge adapters into the base weights
  std::string base_model;                          ///< PEFT base_model_name_or_path ("": the run's init_from)
};

struct ExportSummary {
  std::vector<std::string> files;                  ///< written, in out_dir
  std::uint64_t tensor_bytes = 0;
  int tensors = 0;
  int step = 0;
  std::string kind;                                ///< model | peft_adapter | merged_lora
  std::string base_model;                          ///< peft_adapter: the base model it refers to ("" unknown)
  std::string tokenizer_note;                      ///< why no tokenizer files were written ("" when they were)
};

/// \brief Converts HDF5 checkpoint `h5_path` into a Hugging Face model directory:
/// model.safetensors (or model-0000i-of-0000N.safetensors + model.safetensors.index.json
/// when the tensors exceed max_shard_bytes) and config.json in the family's HF format.
/// Embedding and LM-head rows beyond the model's vocab_size (padding) are dropped.
/// A LoRA checkpoint (model.lora_rank > 0) is written as a PEFT adapter instead:
/// adapter_model.safetensors (the adapters under PEFT's names,
/// base_model.model.<name>.lora_A/B.weight) + adapter_config.json (r, lora_alpha,
/// target_modules, base_model_name_or_path); or, with options.merge_lora, as the full model
/// with every adapted projection replaced by W + (alpha/r) B A (config.json as above).
/// Serial (one process). Files are written under temporary names and renamed at the end,
/// so a failure leaves no partial model. UserError for bad input.
ExportSummary export_safetensors(const std::string& h5_path, const std::string& out_dir,
                                 const ExportOptions& options = {});

}  // namespace meshtrain::checkpoint
