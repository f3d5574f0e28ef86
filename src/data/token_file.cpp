// TokenFile: mmap + header validation. Fields are decoded byte by byte, so the format is
// little-endian on every host.
#include "data/token_file.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.hpp"
#include "core/file_io.hpp"
#include "formats/le_bytes.hpp"

namespace meshtrain::data {
namespace {

using ull = unsigned long long;

std::string printable(const unsigned char* p, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i)
    s += (p[i] >= 32 && p[i] < 127) ? std::string(1, static_cast<char>(p[i])) : strprintf("\\x%02x", p[i]);
  return s;
}

TokenFileHeader decode_and_validate(const std::string& path, const unsigned char* h, std::uint64_t file_bytes) {
  MESHTRAIN_REQUIRE(std::memcmp(h, kTokenFileMagic, 8) == 0,
                    "%s is not a meshtrain token file (it starts with '%s', not 'MTTOKENS'); "
                    "create datasets with `meshtrain prepare`",
                    path.c_str(), printable(h, 8).c_str());
  TokenFileHeader hd;
  hd.version = formats::load_le32(h + 8);
  hd.bytes_per_token = formats::load_le32(h + 12);
  hd.vocab_size = formats::load_le64(h + 16);
  hd.count = formats::load_le64(h + 24);
  MESHTRAIN_REQUIRE(hd.version == kTokenFileVersion,
                    "%s has token-file version %u, but this meshtrain reads version %u; "
                    "re-run `meshtrain prepare` with this build",
                    path.c_str(), hd.version, kTokenFileVersion);
  MESHTRAIN_REQUIRE(hd.bytes_per_token == 2 || hd.bytes_per_token == 4,
                    "%s: unsupported bytes per token %u in the header (2 or 4 expected); the file is corrupt",
                    path.c_str(), hd.bytes_per_token);
  MESHTRAIN_REQUIRE(hd.vocab_size >= 1 && hd.vocab_size <= static_cast<std::uint64_t>(INT32_MAX),
                    "%s: vocabulary size %llu in the header is outside 1 .. 2^31-1; the file is corrupt",
                    path.c_str(), static_cast<ull>(hd.vocab_size));
  MESHTRAIN_REQUIRE(hd.bytes_per_token == 4 || hd.vocab_size <= 65536,
                    "%s: a vocabulary of %llu ids does not fit in 2 bytes per token; the file is corrupt",
                    path.c_str(), static_cast<ull>(hd.vocab_size));
  for (std::size_t i = 32; i < kTokenFileHeaderBytes; ++i)
    MESHTRAIN_REQUIRE(h[i] == 0, "%s: header byte %zu is %u, but bytes 32..63 must be zero; the file is corrupt",
                      path.c_str(), i, static_cast<unsigned>(h[i]));
  const std::uint64_t data_bytes = file_bytes - kTokenFileHeaderBytes;
  const bool fits = hd.count <= data_bytes / hd.bytes_per_token;
  MESHTRAIN_REQUIRE(fits && hd.count * hd.bytes_per_token == data_bytes,
                    "%s is %s: its header says %llu tokens of %u bytes (%llu bytes with the header), "
                    "but the file has %llu bytes; re-run `meshtrain prepare`",
                    path.c_str(), fits ? "longer than its header says" : "truncated",
                    static_cast<ull>(hd.count), hd.bytes_per_token,
                    static_cast<ull>(kTokenFileHeaderBytes + hd.count * hd.bytes_per_token),
                    static_cast<ull>(file_bytes));
  return hd;
}

}  // namespace

std::uint32_t bytes_per_token_for(std::int64_t vocab) { return vocab <= 65536 ? 2 : 4; }

std::array<unsigned char, kTokenFileHeaderBytes> encode_header(const TokenFileHeader& h) {
  std::array<unsigned char, kTokenFileHeaderBytes> out{};
  std::memcpy(out.data(), kTokenFileMagic, 8);
  formats::store_le32(out.data() + 8, h.version);
  formats::store_le32(out.data() + 12, h.bytes_per_token);
  formats::store_le64(out.data() + 16, h.vocab_size);
  formats::store_le64(out.data() + 24, h.count);
  return out;
}

TokenFile::TokenFile(const std::string& path) : file_(path, "token file") {
  const std::uint64_t file_bytes = file_.size();
  MESHTRAIN_REQUIRE(file_bytes >= kTokenFileHeaderBytes,
                    "%s is not a meshtrain token file: it has %llu bytes, fewer than the %zu-byte header",
                    path.c_str(), static_cast<ull>(file_bytes), kTokenFileHeaderBytes);
  const unsigned char* base = file_.data();
  tokens_ = base + kTokenFileHeaderBytes;
  header_ = decode_and_validate(path, base, file_bytes);
  // Sampled vocabulary check, so that most damaged files are refused at start-up; a full
  // scan would read the whole file at every start. read() checks every id it returns.
  const std::uint64_t n = header_.count;
  const std::uint64_t samples = std::min<std::uint64_t>(n, kSampledIds);
  for (std::uint64_t k = 0; k < samples; ++k) {
    const std::uint64_t i = samples == 1 ? 0 : static_cast<std::uint64_t>(
        static_cast<unsigned __int128>(k) * (n - 1) / (samples - 1));
    const std::uint32_t id = token_at(i);
    MESHTRAIN_REQUIRE(id < header_.vocab_size,
                      "%s: token %u at position %llu is not below the vocabulary size %llu in the "
                      "header; the file is corrupt or was written for another vocabulary",
                      path.c_str(), id, static_cast<ull>(i), static_cast<ull>(header_.vocab_size));
  }
}

std::uint32_t TokenFile::token_at(std::uint64_t i) const {
  return header_.bytes_per_token == 2 ? formats::load_le16(tokens_ + 2 * i) : formats::load_le32(tokens_ + 4 * i);
}

void TokenFile::read(std::uint64_t offset, int len, std::int32_t* out) const {
  check_read_range(offset, len, header_.count, path());
  // Every id is checked as it is read (a compare per token, nothing next to the GEMMs it
  // feeds): the open-time check only samples the file, and an id past the vocabulary
  // would index outside the embedding table.
  const std::uint64_t vocab = header_.vocab_size;
  std::uint32_t bad = 0;
  if (header_.bytes_per_token == 2) {
    const unsigned char* p = tokens_ + 2 * offset;
    for (int i = 0; i < len; ++i) {
      const std::uint32_t id = formats::load_le16(p + 2 * i);
      bad |= id >= vocab;
      out[i] = static_cast<std::int32_t>(id);
    }
  } else {
    const unsigned char* p = tokens_ + 4 * offset;
    for (int i = 0; i < len; ++i) {
      const std::uint32_t id = formats::load_le32(p + 4 * i);
      bad |= id >= vocab;
      out[i] = static_cast<std::int32_t>(id);
    }
  }
  if (bad) {
    for (int i = 0; i < len; ++i)
      MESHTRAIN_REQUIRE(static_cast<std::uint32_t>(out[i]) < vocab,
                        "%s: token %u at position %llu is not below the vocabulary size %llu in the header; the "
                        "file is corrupt or was written for another vocabulary, re-run `meshtrain prepare`",
                        path().c_str(), static_cast<std::uint32_t>(out[i]),
                        static_cast<ull>(offset + static_cast<std::uint64_t>(i)), static_cast<ull>(vocab));
  }
}

}  // namespace meshtrain::data
