// GGUF reader: a bounds-checked cursor over a read-only mapping. The rules follow ggml's
// own loader (ggml/src/gguf.cpp, gguf_init_from_file_impl), with every count checked
// against the bytes left before anything is allocated for it.
#include "formats/gguf_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "core/error.hpp"
#include "core/file_io.hpp"

namespace meshtrain::formats {
namespace {

constexpr std::uint32_t kMaxDims = 4;  // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;      // nested arrays are legal; bound the recursion

struct TypeEntry {
  std::uint32_t id;
  GgmlTypeTraits traits;
};

// From the format's reference (gguf-py GGML_QUANT_SIZES / ggml type_traits).
constexpr TypeEntry kTypes[] = {
    {0, {"F32", 1, 4}},          {1, {"F16", 1, 2}},         {2, {"Q4_0", 32, 18}},
    {3, {"Q4_1", 32, 20}},       {6, {"Q5_0", 32, 22}},      {7, {"Q5_1", 32, 24}},
    {8, {"Q8_0", 32, 34}},       {9, {"Q8_1", 32, 40}},      {10, {"Q2_K", 256, 84}},
    {11, {"Q3_K", 256, 110}},    {12, {"Q4_K", 256, 144}},   {13, {"Q5_K", 256, 176}},
    {14, {"Q6_K", 256, 210}},    {15, {"Q8_K", 256, 292}},   {16, {"IQ2_XXS", 256, 66}},
    {17, {"IQ2_XS", 256, 74}},   {18, {"IQ3_XXS", 256, 98}}, {19, {"IQ1_S", 256, 50}},
    {20, {"IQ4_NL", 32, 18}},    {21, {"IQ3_S", 256, 110}},  {22, {"IQ2_S", 256, 82}},
    {23, {"IQ4_XS", 256, 136}},  {24, {"I8", 1, 1}},         {25, {"I16", 1, 2}},
    {26, {"I32", 1, 4}},         {27, {"I64", 1, 8}},        {28, {"F64", 1, 8}},
    {29, {"IQ1_M", 256, 56}},    {30, {"BF16", 1, 2}},       {34, {"TQ1_0", 256, 54}},
    {35, {"TQ2_0", 256, 66}},    {39, {"MXFP4", 32, 17}},
};

/// Size in bytes of a scalar value type; 0 for String/Array (variable).
std::size_t scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::UInt8: case GgufValueType::Int8: case GgufValueType::Bool: return 1;
    case GgufValueType::UInt16: case GgufValueType::Int16: return 2;
    case GgufValueType::UInt32: case GgufValueType::Int32: case GgufValueType::Float32: return 4;
    case GgufValueType::UInt64: case GgufValueType::Int64: case GgufValueType::Float64: return 8;
    default: return 0;
  }
}

bool known_value_type(std::uint32_t t) { return t <= 12; }

/// Reads little-endian values from [p, end); every read checks the bytes left.
class Cursor {
 public:
  Cursor(const unsigned char* begin, std::size_t size, const std::string& path)
      : base_(begin), size_(size), path_(path) {}

  std::uint64_t pos() const { return pos_; }
  std::uint64_t left() const { return size_ - pos_; }

  [[noreturn]] void fail(const std::string& what) const {
    throw UserError(strprintf("GGUF file %s: %s (at byte %llu); the file is damaged or not a GGUF model, "
                              "re-download or re-convert it",
                              path_.c_str(), what.c_str(), static_cast<unsigned long long>(pos_)));
  }

  void need(std::uint64_t n, const char* what) const {
    if (n > left())
      fail(strprintf("%s needs %llu bytes but only %llu are left (truncated file)", what,
                     static_cast<unsigned long long>(n), static_cast<unsigned long long>(left())));
  }

  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));  // the host is little-endian like the format
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const char* what) {
    const std::uint64_t n = read<std::uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(base_ + pos_), static_cast<std::size_t>(n));
    pos_ += n;
    return s;
  }

 private:
  const unsigned char* base_;
  std::uint64_t size_;
  std::uint64_t pos_ = 0;
  const std::string& path_;
};

