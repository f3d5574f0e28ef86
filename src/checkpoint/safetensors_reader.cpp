// Safetensors reader: validation as in the reference implementation (huggingface/
// safetensors, `SafeTensors::read_metadata` and `Metadata::validate`), then a read-only
// memory mapping from which tensors are converted to fp32.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "meshtrain/checkpoint/safetensors.hpp"
#include "meshtrain/core/bf16.hpp"
#include "meshtrain/core/error.hpp"
#include "meshtrain/core/file_io.hpp"
#include "meshtrain/core/json_parse.hpp"

namespace meshtrain::checkpoint {
namespace {

/// True when `s` is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool valid_utf8(const std::string& s) {
  std::size_t i = 0;
  const std::size_t n = s.size();
  while (i < n) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int len = 0;
    unsigned cp = 0;
    if (c < 0x80) { ++i; continue; }
    if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; }
    else return false;
    if (i + len > n) return false;
    for (int k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
      return false;
    i += len;
  }
  return true;
}

/// A JSON number that is a non-negative integer fitting in 64 bits.
bool parse_uint(const json::Value& v, std::uint64_t& out) {
  if (v.kind != json::Value::Kind::Number || v.text.empty()) return false;
  std::uint64_t x = 0;
  for (char c : v.text) {
    if (c < '0' || c > '9') return false;
    const std::uint64_t d = static_cast<std::uint64_t>(c - '0');
    if (x > (std::numeric_limits<std::uint64_t>::max() - d) / 10) return false;
    x = x * 10 + d;
  }
  out = x;
  return true;
}

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1F;
  std::uint32_t mant = h & 0x3FF;
  std::uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      bits = sign | static_cast<std::uint32_t>(127 - 15 - e) << 23 | (mant & 0x3FF) << 13;
    }
  } else if (exp == 0x1F) {
    bits = sign | 0x7F800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

std::size_t safetensors_dtype_size(const std::string& d) {
  static const std::pair<const char*, std::size_t> sizes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1}, {"I16", 2},  {"U16", 2},
      {"F16", 2},  {"BF16", 2}, {"I32", 4}, {"U32", 4},     {"F32", 4},     {"F64", 8},     {"I64", 8},  {"U64", 8}};
  for (const auto& [name, size] : sizes)
    if (d == name) return size;
  return 0;
}

