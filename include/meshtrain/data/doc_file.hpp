#pragma once
/// \file
/// \brief The document-boundary file (`train.docs`, `val.docs`) that `prepare --pack` writes
/// beside the token and loss-mask files of a packed dataset: one segment id per token, the
/// index of the token's document within its row (0 for the row's first document, +1 at each
/// document start; the padding after the last document is one more segment, never trained
/// on). Layout (doc/data.md), little-endian:
///
///   bytes  0..7   magic "MTLDOCS1"
///   bytes  8..11  u32 version (= 1)
///   bytes 12..15  u32 row length in tokens (seq_len + 1, 2 .. 65536)
///   bytes 16..23  u64 count (= the token file's token count)
///   bytes 24..63  zero
///   bytes 64..    count u16 segment ids; each row starts at 0 and every next id is the
///                 previous one or the previous one + 1
///
/// A segment id per token (rather than start offsets per row) keeps the file in the same
/// random-access row layout as the token and mask files: row r is entries [r*R, (r+1)*R).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "meshtrain/formats/mapped_file.hpp"

namespace meshtrain::data {

inline constexpr char kDocFileMagic[] = "MTLDOCS1";  ///< 8 bytes, no terminator on disk
inline constexpr std::uint32_t kDocFileVersion = 1;
inline constexpr std::size_t kDocFileHeaderBytes = 64;
inline constexpr std::uint32_t kDocFileMaxRow = 65536;  ///< u16 ids: at most 65536 segments a row

/// \brief A memory-mapped document-boundary file. The constructor validates the header
/// (magic, version, row length in [2, 65536], reserved bytes zero, count a multiple of the
/// row length) and the file size (a truncated file is refused); read_row() validates the ids
/// of the row it returns (first 0, steps of 0 or 1). Failures: one UserError naming the file.
class DocFile {
 public:
  explicit DocFile(const std::string& path);

  std::uint64_t size() const { return count_; }
  std::uint32_t row_tokens() const { return row_tokens_; }
  const std::string& path() const { return file_.path(); }
  /// The segment ids of tokens [offset, offset + len) of one row (offset a multiple of the
  /// row length, len <= the row length) into out.
  void read_row(std::uint64_t offset, int len, std::uint16_t* out) const;

 private:
  formats::MappedFile file_;
  std::uint32_t row_tokens_ = 0;
  std::uint64_t count_ = 0;
};

/// \brief Streams a document-boundary file to `path` (a staged `*.tmp`). The count is
/// written by close(); a full disk is an IoError as for the token files.
class DocFileWriter {
 public:
  DocFileWriter(std::string path, std::uint32_t row_tokens);
  ~DocFileWriter();
  DocFileWriter(const DocFileWriter&) = delete;
  DocFileWriter& operator=(const DocFileWriter&) = delete;

  void append(const std::uint16_t* ids, std::size_t n);
  std::uint64_t count() const { return count_; }
  void close();

 private:
  void write_header();
  std::string path_;
  std::uint32_t row_tokens_;
  std::uint64_t count_ = 0;
  std::FILE* file_ = nullptr;
};

/// Document starts from one row's segment ids: doc_start[t] = the first position of t's
/// segment (what model::BatchShape::doc_start holds), for t < len.
void doc_starts_from_segments(const std::uint16_t* seg, int len, std::int32_t* doc_start);

}  // namespace meshtrain::data