void read_value(Cursor& c, GgufValueType type, GgufValue& v, int depth, const std::string& key) {
  v.type = type;
  switch (type) {
    case GgufValueType::UInt8: v.u = c.read<std::uint8_t>("a UINT8 value"); break;
    case GgufValueType::Int8: v.i = c.read<std::int8_t>("an INT8 value"); break;
    case GgufValueType::UInt16: v.u = c.read<std::uint16_t>("a UINT16 value"); break;
    case GgufValueType::Int16: v.i = c.read<std::int16_t>("an INT16 value"); break;
    case GgufValueType::UInt32: v.u = c.read<std::uint32_t>("a UINT32 value"); break;
    case GgufValueType::Int32: v.i = c.read<std::int32_t>("an INT32 value"); break;
    case GgufValueType::UInt64: v.u = c.read<std::uint64_t>("a UINT64 value"); break;
    case GgufValueType::Int64: v.i = c.read<std::int64_t>("an INT64 value"); break;
    case GgufValueType::Float32: v.f = c.read<float>("a FLOAT32 value"); break;
    case GgufValueType::Float64: v.f = c.read<double>("a FLOAT64 value"); break;
    case GgufValueType::Bool: {
      const std::uint8_t b = c.read<std::uint8_t>("a BOOL value");
      if (b > 1) c.fail(strprintf("metadata '%s' holds a BOOL of value %u (must be 0 or 1)", key.c_str(), b));
      v.i = b;
      break;
    }
    case GgufValueType::String: v.s = c.read_string("a STRING value"); break;
    case GgufValueType::Array: {
      if (depth >= kMaxArrayDepth)
        c.fail(strprintf("metadata '%s' nests arrays deeper than %d levels", key.c_str(), kMaxArrayDepth));
      const std::uint32_t et = c.read<std::uint32_t>("an array element type");
      if (!known_value_type(et))
        c.fail(strprintf("metadata '%s' is an array of unknown value type %u", key.c_str(), et));
      v.array_type = static_cast<GgufValueType>(et);
      const std::uint64_t n = c.read<std::uint64_t>("an array length");
      // Every element takes at least 1 byte (scalars: their size; strings: 8 for the
      // length; arrays: 12), so a count above the bytes left is a lie: reject it before
      // allocating.
      const std::uint64_t min_elem = scalar_size(v.array_type) ? scalar_size(v.array_type)
                                     : v.array_type == GgufValueType::String ? 8 : 12;
      if (n > c.left() / min_elem)
        c.fail(strprintf("metadata '%s' claims %llu array elements, more than the %llu bytes left can hold",
                         key.c_str(), static_cast<unsigned long long>(n),
                         static_cast<unsigned long long>(c.left())));
      v.array.resize(static_cast<std::size_t>(n));
      for (auto& e : v.array) read_value(c, v.array_type, e, depth + 1, key);
      break;
    }
  }
}

std::uint64_t align_up(std::uint64_t x, std::uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

const char* gguf_value_type_name(GgufValueType t) {
  static const char* const names[] = {"UINT8", "INT8",  "UINT16", "INT16",  "UINT32", "INT32", "FLOAT32",
                                      "BOOL",  "STRING", "ARRAY", "UINT64", "INT64",  "FLOAT64"};
  const auto i = static_cast<std::uint32_t>(t);
  return i <= 12 ? names[i] : "unknown";
}

const GgmlTypeTraits* ggml_type_traits(std::uint32_t t) {
  for (const auto& e : kTypes)
    if (e.id == t) return &e.traits;
  return nullptr;
}

const char* ggml_type_name(GgmlType t) {
  const GgmlTypeTraits* tr = ggml_type_traits(static_cast<std::uint32_t>(t));
  return tr ? tr->name : "unknown";
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufValueType::UInt8: case GgufValueType::Int8: case GgufValueType::UInt16:
    case GgufValueType::Int16: case GgufValueType::UInt32: case GgufValueType::Int32:
    case GgufValueType::UInt64: case GgufValueType::Int64: return true;
    default: return false;
  }
}

std::vector<std::int64_t> GgufTensorInfo::shape() const { return {ne.rbegin(), ne.rend()}; }