std::int64_t SafetensorsTensor::numel() const {
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const char* p = path.c_str();
  const int fd = file_io::open_regular_file(path, "safetensors file");  // a FIFO: an error, not a wait
  MESHTRAIN_REQUIRE(fd >= 0, "safetensors file %s cannot be opened: %s", p, std::strerror(errno));
  struct stat sb {};
  if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    ::close(fd);
    throw UserError(strprintf("safetensors file %s is not a regular file", p));
  }
  const std::uint64_t size = static_cast<std::uint64_t>(sb.st_size);
  if (size < 8) {
    ::close(fd);
    throw UserError(strprintf("safetensors file %s is %llu bytes: too small to hold the 8-byte header length", p,
                              static_cast<unsigned long long>(size)));
  }
  map_ = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw UserError(strprintf("safetensors file %s cannot be mapped: %s", p, std::strerror(err)));
  }
  map_bytes_ = size;
  try {
    const unsigned char* bytes = static_cast<const unsigned char*>(map_);
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];  // little-endian u64
    MESHTRAIN_REQUIRE(n <= kMaxHeaderBytes, "safetensors file %s: header length %llu exceeds the limit of %llu bytes",
                      p, static_cast<unsigned long long>(n), static_cast<unsigned long long>(kMaxHeaderBytes));
    MESHTRAIN_REQUIRE(8 + n <= size,
                      "safetensors file %s: header length %llu runs past the end of the file (%llu bytes): the file "
                      "is truncated or not safetensors",
                      p, static_cast<unsigned long long>(n), static_cast<unsigned long long>(size));
    const std::string header(reinterpret_cast<const char*>(bytes + 8), static_cast<std::size_t>(n));
    MESHTRAIN_REQUIRE(valid_utf8(header), "safetensors file %s: the header is not valid UTF-8", p);
    MESHTRAIN_REQUIRE(!header.empty() && header[0] == '{', "safetensors file %s: the header does not start with '{'", p);
    json::Value root;
    try {
      root = json::parse(header);
    } catch (const std::runtime_error& e) {
      throw UserError(strprintf("safetensors file %s: the header is not valid JSON: %s", p, e.what()));
    }
    MESHTRAIN_REQUIRE(root.kind == json::Value::Kind::Object, "safetensors file %s: the header is not a JSON object", p);

    using K = json::Value::Kind;
    for (const auto& [name, v] : root.members) {
      if (name == "__metadata__") {
        MESHTRAIN_REQUIRE(v.kind == K::Object, "safetensors file %s: __metadata__ is not an object of strings", p);
        for (const auto& [k, s] : v.members) {
          MESHTRAIN_REQUIRE(s.kind == K::String, "safetensors file %s: __metadata__ value '%s' is not a string", p,
                            k.c_str());
          metadata_[k] = s.text;
        }
        continue;
      }
      MESHTRAIN_REQUIRE(!index_.count(name), "safetensors file %s: tensor '%s' appears twice in the header", p,
                        name.c_str());
      MESHTRAIN_REQUIRE(v.kind == K::Object, "safetensors file %s: the entry of tensor '%s' is not an object", p,
                        name.c_str());
      SafetensorsTensor t;
      t.name = name;
      bool has_dtype = false, has_shape = false, has_offsets = false;
      for (const auto& [key, field] : v.members) {
        if (key == "dtype") {
          MESHTRAIN_REQUIRE(field.kind == K::String, "safetensors file %s: tensor '%s': dtype is not a string", p,
                            name.c_str());
          t.dtype = field.text;
          MESHTRAIN_REQUIRE(safetensors_dtype_size(t.dtype) > 0, "safetensors file %s: tensor '%s' has unknown dtype '%s'",
                            p, name.c_str(), t.dtype.c_str());
          has_dtype = true;
        } else if (key == "shape") {
          MESHTRAIN_REQUIRE(field.kind == K::Array, "safetensors file %s: tensor '%s': shape is not an array", p,
                            name.c_str());
          for (const json::Value& d : field.items) {
            std::uint64_t x = 0;
            MESHTRAIN_REQUIRE(parse_uint(d, x) && x <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
                              "safetensors file %s: tensor '%s': shape holds something other than non-negative "
                              "integers",
                              p, name.c_str());
            t.shape.push_back(static_cast<std::int64_t>(x));
          }
          has_shape = true;
        } else if (key == "data_offsets") {
          MESHTRAIN_REQUIRE(field.kind == K::Array && field.items.size() == 2 && parse_uint(field.items[0], t.begin) &&
                                parse_uint(field.items[1], t.end),
                            "safetensors file %s: tensor '%s': data_offsets is not two non-negative integers", p,
                            name.c_str());
          MESHTRAIN_REQUIRE(t.begin <= t.end, "safetensors file %s: tensor '%s': data_offsets [%llu, %llu] end before they begin",
                            p, name.c_str(), static_cast<unsigned long long>(t.begin),
                            static_cast<unsigned long long>(t.end));
          has_offsets = true;
        } else {
          throw UserError(strprintf("safetensors file %s: tensor '%s' has an unknown field '%s'", p, name.c_str(),
                                    key.c_str()));
        }
      }
      MESHTRAIN_REQUIRE(has_dtype && has_shape && has_offsets,
                        "safetensors file %s: tensor '%s' lacks %s", p, name.c_str(),
                        !has_dtype ? "dtype" : !has_shape ? "shape" : "data_offsets");
      // numel * dtype size must equal the byte range (overflow is a mismatch too).
      const std::uint64_t dsize = safetensors_dtype_size(t.dtype);
      std::uint64_t bytes_needed = dsize;
      bool overflow = false;
      for (auto s : t.shape) {
        const std::uint64_t d = static_cast<std::uint64_t>(s);
        if (d != 0 && bytes_needed > std::numeric_limits<std::uint64_t>::max() / d) overflow = true;
        else bytes_needed *= d;
      }
      MESHTRAIN_REQUIRE(!overflow && bytes_needed == t.end - t.begin,
                        "safetensors file %s: tensor '%s' of dtype %s and shape %s needs %s bytes but data_offsets "
                        "[%llu, %llu] hold %llu",
                        p, name.c_str(), t.dtype.c_str(), shape_string(t.shape).c_str(),
                        overflow ? "more than 2^64" : std::to_string(bytes_needed).c_str(),
                        static_cast<unsigned long long>(t.begin), static_cast<unsigned long long>(t.end),
                        static_cast<unsigned long long>(t.end - t.begin));
      index_[name] = tensors_.size();
      tensors_.push_back(std::move(t));
    }

    // Sorted by offsets, the tensors must tile the data buffer exactly.
    std::vector<const SafetensorsTensor*> order;
    for (const SafetensorsTensor& t : tensors_) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](const SafetensorsTensor* a, const SafetensorsTensor* b) {
      return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    std::uint64_t at = 0;
    for (const SafetensorsTensor* t : order) {
      MESHTRAIN_REQUIRE(t->begin == at,
                        "safetensors file %s: tensor '%s' starts at byte %llu of the data buffer where %llu was "
                        "expected: tensors must be contiguous and must not overlap",
                        p, t->name.c_str(), static_cast<unsigned long long>(t->begin),
                        static_cast<unsigned long long>(at));
      at = t->end;
    }
    const std::uint64_t buffer = size - 8 - n;
    MESHTRAIN_REQUIRE(at == buffer,
                      "safetensors file %s: the tensors cover %llu bytes but the data buffer holds %llu (%s)", p,
                      static_cast<unsigned long long>(at), static_cast<unsigned long long>(buffer),
                      at < buffer ? "trailing bytes" : "the file is truncated");
    data_ = bytes + 8 + n;
  } catch (...) {
    ::munmap(map_, map_bytes_);
    map_ = nullptr;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_bytes_);
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::read_f32(const SafetensorsTensor& t, std::int64_t first, std::int64_t n, float* out) const {
  MESHTRAIN_ASSERT(first >= 0 && first + n <= t.numel(), "read_f32: elements [%lld, %lld) outside tensor %s",
                   static_cast<long long>(first), static_cast<long long>(first + n), t.name.c_str());
  const std::size_t dsize = safetensors_dtype_size(t.dtype);
  const unsigned char* src = data_ + t.begin + static_cast<std::uint64_t>(first) * dsize;
  if (t.dtype == "F32") {
    std::memcpy(out, src, static_cast<std::size_t>(n) * 4);
  } else if (t.dtype == "BF16" || t.dtype == "F16") {
    const bool brain = t.dtype == "BF16";
    for (std::int64_t i = 0; i < n; ++i) {
      std::uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      out[i] = brain ? bf16::to_float(h) : half_to_float(h);
    }
  } else if (t.dtype == "F64") {
    for (std::int64_t i = 0; i < n; ++i) {
      double d;
      std::memcpy(&d, src + 8 * i, 8);
      out[i] = static_cast<float>(d);
    }
  } else {
    throw UserError(strprintf("safetensors file %s: tensor '%s' has dtype %s; parameters must be F32, F16, BF16 or F64",
                              path_.c_str(), t.name.c_str(), t.dtype.c_str()));
  }
}

}  // namespace meshtrain::checkpoint
