// Safetensors writer: the header (tensors in the caller's order, offsets back to back,
// padded with spaces to a multiple of 8 bytes like the reference writer), then the data.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "meshtrain/checkpoint/safetensors.hpp"
#include "meshtrain/core/error.hpp"
#include "meshtrain/core/fault.hpp"
#include "meshtrain/core/file_io.hpp"
#include "meshtrain/core/json.hpp"

namespace meshtrain::checkpoint {

std::uint64_t SafetensorsEntry::bytes() const {
  std::uint64_t n = safetensors_dtype_size(dtype);
  for (auto s : shape) n *= static_cast<std::uint64_t>(s);
  return n;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata,
                       const std::function<void(std::size_t, std::vector<unsigned char>&)>& fill) {
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      header += (first ? "" : ",") + json_quote(k) + ":" + json_quote(v);
      first = false;
    }
    header += "}";
  }
  std::uint64_t offset = 0;
  for (const SafetensorsEntry& e : entries) {
    MESHTRAIN_ASSERT(safetensors_dtype_size(e.dtype) > 0, "write_safetensors: unknown dtype %s", e.dtype.c_str());
    std::string shape;
    for (std::size_t i = 0; i < e.shape.size(); ++i) shape += (i ? "," : "") + std::to_string(e.shape[i]);
    const std::uint64_t end = offset + e.bytes();
    header += strprintf("%s%s:{\"dtype\":\"%s\",\"shape\":[%s],\"data_offsets\":[%llu,%llu]}",
                        header.size() > 1 ? "," : "", json_quote(e.name).c_str(), e.dtype.c_str(), shape.c_str(),
                        static_cast<unsigned long long>(offset), static_cast<unsigned long long>(end));
    offset = end;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');

  std::FILE* f = std::fopen(path.c_str(), "wb");
  // write_error: a full disk (ENOSPC, EDQUOT, EIO) is an IoError (exit 74), as in `train`.
  if (!f) throw file_io::write_error(path, errno, offset + header.size() + 8);
  bool ok = true;
  unsigned char len[8];
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(header.data(), 1, header.size(), f) == header.size();
  std::vector<unsigned char> buf;
  for (std::size_t i = 0; ok && i < entries.size(); ++i) {
    buf.clear();
    fill(i, buf);
    MESHTRAIN_ASSERT(buf.size() == entries[i].bytes(), "write_safetensors: tensor %s filled %zu bytes, expected %llu",
                     entries[i].name.c_str(), buf.size(), static_cast<unsigned long long>(entries[i].bytes()));
    if (const int injected = fault::pass(fault::Point::ConvertWrite)) {  // tests: a full disk, a stall here
      errno = injected;
      ok = false;
      break;
    }
    ok = std::fwrite(buf.data(), 1, buf.size(), f) == buf.size();
  }
  ok = ok && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  int err = errno;
  const bool closed = std::fclose(f) == 0;
  if (ok && !closed) err = errno;
  if (!ok || !closed) {
    std::remove(path.c_str());
    throw file_io::write_error(path, err, offset + header.size() + 8);
  }
}

}  // namespace meshtrain::checkpoint
