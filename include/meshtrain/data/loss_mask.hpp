#pragma once
/// \file
/// \brief The loss-mask file (`train.mask`, `val.mask`) that `prepare --format alpaca|chat`
/// writes beside the token files: one byte per token, 1 where the loss is computed (the
/// assistant's / response's tokens), 0 elsewhere (prompt, template markers, padding). The
/// side-file layout of data/side_file.hpp (doc/data.md) with magic "MTLMASK1", version 1,
/// the row length seq_len + 1 (every row is one example, or several packed), and one byte
/// per token, each 0 or 1.

#include <cstddef>
#include <cstdint>
#include <string>

#include "data/side_file.hpp"

namespace meshtrain::data {

inline constexpr char kMaskFileMagic[] = "MTLMASK1";  ///< 8 bytes, no terminator on disk
inline constexpr std::uint32_t kMaskFileVersion = 1;
inline constexpr std::size_t kMaskFileHeaderBytes = kSideFileHeaderBytes;

/// \brief A memory-mapped loss-mask file. The constructor validates the header (magic,
/// version, row length >= 2, count a multiple of the row length, reserved bytes zero) and the
/// file size; read() checks that every byte it returns is 0 or 1. Failures are UserErrors
/// naming the file.
class MaskFile {
 public:
  explicit MaskFile(const std::string& path);
  MaskFile(const MaskFile&) = delete;
  MaskFile& operator=(const MaskFile&) = delete;

  std::uint64_t size() const { return file_.size(); }
  std::uint32_t row_tokens() const { return file_.row_tokens(); }
  /// mask[offset .. offset + len) into out (0 or 1 each).
  void read(std::uint64_t offset, int len, std::uint8_t* out) const;
  const std::string& path() const { return file_.path(); }

 private:
  SideFile file_;
};

/// \brief Streams a mask file to `path` (a `*.tmp` that prepare renames once complete).
/// The count is written by close(); a full disk is an IoError as for the token files.
class MaskFileWriter {
 public:
  MaskFileWriter(std::string path, std::uint32_t row_tokens);

  void append(const std::uint8_t* mask, std::size_t n) { file_.append(mask, n); }
  std::uint64_t count() const { return file_.count(); }
  void close() { file_.close(); }

 private:
  SideFileWriter file_;
};

}  // namespace meshtrain::data
