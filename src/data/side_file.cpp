// The side files of a row dataset (loss mask, document boundaries): one header layout, read
// through a memory map and written as a stream whose count is filled in at close.
#include "data/side_file.hpp"

#include <array>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.hpp"
#include "core/fault.hpp"
#include "core/file_io.hpp"
#include "formats/le_bytes.hpp"

namespace meshtrain::data {

SideFile::SideFile(const std::string& path, const SideFileKind& kind) : file_(path, kind.what), kind_(kind) {
  const std::uint64_t bytes = file_.size();
  MESHTRAIN_REQUIRE(bytes >= kSideFileHeaderBytes, "%s is not a meshtrain %s (shorter than its %zu-byte header); %s",
                    path.c_str(), kind.what, kSideFileHeaderBytes, kind.remedy);
  const unsigned char* h = file_.data();
  const bool magic = std::memcmp(h, kind.magic, 8) == 0;
  const std::uint32_t version = formats::load_le32(h + 8);
  row_tokens_ = formats::load_le32(h + 12);
  count_ = formats::load_le64(h + 16);
  bool reserved_zero = true;
  for (std::size_t i = 24; i < kSideFileHeaderBytes; ++i) reserved_zero = reserved_zero && h[i] == 0;
  const std::uint64_t body = bytes - kSideFileHeaderBytes;
  const bool row_ok = row_tokens_ >= 2 && (kind.max_row == 0 || row_tokens_ <= kind.max_row);
  const std::string why =
      !magic                                     ? strprintf("it does not start with '%.8s'", kind.magic)
      : version != kind.version                  ? strprintf("its version is not %u", kind.version)
      : !row_ok                                  ? (kind.max_row == 0 ? std::string("its row length is below 2")
                                                                      : strprintf("its row length is outside 2..%u", kind.max_row))
      : !reserved_zero                           ? std::string("header bytes 24..63 are not zero")
      : count_ > body / kind.entry_bytes || body != kind.entry_bytes * count_
          ? std::string("its size does not match the count in its header")
      : count_ % row_tokens_ != 0                ? std::string("its count is not a multiple of its row length")
                                                 : std::string();
  if (!why.empty())
    throw UserError(strprintf("%s is not a valid %s: %s; %s", path.c_str(), kind.what, why.c_str(), kind.remedy));
}

SideFileWriter::SideFileWriter(std::string path, const SideFileKind& kind, std::uint32_t row_tokens)
    : path_(std::move(path)), kind_(kind), row_tokens_(row_tokens) {
  MESHTRAIN_ASSERT(row_tokens >= 2 && (kind.max_row == 0 || row_tokens <= kind.max_row), "%s rows of %u tokens",
                   kind.what, row_tokens);
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr) throw file_io::write_error(path_, errno);
  write_header();
}

SideFileWriter::~SideFileWriter() {
  if (file_) std::fclose(file_);
}

void SideFileWriter::write_header() {
  std::array<unsigned char, kSideFileHeaderBytes> h{};
  std::memcpy(h.data(), kind_.magic, 8);
  formats::store_le32(h.data() + 8, kind_.version);
  formats::store_le32(h.data() + 12, row_tokens_);
  formats::store_le64(h.data() + 16, count_);
  if (std::fwrite(h.data(), 1, h.size(), file_) != h.size()) throw file_io::write_error(path_, errno);
}

void SideFileWriter::append(const unsigned char* bytes, std::size_t n) {
  const int injected = fault::pass(fault::Point::PrepareWrite);  // tests: a full disk, a stall here
  if (injected != 0) throw file_io::write_error(path_, injected, n);
  const std::size_t len = n * kind_.entry_bytes;
  if (std::fwrite(bytes, 1, len, file_) != len) throw file_io::write_error(path_, errno, n);
  count_ += n;
}

void SideFileWriter::close() {
  MESHTRAIN_REQUIRE(file_ != nullptr, "%s was already closed", path_.c_str());
  MESHTRAIN_REQUIRE(std::fseek(file_, 0, SEEK_SET) == 0, "cannot seek in %s: %s", path_.c_str(), std::strerror(errno));
  write_header();
  std::FILE* f = file_;
  file_ = nullptr;  // close_durably closes it, also when it throws
  file_io::close_durably(f, path_);
}

}  // namespace meshtrain::data