std::int64_t GgufTensorInfo::numel() const {
  std::int64_t n = 1;
  for (const std::int64_t d : ne) n *= d;
  return n;
}

GgufFile::GgufFile(const std::string& path) : file_(path, "GGUF file") {
  if (file_.size() < 24)
    throw UserError(strprintf("GGUF file %s is %zu bytes: too small to hold a GGUF header (24 bytes)", path.c_str(),
                              static_cast<std::size_t>(file_.size())));
  parse();
}

void GgufFile::parse() {
  Cursor c(file_.data(), file_size(), path());
  const std::uint32_t magic = c.read<std::uint32_t>("the magic");
  if (magic != 0x46554747u)  // "GGUF" little-endian
    throw UserError(strprintf("GGUF file %s does not start with the GGUF magic: it is not a GGUF file", path().c_str()));
  version_ = c.read<std::uint32_t>("the version");
  if (version_ != 2 && version_ != 3)
    throw UserError(strprintf("GGUF file %s has format version %u; meshtrain reads versions 2 and 3 "
                              "(re-convert the model with a current llama.cpp)",
                              path().c_str(), version_));
  const std::uint64_t n_tensors = c.read<std::uint64_t>("the tensor count");
  const std::uint64_t n_kv = c.read<std::uint64_t>("the metadata count");
  // A key/value takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at
  // least 8 + 4 + 8 + 4 + 8.
  if (n_kv > c.left() / 13) c.fail(strprintf("the header claims %llu metadata entries, more than the file can hold",
                                             static_cast<unsigned long long>(n_kv)));
  metadata_.reserve(static_cast<std::size_t>(n_kv));
  for (std::uint64_t k = 0; k < n_kv; ++k) {
    std::string key = c.read_string("a metadata key");
    const std::uint32_t t = c.read<std::uint32_t>("a metadata value type");
    if (!known_value_type(t)) c.fail(strprintf("metadata '%s' has unknown value type %u", key.c_str(), t));
    GgufValue v;
    read_value(c, static_cast<GgufValueType>(t), v, 0, key);
    if (metadata_index_.count(key)) c.fail(strprintf("metadata key '%s' appears twice", key.c_str()));
    metadata_index_[key] = metadata_.size();
    metadata_.emplace_back(std::move(key), std::move(v));
  }

  if (const GgufValue* a = find_metadata("general.alignment")) {
    if (a->type != GgufValueType::UInt32)
      c.fail(strprintf("general.alignment has type %s; it must be UINT32", gguf_value_type_name(a->type)));
    if (a->u == 0 || (a->u & (a->u - 1)) != 0)
      c.fail(strprintf("general.alignment is %llu; it must be a power of two", static_cast<unsigned long long>(a->u)));
    alignment_ = a->u;
  }

  if (n_tensors > c.left() / 32)
    c.fail(strprintf("the header claims %llu tensors, more than the file can hold",
                     static_cast<unsigned long long>(n_tensors)));
  tensors_.reserve(static_cast<std::size_t>(n_tensors));
  for (std::uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo ti;
    ti.name = c.read_string("a tensor name");
    const std::uint32_t nd = c.read<std::uint32_t>("a tensor's dimension count");
    if (nd < 1 || nd > kMaxDims)
      c.fail(strprintf("tensor '%s' has %u dimensions (must be 1 to %u)", ti.name.c_str(), nd, kMaxDims));
    std::uint64_t numel = 1;
    for (std::uint32_t d = 0; d < nd; ++d) {
      const std::uint64_t e = c.read<std::uint64_t>("a tensor dimension");
      if (e > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
          (e != 0 && numel > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / e))
        c.fail(strprintf("tensor '%s' has more elements than fit in 63 bits", ti.name.c_str()));
      numel *= e;
      ti.ne.push_back(static_cast<std::int64_t>(e));
    }
    const std::uint32_t t = c.read<std::uint32_t>("a tensor type");
    const GgmlTypeTraits* tr = ggml_type_traits(t);
    if (!tr) c.fail(strprintf("tensor '%s' has unknown ggml type %u", ti.name.c_str(), t));
    ti.type = static_cast<GgmlType>(t);
    if (ti.ne[0] % tr->block_elements != 0)
      c.fail(strprintf("tensor '%s' of type %s has rows of %lld elements, not a multiple of the block size %u",
                       ti.name.c_str(), tr->name, static_cast<long long>(ti.ne[0]), tr->block_elements));
    const std::uint64_t blocks = numel / tr->block_elements;
    if (blocks > std::numeric_limits<std::uint64_t>::max() / tr->block_bytes)
      c.fail(strprintf("tensor '%s' has more bytes than fit in 64 bits", ti.name.c_str()));
    ti.nbytes = blocks * tr->block_bytes;
    ti.offset = c.read<std::uint64_t>("a tensor offset");
    if (ti.offset % alignment_ != 0)
      c.fail(strprintf("tensor '%s' starts at data offset %llu, not a multiple of the alignment %llu", ti.name.c_str(),
                       static_cast<unsigned long long>(ti.offset), static_cast<unsigned long long>(alignment_)));
    if (tensor_index_.count(ti.name)) c.fail(strprintf("tensor name '%s' appears twice", ti.name.c_str()));
    tensor_index_[ti.name] = tensors_.size();
    tensors_.push_back(std::move(ti));
  }

  data_offset_ = align_up(c.pos(), alignment_);
  if (n_tensors > 0 && data_offset_ > file_size())
    c.fail("the data section starts past the end of the file");
  const std::uint64_t data_bytes = n_tensors > 0 ? file_size() - data_offset_ : 0;

  // Every tensor inside the data section, none overlapping another.
  std::vector<const GgufTensorInfo*> by_offset;
  for (const auto& t : tensors_) {
    if (t.offset > data_bytes || t.nbytes > data_bytes - t.offset)
      throw UserError(strprintf("GGUF file %s: tensor '%s' (%s, %llu bytes at data offset %llu) extends past the end "
                                "of the file (%llu data bytes): the file is truncated, re-download it",
                                path().c_str(), t.name.c_str(), ggml_type_name(t.type),
                                static_cast<unsigned long long>(t.nbytes), static_cast<unsigned long long>(t.offset),
                                static_cast<unsigned long long>(data_bytes)));
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (std::size_t k = 1; k < by_offset.size(); ++k) {
    const GgufTensorInfo* prev = by_offset[k - 1];
    if (prev->offset + prev->nbytes > by_offset[k]->offset)
      throw UserError(strprintf("GGUF file %s: tensors '%s' and '%s' overlap; the file is damaged",
                                path().c_str(), prev->name.c_str(), by_offset[k]->name.c_str()));
  }
}

const GgufValue* GgufFile::find_metadata(const std::string& key) const {
  const auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

namespace {

const GgufValue& require_key(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find_metadata(key);
  if (!v) throw UserError(strprintf("GGUF file %s has no metadata key '%s'", f.path().c_str(), key.c_str()));
  return *v;
}

[[noreturn]] void wrong_type(const GgufFile& f, const std::string& key, const GgufValue& v, const char* want) {
  std::string have = gguf_value_type_name(v.type);
  if (v.type == GgufValueType::Array) have += std::string(" of ") + gguf_value_type_name(v.array_type);
  throw UserError(strprintf("GGUF file %s: metadata '%s' is %s, expected %s", f.path().c_str(), key.c_str(),
                            have.c_str(), want));
}

std::int64_t as_int(const GgufFile& f, const std::string& key, const GgufValue& v) {
  if (v.type == GgufValueType::Bool) return v.i;
  if (!v.is_integer()) wrong_type(f, key, v, "an integer");
  if (v.type == GgufValueType::UInt8 || v.type == GgufValueType::UInt16 || v.type == GgufValueType::UInt32 ||
      v.type == GgufValueType::UInt64) {
    if (v.u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      throw UserError(strprintf("GGUF file %s: metadata '%s' = %llu does not fit in a signed 64-bit integer",
                                f.path().c_str(), key.c_str(), static_cast<unsigned long long>(v.u)));
    return static_cast<std::int64_t>(v.u);
  }
  return v.i;
}

double as_float(const GgufFile& f, const std::string& key, const GgufValue& v) {
  if (v.is_float()) return v.f;
  if (v.is_integer()) return static_cast<double>(as_int(f, key, v));
  wrong_type(f, key, v, "a number");
}

}  // namespace

std::string GgufFile::metadata_string(const std::string& key) const {
  const GgufValue& v = require_key(*this, key);
  if (v.type != GgufValueType::String) wrong_type(*this, key, v, "STRING");
  return v.s;
}
std::int64_t GgufFile::metadata_int(const std::string& key) const {
  return as_int(*this, key, require_key(*this, key));
}
double GgufFile::metadata_float(const std::string& key) const {
  return as_float(*this, key, require_key(*this, key));
}
bool GgufFile::metadata_bool(const std::string& key) const {
  const GgufValue& v = require_key(*this, key);
  if (v.type != GgufValueType::Bool) wrong_type(*this, key, v, "BOOL");
  return v.i != 0;
}
std::string GgufFile::metadata_string(const std::string& key, const std::string& fallback) const {
  return has_metadata(key) ? metadata_string(key) : fallback;
}
std::int64_t GgufFile::metadata_int(const std::string& key, std::int64_t fallback) const {
  return has_metadata(key) ? metadata_int(key) : fallback;
}
double GgufFile::metadata_float(const std::string& key, double fallback) const {
  return has_metadata(key) ? metadata_float(key) : fallback;
}
bool GgufFile::metadata_bool(const std::string& key, bool fallback) const {
  return has_metadata(key) ? metadata_bool(key) : fallback;
}

const GgufValue& GgufFile::metadata_array(const std::string& key) const {
  const GgufValue& v = require_key(*this, key);
  if (v.type != GgufValueType::Array) wrong_type(*this, key, v, "ARRAY");
  return v;
}

std::vector<std::string> GgufFile::metadata_string_array(const std::string& key) const {
  const GgufValue& v = metadata_array(key);
  if (v.array_type != GgufValueType::String) wrong_type(*this, key, v, "ARRAY of STRING");
  std::vector<std::string> out;
  out.reserve(v.array.size());
  for (const auto& e : v.array) out.push_back(e.s);
  return out;
}

std::vector<std::int64_t> GgufFile::metadata_int_array(const std::string& key) const {
  const GgufValue& v = metadata_array(key);
  std::vector<std::int64_t> out;
  out.reserve(v.array.size());
  for (const auto& e : v.array) {
    if (!e.is_integer() && e.type != GgufValueType::Bool) wrong_type(*this, key, v, "ARRAY of integers");
    out.push_back(as_int(*this, key, e));
  }
  return out;
}

std::vector<double> GgufFile::metadata_float_array(const std::string& key) const {
  const GgufValue& v = metadata_array(key);
  std::vector<double> out;
  out.reserve(v.array.size());
  for (const auto& e : v.array) {
    if (!e.is_float() && !e.is_integer()) wrong_type(*this, key, v, "ARRAY of numbers");
    out.push_back(as_float(*this, key, e));
  }
  return out;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

GgufTensor GgufFile::tensor(const GgufTensorInfo& info) const {
  GgufTensor t;
  t.type = info.type;
  t.shape = info.shape();
  t.data = file_data() + data_offset_ + info.offset;
  t.nbytes = static_cast<std::size_t>(info.nbytes);
  return t;
}

GgufTensor GgufFile::tensor(const std::string& name) const {
  const GgufTensorInfo* info = find_tensor(name);
  if (!info)
    throw UserError(strprintf("GGUF file %s has no tensor '%s' (it has %zu tensors)", path().c_str(), name.c_str(),
                              tensors_.size()));
  return tensor(*info);
}

bool looks_like_gguf(const std::string& path) {
  // A probe: O_NONBLOCK so that a FIFO does not block it (its read finds nothing: not GGUF,
  // and the reader that follows names the FIFO).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  char magic[4] = {};
  const bool ok = ::read(fd, magic, 4) == 4 && std::memcmp(magic, "GGUF", 4) == 0;
  ::close(fd);
  return ok;
}

}  // namespace meshtrain::formats
