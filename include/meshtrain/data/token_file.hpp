#pragma once
/// \file
/// \brief The token file (`train.bin`, `val.bin`): a 64-byte little-endian header then
/// the tokens. Layout (doc/data.md):
///
///   bytes  0..7   magic "MTTOKENS"
///   bytes  8..11  u32 version (= 1)
///   bytes 12..15  u32 bytes per token: 2 (uint16, vocab <= 65536) or 4 (uint32)
///   bytes 16..23  u64 vocab_size
///   bytes 24..31  u64 token count
///   bytes 32..63  zero
///   bytes 64..    count tokens, little-endian, `bytes per token` each

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "data/token_source.hpp"
#include "formats/mapped_file.hpp"

namespace meshtrain::data {

inline constexpr char kTokenFileMagic[] = "MTTOKENS";  ///< 8 bytes, no terminator on disk
inline constexpr std::uint32_t kTokenFileVersion = 1;
inline constexpr std::size_t kTokenFileHeaderBytes = 64;

/// \brief The decoded header fields.
struct TokenFileHeader {
  std::uint32_t version = kTokenFileVersion;
  std::uint32_t bytes_per_token = 2;
  std::uint64_t vocab_size = 0;
  std::uint64_t count = 0;
};

/// 2 when every id of a `vocab`-sized vocabulary fits in uint16 (vocab <= 65536), else 4.
std::uint32_t bytes_per_token_for(std::int64_t vocab);

/// The 64 header bytes of `h` (magic, fields little-endian, reserved bytes zero).
std::array<unsigned char, kTokenFileHeaderBytes> encode_header(const TokenFileHeader& h);

/// \brief A memory-mapped token file. The constructor validates the header (magic,
/// version, width, vocab), the file size (exactly header + count * width) and a sample
/// of the token ids (< vocab); each failure is a UserError naming the file and the problem.
/// read() checks every id it returns (< vocab), a UserError naming the file and the
/// token's position otherwise.
class TokenFile final : public TokenSource {
 public:
  explicit TokenFile(const std::string& path);
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  std::uint64_t size() const override { return header_.count; }
  std::int64_t vocab_size() const override { return static_cast<std::int64_t>(header_.vocab_size); }
  void read(std::uint64_t offset, int len, std::int32_t* out) const override;
  std::string description() const override { return path(); }

  const TokenFileHeader& header() const { return header_; }
  const std::string& path() const { return file_.path(); }

  /// Ids checked by the sampled vocabulary check (evenly spaced, first and last included).
  static constexpr std::uint64_t kSampledIds = 65536;

 private:
  std::uint32_t token_at(std::uint64_t i) const;

  formats::MappedFile file_;  // whole file, read-only
  TokenFileHeader header_;
  const unsigned char* tokens_ = nullptr;  // file_.data() + 64
};

/// \brief Streams tokens into a token file at `path` (prepare passes a `*.tmp` path and
/// renames it once every output is complete). The header's count is written by close().
/// I/O failures are UserErrors naming the path.
class TokenFileWriter {
 public:
  TokenFileWriter(std::string path, std::int64_t vocab_size);
  ~TokenFileWriter();  ///< closes without syncing if close() was not called (error path)
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  /// Appends ids[0 .. n); throws std::out_of_range for an id outside [0, vocab).
  void append(const std::int32_t* ids, std::size_t n);
  std::uint64_t count() const { return header_.count; }
  /// Writes the final header, flushes and fsyncs, closes.
  void close();

 private:
  void write_bytes(const void* data, std::size_t n);

  std::string path_;
  TokenFileHeader header_;
  std::FILE* file_ = nullptr;
};

}  // namespace meshtrain::data
