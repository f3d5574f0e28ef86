#pragma once
/// \file
/// \brief The document-boundary file (`train.docs`, `val.docs`) that `prepare --pack` writes
/// beside the token and loss-mask files of a packed dataset: one segment id per token, the
/// index of the token's document within its row (0 for the row's first document, +1 at each
/// document start; the padding after the last document is one more segment, never trained
/// on). The side-file layout of data/side_file.hpp (doc/data.md) with magic "MTLDOCS1",
/// version 1, the row length seq_len + 1 (2 .. 65536), and one little-endian u16 segment id
/// per token; each row starts at 0 and every next id is the previous one or the previous
/// one + 1.
///
/// A segment id per token (rather than start offsets per row) keeps the file in the same
/// random-access row layout as the token and mask files: row r is entries [r*R, (r+1)*R).

#include <cstddef>
#include <cstdint>
#include <string>

#include "data/side_file.hpp"

namespace meshtrain::data {

inline constexpr char kDocFileMagic[] = "MTLDOCS1";  ///< 8 bytes, no terminator on disk
inline constexpr std::uint32_t kDocFileVersion = 1;
inline constexpr std::size_t kDocFileHeaderBytes = kSideFileHeaderBytes;
inline constexpr std::uint32_t kDocFileMaxRow = 65536;  ///< u16 ids: at most 65536 segments a row

/// \brief A memory-mapped document-boundary file. The constructor validates the header
/// (magic, version, row length in [2, 65536], reserved bytes zero, count a multiple of the
/// row length) and the file size (a truncated file is refused); read_row() validates the ids
/// of the row it returns (first 0, steps of 0 or 1). Failures: one UserError naming the file.
class DocFile {
 public:
  explicit DocFile(const std::string& path);

  std::uint64_t size() const { return file_.size(); }
  std::uint32_t row_tokens() const { return file_.row_tokens(); }
  const std::string& path() const { return file_.path(); }
  /// The segment ids of tokens [offset, offset + len) of one row (offset a multiple of the
  /// row length, len <= the row length) into out.
  void read_row(std::uint64_t offset, int len, std::uint16_t* out) const;

 private:
  SideFile file_;
};

/// \brief Streams a document-boundary file to `path` (a staged `*.tmp`). The count is
/// written by close(); a full disk is an IoError as for the token files.
class DocFileWriter {
 public:
  DocFileWriter(std::string path, std::uint32_t row_tokens);

  void append(const std::uint16_t* ids, std::size_t n);
  std::uint64_t count() const { return file_.count(); }
  void close() { file_.close(); }

 private:
  SideFileWriter file_;
};

/// Document starts from one row's segment ids: doc_start[t] = the first position of t's
/// segment (what model::BatchShape::doc_start holds), for t < len.
void doc_starts_from_segments(const std::uint16_t* seg, int len, std::int32_t* doc_start);

}  // namespace meshtrain::data
