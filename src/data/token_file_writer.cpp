#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "core/error.hpp"
#include "core/file_io.hpp"
#include "data/token_file.hpp"
#include "formats/le_bytes.hpp"

namespace meshtrain::data {

TokenFileWriter::TokenFileWriter(std::string path, std::int64_t vocab_size) : path_(std::move(path)) {
  MESHTRAIN_REQUIRE(vocab_size >= 1 && vocab_size <= INT32_MAX,
                    "cannot write %s: vocabulary size %lld is outside 1 .. 2^31-1", path_.c_str(),
                    static_cast<long long>(vocab_size));
  header_.vocab_size = static_cast<std::uint64_t>(vocab_size);
  header_.bytes_per_token = bytes_per_token_for(vocab_size);
  file_ = std::fopen(path_.c_str(), "wb");
  // write_error: a full disk (ENOSPC, EDQUOT, EIO) is an IoError (exit 74), as in `train`.
  if (file_ == nullptr) throw file_io::write_error(path_, errno);
  const auto h = encode_header(header_);  // count 0 until close()
  write_bytes(h.data(), h.size());
}

TokenFileWriter::~TokenFileWriter() {
  if (file_) std::fclose(file_);
}

void TokenFileWriter::write_bytes(const void* data, std::size_t n) {
  const int injected = fault::pass(fault::Point::PrepareWrite);  // tests: a full disk, a stall here
  if (injected != 0) throw file_io::write_error(path_, injected, n);
  // fwrite's pointer must not be null even for no bytes (an empty append passes an empty vector's data()).
  if (n != 0 && std::fwrite(data, 1, n, file_) != n) throw file_io::write_error(path_, errno, n);
}

void TokenFileWriter::append(const std::int32_t* ids, std::size_t n) {
  const std::size_t w = header_.bytes_per_token;
  std::vector<unsigned char> bytes(n * w);
  for (std::size_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || static_cast<std::uint64_t>(ids[i]) >= header_.vocab_size)
      throw std::out_of_range(strprintf("token id %d outside the vocabulary of %llu written to %s", ids[i],
                                        static_cast<unsigned long long>(header_.vocab_size), path_.c_str()));
    if (w == 2) formats::store_le16(bytes.data() + 2 * i, static_cast<std::uint32_t>(ids[i]));
    else formats::store_le32(bytes.data() + 4 * i, static_cast<std::uint32_t>(ids[i]));
  }
  write_bytes(bytes.data(), bytes.size());
  header_.count += n;
}

void TokenFileWriter::close() {
  MESHTRAIN_REQUIRE(file_ != nullptr, "%s was already closed", path_.c_str());
  const auto h = encode_header(header_);
  MESHTRAIN_REQUIRE(std::fseek(file_, 0, SEEK_SET) == 0, "cannot seek in %s: %s", path_.c_str(),
                    std::strerror(errno));
  write_bytes(h.data(), h.size());
  std::FILE* f = file_;
  file_ = nullptr;  // close_durably closes it, also when it throws
  file_io::close_durably(f, path_);
}

}  // namespace meshtrain::data
