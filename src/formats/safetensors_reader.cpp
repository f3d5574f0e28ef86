// Safetensors reader: validation as in the reference implementation (huggingface/
// safetensors, `SafeTensors::read_metadata` and `Metadata::validate`), then a read-only
// memory mapping from which tensors are converted to fp32.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "formats/safetensors.hpp"
#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/utf8.hpp"
#include "formats/half.hpp"
#include "formats/json.hpp"
#include "formats/le_bytes.hpp"

namespace meshtrain::formats {

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

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path, "safetensors file") {
  const char* p = path.c_str();
  const std::uint64_t size = file_.size();
  MESHTRAIN_REQUIRE(size >= 8, "safetensors file %s is %llu bytes: too small to hold the 8-byte header length", p,
                    static_cast<unsigned long long>(size));
  const unsigned char* bytes = file_.data();
  const std::uint64_t n = load_le64(bytes);
  MESHTRAIN_REQUIRE(n <= kMaxHeaderBytes, "safetensors file %s: header length %llu exceeds the limit of %llu bytes",
                    p, static_cast<unsigned long long>(n), static_cast<unsigned long long>(kMaxHeaderBytes));
  MESHTRAIN_REQUIRE(8 + n <= size,
                    "safetensors file %s: header length %llu runs past the end of the file (%llu bytes): the file "
                    "is truncated or not safetensors",
                    p, static_cast<unsigned long long>(n), static_cast<unsigned long long>(size));
  const std::string header(reinterpret_cast<const char*>(bytes + 8), static_cast<std::size_t>(n));
  MESHTRAIN_REQUIRE(utf8::valid(header), "safetensors file %s: the header is not valid UTF-8", p);
  MESHTRAIN_REQUIRE(!header.empty() && header[0] == '{', "safetensors file %s: the header does not start with '{'", p);
  Json root;
  try {
    root = parse_json(header);
  } catch (const std::runtime_error& e) {
    throw UserError(strprintf("safetensors file %s: the header is not valid JSON: %s", p, e.what()));
  }
  MESHTRAIN_REQUIRE(root.is_object(), "safetensors file %s: the header is not a JSON object", p);

  for (const auto& [name, v] : root.items()) {
    if (name == "__metadata__") {
      MESHTRAIN_REQUIRE(v.is_object(), "safetensors file %s: __metadata__ is not an object of strings", p);
      for (const auto& [k, s] : v.items()) {
        MESHTRAIN_REQUIRE(s.is_string(), "safetensors file %s: __metadata__ value '%s' is not a string", p,
                          k.c_str());
        metadata_[k] = s.get<std::string>();
      }
      continue;
    }
    MESHTRAIN_REQUIRE(!index_.count(name), "safetensors file %s: tensor '%s' appears twice in the header", p,
                      name.c_str());
    MESHTRAIN_REQUIRE(v.is_object(), "safetensors file %s: the entry of tensor '%s' is not an object", p,
                      name.c_str());
    SafetensorsTensor t;
    t.name = name;
    bool has_dtype = false, has_shape = false, has_offsets = false;
    for (const auto& [key, field] : v.items()) {
      if (key == "dtype") {
        MESHTRAIN_REQUIRE(field.is_string(), "safetensors file %s: tensor '%s': dtype is not a string", p,
                          name.c_str());
        t.dtype = field.get<std::string>();
        MESHTRAIN_REQUIRE(safetensors_dtype_size(t.dtype) > 0, "safetensors file %s: tensor '%s' has unknown dtype '%s'",
                          p, name.c_str(), t.dtype.c_str());
        has_dtype = true;
      } else if (key == "shape") {
        MESHTRAIN_REQUIRE(field.is_array(), "safetensors file %s: tensor '%s': shape is not an array", p,
                          name.c_str());
        for (const Json& d : field) {
          std::uint64_t x = 0;
          MESHTRAIN_REQUIRE(json_uint(d, x) && x <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
                            "safetensors file %s: tensor '%s': shape holds something other than non-negative "
                            "integers",
                            p, name.c_str());
          t.shape.push_back(static_cast<std::int64_t>(x));
        }
        has_shape = true;
      } else if (key == "data_offsets") {
        MESHTRAIN_REQUIRE(field.is_array() && field.size() == 2 && json_uint(field[0], t.begin) &&
                              json_uint(field[1], t.end),
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
      out[i] = brain ? bf16_bits_to_float(h) : half_to_float(h);
    }
  } else if (t.dtype == "F64") {
    for (std::int64_t i = 0; i < n; ++i) {
      double d;
      std::memcpy(&d, src + 8 * i, 8);
      out[i] = static_cast<float>(d);
    }
  } else {
    throw UserError(strprintf("safetensors file %s: tensor '%s' has dtype %s; parameters must be F32, F16, BF16 or F64",
                              path().c_str(), t.name.c_str(), t.dtype.c_str()));
  }
}

}  // namespace meshtrain::formats
