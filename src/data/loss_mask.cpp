// Loss-mask files: the per-token 0/1 bytes beside the token files of an instruction or chat
// dataset. Same header conventions as the token file (64 bytes, little-endian, mmap).
#include "meshtrain/data/loss_mask.hpp"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "meshtrain/core/error.hpp"
#include "meshtrain/core/file_io.hpp"
#include "meshtrain/formats/le_bytes.hpp"

namespace meshtrain::data {
namespace {
using ull = unsigned long long;
}  // namespace

MaskFile::MaskFile(const std::string& path) : file_(path, "loss-mask file") {
  const std::uint64_t bytes = file_.size();
  MESHTRAIN_REQUIRE(bytes >= kMaskFileHeaderBytes,
                    "%s is not a meshtrain loss-mask file (shorter than its %zu-byte header); re-run `meshtrain prepare`",
                    path.c_str(), kMaskFileHeaderBytes);
  const unsigned char* h = file_.data();
  const bool magic = std::memcmp(h, kMaskFileMagic, 8) == 0;
  const std::uint32_t version = formats::load_le32(h + 8);
  row_tokens_ = formats::load_le32(h + 12);
  count_ = formats::load_le64(h + 16);
  bool reserved_zero = true;
  for (std::size_t i = 24; i < kMaskFileHeaderBytes; ++i) reserved_zero = reserved_zero && h[i] == 0;
  const char* why = !magic                                        ? "it does not start with 'MTLMASK1'"
                    : version != kMaskFileVersion                 ? "its version is not 1"
                    : row_tokens_ < 2                             ? "its row length is below 2"
                    : !reserved_zero                              ? "header bytes 24..63 are not zero"
                    : count_ != bytes - kMaskFileHeaderBytes      ? "its size does not match the count in its header"
                    : count_ % row_tokens_ != 0                   ? "its count is not a multiple of its row length"
                                                                  : nullptr;
  if (why)
    throw UserError(strprintf("%s is not a valid loss-mask file: %s; re-run `meshtrain prepare`", path.c_str(), why));
}

void MaskFile::read(std::uint64_t offset, int len, std::uint8_t* out) const {
  MESHTRAIN_REQUIRE(len >= 0 && offset + static_cast<std::uint64_t>(len) <= count_,
                    "%s: reading mask bytes %llu..%llu past its %llu bytes", path().c_str(), static_cast<ull>(offset),
                    static_cast<ull>(offset + static_cast<std::uint64_t>(len)), static_cast<ull>(count_));
  const unsigned char* m = file_.data() + kMaskFileHeaderBytes + offset;
  for (int i = 0; i < len; ++i) {
    MESHTRAIN_REQUIRE(m[i] <= 1, "%s: mask byte %u at position %llu is neither 0 nor 1; the file is corrupt, re-run "
                      "`meshtrain prepare`",
                      path().c_str(), static_cast<unsigned>(m[i]), static_cast<ull>(offset + static_cast<std::uint64_t>(i)));
    out[i] = m[i];
  }
}

MaskFileWriter::MaskFileWriter(std::string path, std::uint32_t row_tokens)
    : path_(std::move(path)), row_tokens_(row_tokens) {
  file_ = std::fopen(path_.c_str(), "wb");
  // write_error: a full disk (ENOSPC, EDQUOT, EIO) is an IoError (exit 74), as in `train`.
  if (file_ == nullptr) throw file_io::write_error(path_, errno);
  write_header();
}

MaskFileWriter::~MaskFileWriter() {
  if (file_) std::fclose(file_);
}

void MaskFileWriter::write_header() {
  std::array<unsigned char, kMaskFileHeaderBytes> h{};
  std::memcpy(h.data(), kMaskFileMagic, 8);
  formats::store_le32(h.data() + 8, kMaskFileVersion);
  formats::store_le32(h.data() + 12, row_tokens_);
  formats::store_le64(h.data() + 16, count_);
  if (std::fwrite(h.data(), 1, h.size(), file_) != h.size()) throw file_io::write_error(path_, errno);
}

void MaskFileWriter::append(const std::uint8_t* mask, std::size_t n) {
  const int injected = fault::pass(fault::Point::PrepareWrite);  // tests: a full disk, a stall here
  if (injected != 0) throw file_io::write_error(path_, injected, n);
  if (std::fwrite(mask, 1, n, file_) != n) throw file_io::write_error(path_, errno, n);
  count_ += n;
}

void MaskFileWriter::close() {
  MESHTRAIN_REQUIRE(file_ != nullptr, "%s was already closed", path_.c_str());
  MESHTRAIN_REQUIRE(std::fseek(file_, 0, SEEK_SET) == 0, "cannot seek in %s: %s", path_.c_str(), std::strerror(errno));
  write_header();
  std::FILE* f = file_;
  file_ = nullptr;  // close_durably closes it, also when it throws
  file_io::close_durably(f, path_);
}

}  // namespace meshtrain::data
