#include "formats/mapped_file.hpp"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"
#include "core/file_io.hpp"
#include "core/format.hpp"

namespace meshtrain::formats {

MappedFile::MappedFile(const std::string& path, const std::string& what) : path_(path) {
  const int fd = file_io::open_regular_file(path, what);
  if (fd < 0) throw UserError(strprintf("cannot open %s %s: %s", what.c_str(), path.c_str(), std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw UserError(strprintf("cannot open %s %s: %s", what.c_str(), path.c_str(), std::strerror(err)));
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
  if (size_ > 0) {
    // The mapping keeps the file readable after the descriptor is closed.
    map_ = ::mmap(nullptr, static_cast<std::size_t>(size_), PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    if (map_ == MAP_FAILED) {
      map_ = nullptr;
      throw UserError(strprintf("cannot memory-map %s %s: %s", what.c_str(), path.c_str(), std::strerror(err)));
    }
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  if (map_) ::munmap(map_, static_cast<std::size_t>(size_));
}

}  // namespace meshtrain::formats
