#pragma once
/// \brief A whole regular file mapped read-only into memory: the one place meshtrain maps a
/// file. The GGUF, safetensors, token-file and loss-mask readers map their file through it
/// and then check their own header in the bytes it shows.

#include <cstdint>
#include <string>

namespace meshtrain::formats {

class MappedFile {
 public:
  /// \brief Opens `path` through file_io::open_regular_file (a FIFO or a device is an error,
  /// not a wait for a writer) and maps all of it. UserError "cannot open WHAT PATH:
  /// <strerror>" when it cannot be opened, "cannot memory-map WHAT PATH: <strerror>" when
  /// the mapping fails. An empty file gives size() == 0 and no mapping (mmap cannot map 0
  /// bytes): the caller's size check names it.
  MappedFile(const std::string& path, const std::string& what);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  /// The file's bytes [0, size()); nullptr for an empty file.
  const unsigned char* data() const { return static_cast<const unsigned char*>(map_); }
  std::uint64_t size() const { return size_; }

 private:
  std::string path_;
  void* map_ = nullptr;
  std::uint64_t size_ = 0;
};

}  // namespace meshtrain::formats
