#pragma once
// Writes byte runs at given offsets of an existing file without filling the page cache
// (the asynchronous save's background writes, async_save.cpp).
//
// Why: a checkpoint is read back only by a later job, and every save writes a new file of
// the whole state. Through the page cache each save would first allocate that many fresh
// pages and copy into them, which on the 2-core development VM costs the background thread
// ~2.7 us of CPU per 4 KiB page (the state of the 23M benchmark model: ~0.4 s per rank and
// save, taken from training when no core is idle; perf/README.md "Asynchronous
// checkpoints"). With O_DIRECT the device reads the bytes from one small aligned bounce
// buffer instead.
//
// How: a run's page-aligned interior goes through O_DIRECT (4 KiB alignment of the file
// offset, the length and the buffer: what every common block device accepts); its partial
// first and last pages -- which a neighbouring run, perhaps another rank's, shares -- go
// through a plain pwrite, so no page is ever written both ways. A page written with
// O_DIRECT is owned wholly by this run, so no other rank touches it. Where the file system
// refuses O_DIRECT (tmpfs, some network file systems) everything is a plain pwrite, and the
// pages written are dropped from the page cache once durable (sync()).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace meshtrain::checkpoint {

class DirectWriter {
 public:
  /// Opens `path` for writing (it must exist). open_error() is the errno of a failure.
  explicit DirectWriter(const std::string& path);
  ~DirectWriter();
  DirectWriter(const DirectWriter&) = delete;
  DirectWriter& operator=(const DirectWriter&) = delete;

  int open_error() const { return open_error_; }
  /// `len` bytes from `src` at file offset `off`: 0 or the errno of the failure.
  int write(const void* src, std::size_t len, std::uint64_t off);
  /// fdatasync, then the buffered pages written are dropped from the page cache: 0 or errno.
  int sync();
  /// Closes both descriptors: 0 or the errno of the first failure.
  int close();
  /// Bytes written with O_DIRECT and with plain pwrite so far.
  std::uint64_t direct_bytes() const { return direct_bytes_; }
  std::uint64_t buffered_bytes() const { return buffered_bytes_; }

  static constexpr std::size_t kAlign = 4096;          ///< offset, length and buffer alignment
  static constexpr std::size_t kBounce = 4 << 20;      ///< bytes per O_DIRECT write
  static constexpr std::size_t kMinDirect = 64 << 10;  ///< shorter interiors stay buffered

 private:
  int buffered_write(const void* src, std::size_t len, std::uint64_t off);

  int fd_ = -1;         ///< plain descriptor: edges, short runs, fdatasync
  int direct_fd_ = -1;  ///< O_DIRECT descriptor; -1 where the file system refuses it
  int open_error_ = 0;
  struct FreeAligned {
    void operator()(void* p) const;
  };
  std::unique_ptr<unsigned char, FreeAligned> bounce_;
  std::uint64_t direct_bytes_ = 0, buffered_bytes_ = 0;
  std::uint64_t buffered_first_ = UINT64_MAX, buffered_end_ = 0;  ///< range of the plain writes
};

}  // namespace meshtrain::checkpoint
