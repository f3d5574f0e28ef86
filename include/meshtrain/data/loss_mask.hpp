#pragma once
/// \file
/// \brief The loss-mask file (`train.mask`, `val.mask`) that `prepare --format alpaca|chat`
/// writes beside the token files: one byte per token, 1 where the loss is computed (the
/// assistant's / response's tokens), 0 elsewhere (prompt, template markers, padding).
/// Layout (doc/data.md), little-endian:
///
///   bytes  0..7   magic "MTLMASK1"
///   bytes  8..11  u32 version (= 1)
///   bytes 12..15  u32 row length in tokens (seq_len + 1; every row is one example)
///   bytes 16..23  u64 count (= the token file's token count)
///   bytes 24..63  zero
///   bytes 64..    count bytes, each 0 or 1

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "meshtrain/formats/mapped_file.hpp"

namespace meshtrain::data {

inline constexpr char kMaskFileMagic[] = "MTLMASK1";  ///< 8 bytes, no terminator on disk
inline constexpr std::uint32_t kMaskFileVersion = 1;
inline constexpr std::size_t kMaskFileHeaderBytes = 64;

/// \brief A memory-mapped loss-mask file. The constructor validates the header (magic,
/// version, row length >= 2, count a multiple of the row length, reserved bytes zero) and the
/// file size; read() checks that every byte it returns is 0 or 1. Failures are UserErrors
/// naming the file.
class MaskFile {
 public:
  explicit MaskFile(const std::string& path);
  MaskFile(const MaskFile&) = delete;
  MaskFile& operator=(const MaskFile&) = delete;

  std::uint64_t size() const { return count_; }
  std::uint32_t row_tokens() const { return row_tokens_; }
  /// mask[offset .. offset + len) into out (0 or 1 each).
  void read(std::uint64_t offset, int len, std::uint8_t* out) const;
  const std::string& path() const { return file_.path(); }

 private:
  formats::MappedFile file_;
  std::uint32_t row_tokens_ = 0;
  std::uint64_t count_ = 0;
};

/// \brief Streams a mask file to `path` (a `*.tmp` that prepare renames once complete).
/// The count is written by close(); I/O failures are UserErrors naming the path.
class MaskFileWriter {
 public:
  MaskFileWriter(std::string path, std::uint32_t row_tokens);
  ~MaskFileWriter();
  MaskFileWriter(const MaskFileWriter&) = delete;
  MaskFileWriter& operator=(const MaskFileWriter&) = delete;

  void append(const std::uint8_t* mask, std::size_t n);
  std::uint64_t count() const { return count_; }
  void close();

 private:
  void write_header();
  std::string path_;
  std::uint32_t row_tokens_;
  std::uint64_t count_ = 0;
  std::FILE* file_ = nullptr;
};

}  // namespace meshtrain::data
