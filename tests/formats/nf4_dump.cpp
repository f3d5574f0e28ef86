// nf4_dump IN.f32 OUT: NF4-quantizes the float32 weights of IN (raw little-endian) with
// formats::nf4 and writes OUT.codes, OUT.scales, OUT.scale_max and OUT.dequant (float32):
// what tests/formats/nf4_reference.py compares with its own implementation, byte for byte.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "formats/nf4.hpp"

namespace {
template <class T>
bool write(const std::string& path, const std::vector<T>& v) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
  return static_cast<bool>(out);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: nf4_dump IN.f32 OUT\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  const std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::vector<float> x(bytes.size() / sizeof(float));
  std::copy(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(x.size() * sizeof(float)),
            reinterpret_cast<char*>(x.data()));
  namespace nf4 = meshtrain::formats::nf4;
  try {
    const nf4::Quantized q = nf4::quantize(x.data(), static_cast<std::int64_t>(x.size()));
    std::vector<float> back(x.size());
    nf4::dequantize(q, 0, q.n, back.data());
    // A sub-range (an FSDP shard starting mid-block, odd start) dequantizes to the same values.
    if (q.n > 200) {
      std::vector<float> part(101);
      nf4::dequantize(q, 99, 101, part.data());
      for (int i = 0; i < 101; ++i)
        if (part[i] != back[99 + i]) {
          std::fprintf(stderr, "nf4_dump: dequantize(99, 101) differs from the whole at %d\n", 99 + i);
          return 1;
        }
    }
    const std::string out = argv[2];
    if (!write(out + ".codes", q.codes) || !write(out + ".scales", q.scales) || !write(out + ".scale_max", q.scale_max) ||
        !write(out + ".dequant", back)) {
      std::fprintf(stderr, "nf4_dump: cannot write %s.*\n", out.c_str());
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nf4_dump: %s\n", e.what());
    return 1;
  }
  return 0;
}
