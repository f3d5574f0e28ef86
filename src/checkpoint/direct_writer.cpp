#include "checkpoint/direct_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/file_io.hpp"

namespace meshtrain::checkpoint {

namespace {

std::uint64_t round_up(std::uint64_t x, std::uint64_t a) { return (x + a - 1) / a * a; }
std::uint64_t round_down(std::uint64_t x, std::uint64_t a) { return x / a * a; }

}  // namespace

void DirectWriter::FreeAligned::operator()(void* p) const { std::free(p); }

DirectWriter::DirectWriter(const std::string& path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd_ < 0) {
    open_error_ = errno;
    return;
  }
  void* p = nullptr;
  direct_fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_DIRECT);  // EINVAL: not supported here
  if (direct_fd_ >= 0 && ::posix_memalign(&p, kAlign, kBounce) == 0) {
    bounce_.reset(static_cast<unsigned char*>(p));
  } else if (direct_fd_ >= 0) {
    ::close(direct_fd_);
    direct_fd_ = -1;
  }
}

DirectWriter::~DirectWriter() { (void)close(); }

int DirectWriter::buffered_write(const void* src, std::size_t len, std::uint64_t off) {
  if (len == 0) return 0;
  buffered_first_ = std::min(buffered_first_, off);
  buffered_end_ = std::max<std::uint64_t>(buffered_end_, off + len);
  buffered_bytes_ += len;
  return file_io::pwrite_all(fd_, src, len, off);
}

int DirectWriter::write(const void* src, std::size_t len, std::uint64_t off) {
  const auto* p = static_cast<const unsigned char*>(src);
  const std::uint64_t a0 = round_up(off, kAlign), a1 = round_down(off + len, kAlign);
  if (direct_fd_ < 0 || a1 <= a0 || a1 - a0 < kMinDirect) return buffered_write(p, len, off);
  // head [off, a0) and tail [a1, off + len): pages shared with the neighbouring runs
  if (const int e = buffered_write(p, static_cast<std::size_t>(a0 - off), off)) return e;
  for (std::uint64_t at = a0; at < a1;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kBounce, a1 - at));
    std::memcpy(bounce_.get(), p + (at - off), n);
    const int e = file_io::pwrite_all(direct_fd_, bounce_.get(), n, at);
    if (e == EINVAL) {
      // The device wants a larger alignment than kAlign: the rest goes through the page cache.
      ::close(direct_fd_);
      direct_fd_ = -1;
      return buffered_write(p + (at - off), static_cast<std::size_t>(off + len - at), at);
    }
    if (e != 0) return e;
    direct_bytes_ += n;
    at += n;
  }
  return buffered_write(p + (a1 - off), static_cast<std::size_t>(off + len - a1), a1);
}

int DirectWriter::sync() {
  // O_DIRECT bypasses the page cache, not the device's write cache: one fdatasync makes
  // both kinds of write durable (it flushes the device cache and the file's extents).
  if (::fdatasync(fd_) != 0) return errno;
  // Durable, so clean: these pages are only ever read by a later job. Advisory.
  if (buffered_end_ > buffered_first_)
    (void)::posix_fadvise(fd_, static_cast<off_t>(buffered_first_),
                          static_cast<off_t>(buffered_end_ - buffered_first_), POSIX_FADV_DONTNEED);
  return 0;
}

int DirectWriter::close() {
  int err = 0;
  if (direct_fd_ >= 0 && ::close(direct_fd_) != 0) err = errno;
  if (fd_ >= 0 && ::close(fd_) != 0 && err == 0) err = errno;
  direct_fd_ = fd_ = -1;
  return err;
}

}  // namespace meshtrain::checkpoint
