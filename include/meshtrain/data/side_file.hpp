#pragma once
/// \file
/// \brief The per-token side files of a row dataset -- the loss mask (`train.mask`,
/// data/loss_mask.hpp) and the document boundaries (`train.docs`, data/doc_file.hpp) --
/// share one layout, read and written here once. Little-endian (doc/data.md):
///
///   bytes  0..7   magic (8 bytes: the file's kind)
///   bytes  8..11  u32 version
///   bytes 12..15  u32 row length in tokens (seq_len + 1)
///   bytes 16..23  u64 count (= the token file's token count)
///   bytes 24..63  zero
///   bytes 64..    count entries of `entry_bytes` each
///
/// What each entry means (and its own check) stays with the file's class.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "formats/mapped_file.hpp"

namespace meshtrain::data {

inline constexpr std::size_t kSideFileHeaderBytes = 64;

/// One kind of side file: its header values and the words of its messages.
struct SideFileKind {
  const char* magic;          ///< 8 bytes, no terminator on disk
  std::uint32_t version;
  std::size_t entry_bytes;    ///< bytes per token
  std::uint32_t max_row;      ///< the longest row its entries can describe; 0: no bound
  const char* what;           ///< "loss-mask file"
  const char* remedy;         ///< "re-run `meshtrain prepare`"
};

/// \brief A memory-mapped side file. The constructor validates the header (magic, version,
/// row length in [2, max_row], reserved bytes zero, count a multiple of the row length) and
/// the file size (a truncated file is refused): one UserError naming the file, the kind and
/// the remedy.
class SideFile {
 public:
  SideFile(const std::string& path, const SideFileKind& kind);

  std::uint64_t size() const { return count_; }
  std::uint32_t row_tokens() const { return row_tokens_; }
  const std::string& path() const { return file_.path(); }
  /// The bytes of entry `index` onwards (index < size()).
  const unsigned char* entries(std::uint64_t index) const {
    return file_.data() + kSideFileHeaderBytes + kind_.entry_bytes * index;
  }

 private:
  formats::MappedFile file_;
  SideFileKind kind_;
  std::uint32_t row_tokens_ = 0;
  std::uint64_t count_ = 0;
};

/// \brief Streams a side file to `path` (a staged `*.tmp` that prepare renames once
/// complete); the count is written by close(), which flushes and fsyncs. A full disk
/// (ENOSPC, EDQUOT, EIO) is an IoError (exit 74), as in `train`.
class SideFileWriter {
 public:
  SideFileWriter(std::string path, const SideFileKind& kind, std::uint32_t row_tokens);
  ~SideFileWriter();
  SideFileWriter(const SideFileWriter&) = delete;
  SideFileWriter& operator=(const SideFileWriter&) = delete;

  /// n entries, already in their on-disk (little-endian) bytes: n x entry_bytes.
  void append(const unsigned char* bytes, std::size_t n);
  std::uint64_t count() const { return count_; }
  void close();

 private:
  void write_header();
  std::string path_;
  SideFileKind kind_;
  std::uint32_t row_tokens_;
  std::uint64_t count_ = 0;
  std::FILE* file_ = nullptr;
};

}  // namespace meshtrain::data
