// The GGUF reader on files built byte by byte here: a valid file reads back through every
// accessor; every truncation, every lying count, type, dimension and offset, and random
// byte damage give a UserError naming the file (never a crash or a huge allocation).
// Interop with the format's reference package is gguf_python.sh.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "formats/gguf_file.hpp"
#include "core/error.hpp"
#include "test_support.hpp"

namespace meshtrain::test {
namespace {

namespace fs = std::filesystem;
using formats::GgmlType;
using formats::GgufFile;
using formats::GgufValueType;

std::string dir() {
  static const std::string d = [] {
    const std::string p = "gguf_test_rank" + std::to_string(world().rank());
    fs::remove_all(p);
    fs::create_directories(p);
    return p;
  }();
  return d;
}

/// Little-endian byte appender.
struct Bytes {
  std::string b;
  template <typename T>
  Bytes& put(T v) {
    b.append(reinterpret_cast<const char*>(&v), sizeof(T));
    return *this;
  }
  Bytes& str(const std::string& s) {
    put<std::uint64_t>(s.size());
    b += s;
    return *this;
  }
};

struct Tensor {
  std::string name;
  std::vector<std::uint64_t> ne;
  std::uint32_t type;
  std::uint64_t offset;
  std::uint64_t nbytes;  // bytes of data written for it
};

/// A GGUF file: header, `kvs` (already encoded: key, type, value), tensor infos, padding to
/// `alignment`, data. Counts can be overridden to lie.
struct Spec {
  std::uint32_t magic = 0x46554747u;
  std::uint32_t version = 3;
  std::vector<std::string> kvs;
  std::vector<Tensor> tensors;
  std::uint64_t alignment = 32;
  std::int64_t n_kv = -1, n_tensors = -1;
};

std::string kv_u32(const std::string& key, std::uint32_t v) {
  Bytes b;
  b.str(key).put<std::uint32_t>(4).put(v);
  return b.b;
}
std::string kv_str(const std::string& key, const std::string& v) {
  Bytes b;
  b.str(key).put<std::uint32_t>(8).str(v);
  return b.b;
}
std::string kv_strs(const std::string& key, const std::vector<std::string>& v) {
  Bytes b;
  b.str(key).put<std::uint32_t>(9).put<std::uint32_t>(8).put<std::uint64_t>(v.size());
  for (const auto& s : v) b.str(s);
  return b.b;
}
std::string kv_i32s(const std::string& key, const std::vector<std::int32_t>& v) {
  Bytes b;
  b.str(key).put<std::uint32_t>(9).put<std::uint32_t>(5).put<std::uint64_t>(v.size());
  for (auto x : v) b.put(x);
  return b.b;
}

std::string encode(const Spec& s) {
  Bytes b;
  b.put(s.magic).put(s.version);
  b.put<std::uint64_t>(s.n_tensors >= 0 ? s.n_tensors : s.tensors.size());
  b.put<std::uint64_t>(s.n_kv >= 0 ? s.n_kv : s.kvs.size());
  for (const auto& kv : s.kvs) b.b += kv;
  std::uint64_t end = 0;
  for (const auto& t : s.tensors) {
    b.str(t.name).put<std::uint32_t>(t.ne.size());
    for (auto d : t.ne) b.put(d);
    b.put(t.type).put(t.offset);
    end = std::max(end, t.offset + t.nbytes);
  }
  while (b.b.size() % s.alignment) b.b += '\0';
  std::string data(end, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + 1);
  return b.b + data;
}

std::string write(const std::string& name, const std::string& bytes) {
  const std::string path = dir() + "/" + name + ".gguf";
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}

/// A valid file: metadata of several types and two tensors, F32 (3, 4) and Q8_0 (2, 32).
Spec valid() {
  Spec s;
  s.kvs = {kv_str("general.architecture", "llama"), kv_u32("llama.block_count", 2),
           kv_strs("tokenizer.ggml.tokens", {"a", "b", "Ġc"}), kv_i32s("tokenizer.ggml.token_type", {1, 1, -3})};
  s.tensors = {{"w.f32", {4, 3}, 0, 0, 48}, {"w.q8", {32, 2}, 8, 64, 68}};
  return s;
}

/// Opening `path` fails with a UserError that names the file and holds `part`.
void expect_rejected(const std::string& path, const std::string& part) {
  try {
    formats::GgufFile f(path);
    ADD_FAILURE() << path << " was accepted (expected: " << part << ")";
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(path), std::string::npos) << "the file is not named: " << m;
    EXPECT_NE(m.find(part), std::string::npos) << "expected '" << part << "' in: " << m;
  }
}

TEST(Gguf, ValidFileReadsBack) {
  const std::string bytes = encode(valid());
  const std::string path = write("valid", bytes);
  formats::GgufFile f(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  ASSERT_EQ(f.metadata().size(), 4u);
  EXPECT_EQ(f.metadata_string("general.architecture"), "llama");
  EXPECT_EQ(f.metadata_int("llama.block_count"), 2);
  EXPECT_DOUBLE_EQ(f.metadata_float("llama.block_count"), 2.0);
  EXPECT_EQ(f.metadata_string_array("tokenizer.ggml.tokens"), (std::vector<std::string>{"a", "b", "Ġc"}));
  EXPECT_EQ(f.metadata_int_array("tokenizer.ggml.token_type"), (std::vector<std::int64_t>{1, 1, -3}));
  EXPECT_EQ(f.metadata_int("absent.key", 7), 7);
  EXPECT_EQ(f.metadata_string("absent.key", "x"), "x");
  EXPECT_THROW(f.metadata_int("general.architecture"), UserError);
  EXPECT_THROW(f.metadata_string_array("tokenizer.ggml.token_type"), UserError);
  EXPECT_THROW(f.metadata_string("absent.key"), UserError);
  ASSERT_EQ(f.tensors().size(), 2u);
  const auto a = f.tensor("w.f32");
  EXPECT_EQ(a.type, formats::GgmlType::F32);
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(a.nbytes, 48u);
  const auto q = f.tensor("w.q8");
  EXPECT_EQ(q.type, formats::GgmlType::Q8_0);
  EXPECT_EQ(q.shape, (std::vector<std::int64_t>{2, 32}));
  EXPECT_EQ(q.nbytes, 68u);  // 2 blocks of 34 bytes
  // The pointers are into the file at data_offset + offset.
  EXPECT_EQ(a.data, f.file_data() + f.data_offset());
  EXPECT_EQ(std::memcmp(q.data, bytes.data() + f.data_offset() + 64, 68), 0);
  EXPECT_THROW(f.tensor("absent"), UserError);
}

TEST(Gguf, EveryTruncationIsRejected) {
  const std::string bytes = encode(valid());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    const std::string path = write("trunc", bytes.substr(0, n));
    try {
      formats::GgufFile f(path);
      ADD_FAILURE() << "a file cut to " << n << " of " << bytes.size() << " bytes was accepted";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
}

TEST(Gguf, LiesAreRejected) {
  {
    Spec s = valid();
    s.magic = 0x12345678;
    expect_rejected(write("magic", encode(s)), "not a GGUF file");
  }
  for (std::uint32_t v : {1u, 4u}) {
    Spec s = valid();
    s.version = v;
    expect_rejected(write("version", encode(s)), "versions 2 and 3");
  }
  {
    Spec s = valid();
    s.n_kv = 1ll << 40;
    expect_rejected(write("nkv", encode(s)), "metadata entries");
  }
  {
    Spec s = valid();
    s.n_tensors = 1ll << 40;
    expect_rejected(write("ntensors", encode(s)), "tensors, more than");
  }
  {  // an array claiming 2^60 strings
    Spec s = valid();
    Bytes b;
    b.str("big").put<std::uint32_t>(9).put<std::uint32_t>(8).put<std::uint64_t>(1ull << 60);
    s.kvs.push_back(b.b);
    expect_rejected(write("bigarray", encode(s)), "array elements");
  }
  {  // a string claiming 2^62 bytes
    Spec s = valid();
    Bytes b;
    b.str("bigstr").put<std::uint32_t>(8).put<std::uint64_t>(1ull << 62);
    s.kvs.push_back(b.b);
    expect_rejected(write("bigstr", encode(s)), "truncated");
  }
  {
    Spec s = valid();
    Bytes b;
    b.str("badtype").put<std::uint32_t>(13).put<std::uint32_t>(0);
    s.kvs.push_back(b.b);
    expect_rejected(write("valuetype", encode(s)), "unknown value type 13");
  }
  {
    Spec s = valid();
    Bytes b;
    b.str("flag").put<std::uint32_t>(7).put<std::uint8_t>(2);
    s.kvs.push_back(b.b);
    expect_rejected(write("bool", encode(s)), "must be 0 or 1");
  }
  {
    Spec s = valid();
    s.kvs.push_back(kv_u32("llama.block_count", 3));
    expect_rejected(write("dupkey", encode(s)), "appears twice");
  }
  {
    Spec s = valid();
    s.tensors[1].name = "w.f32";
    expect_rejected(write("dupname", encode(s)), "appears twice");
  }
  {
    Spec s = valid();
    s.tensors[0].type = 4;  // retired Q4_2
    expect_rejected(write("ggmltype", encode(s)), "unknown ggml type 4");
  }
  {
    Spec s = valid();
    s.tensors[0].ne = {};
    expect_rejected(write("dims0", encode(s)), "0 dimensions");
    s.tensors[0].ne = {1, 1, 1, 1, 48};
    expect_rejected(write("dims5", encode(s)), "5 dimensions");
  }
  {
    Spec s = valid();
    s.tensors[0].ne = {1ull << 40, 1ull << 40};
    expect_rejected(write("numel", encode(s)), "63 bits");
  }
  {
    Spec s = valid();
    s.tensors[1].ne = {16, 4};  // Q8_0 rows of 16: not whole blocks of 32
    expect_rejected(write("block", encode(s)), "block size 32");
  }
  {
    Spec s = valid();
    s.tensors[1].offset = 48;  // not a multiple of 32
    expect_rejected(write("align", encode(s)), "multiple of the alignment");
  }
  {
    Spec s = valid();
    s.tensors[1].offset = 32;  // F32 tensor is [0, 48)
    expect_rejected(write("overlap", encode(s)), "overlap");
  }
  {
    Spec s = valid();
    s.tensors[0].ne = {4, 3000};  // 48000 bytes, the file holds 132
    s.tensors[0].nbytes = 48;
    expect_rejected(write("pastend", encode(s)), "extends past the end");
  }
  {
    Spec s = valid();
    s.kvs.push_back(kv_u32("general.alignment", 24));
    expect_rejected(write("alignpow2", encode(s)), "power of two");
  }
}

TEST(Gguf, CustomAlignment) {
  Spec s = valid();
  s.kvs.push_back(kv_u32("general.alignment", 64));
  s.alignment = 64;
  s.tensors[1].offset = 64;
  formats::GgufFile f(write("align64", encode(s)));
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
}

TEST(Gguf, RandomDamageNeverCrashes) {
  const std::string bytes = encode(valid());
  std::mt19937 rng(1234);
  int accepted = 0, rejected = 0;
  for (int trial = 0; trial < 500; ++trial) {
    std::string damaged = bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) damaged[rng() % damaged.size()] = static_cast<char>(rng());
    const std::string path = write("damaged", damaged);
    try {
      formats::GgufFile f(path);
      for (const auto& t : f.tensors()) {  // whatever was accepted is inside the file
        const auto v = f.tensor(t);
        ASSERT_GE(v.data, f.file_data());
        ASSERT_LE(v.data + v.nbytes, f.file_data() + f.file_size());
      }
      ++accepted;
    } catch (const UserError&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace meshtrain::test
