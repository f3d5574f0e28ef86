// gguf_dump FILE: prints what meshtrain's GGUF reader sees, as JSON, so that
// gguf_check.py can compare it with the format's reference reader (the `gguf` package).
// Tensors are summarised (first/last 32 bytes as hex, byte sum) instead of dumped whole.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "formats/gguf_file.hpp"
#include "core/error.hpp"

using meshtrain::formats::GgufFile;
using meshtrain::formats::GgufValue;
using meshtrain::formats::GgufValueType;

namespace {

nlohmann::json value_json(const GgufValue& v) {
  switch (v.type) {
    case GgufValueType::String: return v.s;
    case GgufValueType::Bool: return v.i != 0;
    case GgufValueType::Float32: case GgufValueType::Float64: return v.f;
    case GgufValueType::Array: {
      nlohmann::json a = nlohmann::json::array();
      for (const auto& e : v.array) a.push_back(value_json(e));
      return a;
    }
    case GgufValueType::UInt8: case GgufValueType::UInt16: case GgufValueType::UInt32:
    case GgufValueType::UInt64: return v.u;
    default: return v.i;
  }
}

std::string hex(const std::byte* p, std::size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    const auto b = static_cast<unsigned>(p[i]);
    s += d[b >> 4];
    s += d[b & 15];
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gguf_dump FILE.gguf\n");
    return 2;
  }
  try {
    const GgufFile f(argv[1]);
    nlohmann::ordered_json out;
    out["version"] = f.version();
    out["alignment"] = f.alignment();
    out["data_offset"] = f.data_offset();
    nlohmann::ordered_json md = nlohmann::ordered_json::object();
    for (const auto& [key, v] : f.metadata()) {
      nlohmann::ordered_json e;
      e["type"] = meshtrain::formats::gguf_value_type_name(v.type);
      if (v.type == GgufValueType::Array) e["array_type"] = meshtrain::formats::gguf_value_type_name(v.array_type);
      e["value"] = value_json(v);
      md[key] = e;
    }
    out["metadata"] = md;
    nlohmann::json ts = nlohmann::json::array();
    for (const auto& info : f.tensors()) {
      const auto t = f.tensor(info);
      std::uint64_t sum = 0;
      for (std::size_t i = 0; i < t.nbytes; ++i) sum += static_cast<unsigned>(t.data[i]);
      const std::size_t k = std::min<std::size_t>(32, t.nbytes);
      ts.push_back({{"name", info.name},
                    {"type", meshtrain::formats::ggml_type_name(info.type)},
                    {"shape", t.shape},
                    {"offset", info.offset},
                    {"nbytes", t.nbytes},
                    {"head", hex(t.data, k)},
                    {"tail", hex(t.data + t.nbytes - k, k)},
                    {"byte_sum", sum}});
    }
    out["tensors"] = ts;
    std::cout << out.dump() << "\n";
    return 0;
  } catch (const meshtrain::UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
