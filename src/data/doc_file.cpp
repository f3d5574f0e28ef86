// Document-boundary files of packed datasets: one u16 segment id per token beside the token
// and mask files. Same header conventions as the mask file (64 bytes, little-endian, mmap).
#include "meshtrain/data/doc_file.hpp"


#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include "meshtrain/core/error.hpp"
#include "meshtrain/core/fault.hpp"
#include "meshtrain/core/file_io.hpp"
#include "meshtrain/formats/le_bytes.hpp"

namespace meshtrain::data {
namespace {
using ull = unsigned long long;
}  // namespace

DocFile::DocFile(const std::string& path) : file_(path, "document-boundary file") {
  const std::uint64_t bytes = file_.size();
  MESHTRAIN_REQUIRE(bytes >= kDocFileHeaderBytes,
                    "%s is not a meshtrain document-boundary file (shorter than its %zu-byte header); re-run "
                    "`meshtrain prepare --pack`",
                    path.c_str(), kDocFileHeaderBytes);
  const unsigned char* h = file_.data();
  const bool magic = std::memcmp(h, kDocFileMagic, 8) == 0;
  const std::uint32_t version = formats::load_le32(h + 8);
  row_tokens_ = formats::load_le32(h + 12);
  count_ = formats::load_le64(h + 16);
  bool reserved_zero = true;
  for (std::size_t i = 24; i < kDocFileHeaderBytes; ++i) reserved_zero = reserved_zero && h[i] == 0;
  const std::uint64_t body = bytes - kDocFileHeaderBytes;
  const char* why = !magic                                        ? "it does not start with 'MTLDOCS1'"
                    : version != kDocFileVersion                  ? "its version is not 1"
                    : row_tokens_ < 2 || row_tokens_ > kDocFileMaxRow ? "its row length is outside 2..65536"
                    : !reserved_zero                              ? "header bytes 24..63 are not zero"
                    : count_ > body / 2 || body != 2 * count_     ? "its size does not match the count in its header"
                    : count_ % row_tokens_ != 0                   ? "its count is not a multiple of its row length"
                                                                  : nullptr;
  if (why)
    throw UserError(
        strprintf("%s is not a valid document-boundary file: %s; re-run `meshtrain prepare --pack`", path.c_str(), why));
}

void DocFile::read_row(std::uint64_t offset, int len, std::uint16_t* out) const {
  MESHTRAIN_REQUIRE(len >= 0 && len <= static_cast<int>(row_tokens_) && offset % row_tokens_ == 0 &&
                        offset + static_cast<std::uint64_t>(len) <= count_,
                    "%s: reading segment ids %llu..%llu, not within one of its rows of %u (%llu ids)", path().c_str(),
                    static_cast<ull>(offset), static_cast<ull>(offset + static_cast<std::uint64_t>(len)), row_tokens_,
                    static_cast<ull>(count_));
  const unsigned char* p = file_.data() + kDocFileHeaderBytes + 2 * offset;
  for (int i = 0; i < len; ++i) {
    const auto id = static_cast<std::uint16_t>(formats::load_le16(p + 2 * i));
    const std::uint32_t want_lo = i == 0 ? 0 : out[i - 1], want_hi = i == 0 ? 0 : want_lo + 1u;
    MESHTRAIN_REQUIRE(id >= want_lo && id <= want_hi,
                      "%s: segment id %u at position %llu (token %d of its row) is %s; ids start at 0 in each row and "
                      "grow by 0 or 1; the file is corrupt, re-run `meshtrain prepare --pack`",
                      path().c_str(), static_cast<unsigned>(id), static_cast<ull>(offset + static_cast<std::uint64_t>(i)),
                      i, i == 0 ? "not 0" : (id < want_lo ? "decreasing" : "a jump of more than 1"));
    out[i] = id;
  }
}

DocFileWriter::DocFileWriter(std::string path, std::uint32_t row_tokens)
    : path_(std::move(path)), row_tokens_(row_tokens) {
  MESHTRAIN_ASSERT(row_tokens >= 2 && row_tokens <= kDocFileMaxRow, "document-boundary rows of %u tokens", row_tokens);
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr) throw file_io::write_error(path_, errno);
  write_header();
}

DocFileWriter::~DocFileWriter() {
  if (file_) std::fclose(file_);
}

void DocFileWriter::write_header() {
  std::array<unsigned char, kDocFileHeaderBytes> h{};
  std::memcpy(h.data(), kDocFileMagic, 8);
  formats::store_le32(h.data() + 8, kDocFileVersion);
  formats::store_le32(h.data() + 12, row_tokens_);
  formats::store_le64(h.data() + 16, count_);
  if (std::fwrite(h.data(), 1, h.size(), file_) != h.size()) throw file_io::write_error(path_, errno);
}

void DocFileWriter::append(const std::uint16_t* ids, std::size_t n) {
  const int injected = fault::pass(fault::Point::PrepareWrite);  // tests: a full disk, a stall here
  if (injected != 0) throw file_io::write_error(path_, injected, n);
  std::vector<unsigned char> le(2 * n);
  for (std::size_t i = 0; i < n; ++i) formats::store_le16(le.data() + 2 * i, ids[i]);
  if (std::fwrite(le.data(), 1, le.size(), file_) != le.size()) throw file_io::write_error(path_, errno, n);
  count_ += n;
}

void DocFileWriter::close() {
  MESHTRAIN_REQUIRE(file_ != nullptr, "%s was already closed", path_.c_str());
  MESHTRAIN_REQUIRE(std::fseek(file_, 0, SEEK_SET) == 0, "cannot seek in %s: %s", path_.c_str(), std::strerror(errno));
  write_header();
  std::FILE* f = file_;
  file_ = nullptr;  // close_durably closes it, also when it throws
  file_io::close_durably(f, path_);
}

void doc_starts_from_segments(const std::uint16_t* seg, int len, std::int32_t* doc_start) {
  for (int t = 0; t < len; ++t) doc_start[t] = t == 0 || seg[t] != seg[t - 1] ? t : doc_start[t - 1];
}

}  // namespace meshtrain::data
