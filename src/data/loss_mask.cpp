// Loss-mask files: the per-token 0/1 bytes beside the token files of an instruction or chat
// dataset. Same header conventions as the token file (64 bytes, little-endian, mmap).
#include "meshtrain/data/loss_mask.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "le_bytes.hpp"
#include "meshtrain/core/error.hpp"
#include "meshtrain/core/file_io.hpp"

namespace meshtrain::data {
namespace {
using ull = unsigned long long;
}  // namespace

MaskFile::MaskFile(const std::string& path) : path_(path) {
  const int fd = file_io::open_regular_file(path, "loss-mask file");  // a FIFO: an error, not a wait
  MESHTRAIN_REQUIRE(fd >= 0, "cannot open %s: %s; re-run `meshtrain prepare`", path.c_str(), std::strerror(errno));
  struct stat st {};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  const auto bytes = static_cast<std::uint64_t>(stat_ok ? st.st_size : 0);
  if (!stat_ok || bytes < kMaskFileHeaderBytes) {
    ::close(fd);
    throw UserError(strprintf("%s is not a meshtrain loss-mask file (shorter than its %zu-byte header); re-run "
                              "`meshtrain prepare`",
                              path.c_str(), kMaskFileHeaderBytes));
  }
  map_bytes_ = static_cast<std::size_t>(bytes);
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  MESHTRAIN_REQUIRE(map_ != MAP_FAILED, "cannot map %s: %s", path.c_str(), std::strerror(errno));
  const auto* h = static_cast<const unsigned char*>(map_);
  const bool magic = std::memcmp(h, kMaskFileMagic, 8) == 0;
  const std::uint32_t version = load_le32(h + 8);
  row_tokens_ = load_le32(h + 12);
  count_ = load_le64(h + 16);
  bool reserved_zero = true;
  for (std::size_t i = 24; i < kMaskFileHeaderBytes; ++i) reserved_zero = reserved_zero && h[i] == 0;
  const char* why = !magic                                        ? "it does not start with 'MTLMASK1'"
                    : version != kMaskFileVersion                 ? "its version is not 1"
                    : row_tokens_ < 2                             ? "its row length is below 2"
                    : !reserved_zero                              ? "header bytes 24..63 are not zero"
                    : count_ != bytes - kMaskFileHeaderBytes      ? "its size does not match the count in its header"
                    : count_ % row_tokens_ != 0                   ? "its count is not a multiple of its row length"
                                                                  : nullptr;
  if (why) {
    ::munmap(map_, map_bytes_);
    map_ = nullptr;
    throw UserError(strprintf("%s is not a valid loss-mask file: %s; re-run `meshtrain prepare`", path.c_str(), why));
  }
}

MaskFile::~MaskFile() {
  if (map_) ::munmap(map_, map_bytes_);
}

void MaskFile::read(std::uint64_t offset, int len, std::uint8_t* out) const {
  MESHTRAIN_REQUIRE(len >= 0 && offset + static_cast<std::uint64_t>(len) <= count_,
                    "%s: reading mask bytes %llu..%llu past its %llu bytes", path_.c_str(), static_cast<ull>(offset),
                    static_cast<ull>(offset + static_cast<std::uint64_t>(len)), static_cast<ull>(count_));
  const auto* m = static_cast<const unsigned char*>(map_) + kMaskFileHeaderBytes + offset;
  for (int i = 0; i < len; ++i) {
    MESHTRAIN_REQUIRE(m[i] <= 1, "%s: mask byte %u at position %llu is neither 0 nor 1; the file is corrupt, re-run "
                      "`meshtrain prepare`",
                      path_.c_str(), static_cast<unsigned>(m[i]), static_cast<ull>(offset + static_cast<std::uint64_t>(i)));
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
  store_le32(h.data() + 8, kMaskFileVersion);
  store_le32(h.data() + 12, row_tokens_);
  store_le64(h.data() + 16, count_);
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
  const bool ok = std::fflush(file_) == 0 && ::fsync(fileno(file_)) == 0;
  const int err = errno;
  const bool closed = std::fclose(file_) == 0;
  const int close_err = errno;
  file_ = nullptr;
  if (!ok || !closed) throw file_io::write_error(path_, ok ? close_err : err);
}

}  // namespace meshtrain::data
