// Safetensors writer: the header (tensors in the caller's order, offsets back to back,
// padded with spaces to a multiple of 8 bytes like the reference writer), then the data.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "formats/safetensors.hpp"
#include "core/error.hpp"
#include "core/fault.hpp"
#include "core/file_io.hpp"
#include "formats/json.hpp"
#include "formats/le_bytes.hpp"

namespace meshtrain::formats {

std::uint64_t SafetensorsEntry::bytes() const {
  std::uint64_t n = safetensors_dtype_size(dtype);
  for (auto s : shape) n *= static_cast<std::uint64_t>(s);
  return n;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata,
                       const std::function<void(std::size_t, std::vector<unsigned char>&)>& fill) {
  // Compact JSON in the caller's order: what the reference writer (and meshtrain before it)
  // writes byte for byte, so an export is reproducible.
  Json root = Json::object();
  if (!metadata.empty()) {
    Json& meta = root["__metadata__"] = Json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
  }
  std::uint64_t offset = 0;
  for (const SafetensorsEntry& e : entries) {
    MESHTRAIN_ASSERT(safetensors_dtype_size(e.dtype) > 0, "write_safetensors: unknown dtype %s", e.dtype.c_str());
    const std::uint64_t end = offset + e.bytes();
    root[e.name] = Json{{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string header = json_text(root);
  header.append((8 - header.size() % 8) % 8, ' ');

  std::FILE* f = std::fopen(path.c_str(), "wb");
  // write_error: a full disk (ENOSPC, EDQUOT, EIO) is an IoError (exit 74), as in `train`.
  if (!f) throw file_io::write_error(path, errno, offset + header.size() + 8);
  bool ok = true;
  unsigned char len[8];
  store_le64(len, header.size());
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
  const std::uint64_t file_bytes = offset + header.size() + 8;
  if (!ok) {
    const int err = errno;
    std::fclose(f);
    std::remove(path.c_str());
    throw file_io::write_error(path, err, file_bytes);
  }
  try {
    file_io::close_durably(f, path, file_bytes);
  } catch (...) {
    std::remove(path.c_str());
    throw;
  }
}

}  // namespace meshtrain::formats
