// gguf_dequant_dump FILE OUTDIR NAME[:ROWS]...: writes OUTDIR/NAME.f32, the first ROWS rows
// (default all) of tensor NAME of GGUF file FILE dequantised by meshtrain (raw
// little-endian float32, row-major), for gguf_dequant.py to compare with the reference.
#include <cstdio>
#include <string>
#include <vector>

#include "formats/gguf_dequant.hpp"
#include "formats/gguf_file.hpp"
#include "core/error.hpp"

int main(int argc, char** argv) {
  using namespace meshtrain::formats;
  if (argc < 4) {
    std::fprintf(stderr, "usage: gguf_dequant_dump FILE OUTDIR NAME[:ROWS]...\n");
    return 2;
  }
  try {
    const GgufFile f(argv[1]);
    for (int a = 3; a < argc; ++a) {
      std::string name = argv[a];
      long long rows = -1;
      if (const auto colon = name.rfind(':'); colon != std::string::npos) {
        rows = std::stoll(name.substr(colon + 1));
        name = name.substr(0, colon);
      }
      const GgufTensor t = f.tensor(name);
      if (!gguf_can_dequantize(t.type)) throw meshtrain::UserError(name + ": type not supported");
      long long numel = 1;
      for (const auto n : t.shape) numel *= n;
      const long long cols = t.shape.back(), all = numel / cols;
      if (rows < 0 || rows > all) rows = all;
      const std::size_t row_bytes = t.nbytes / static_cast<std::size_t>(all);
      std::vector<float> row(static_cast<std::size_t>(cols));
      const std::string out = std::string(argv[2]) + "/" + name + ".f32";
      std::FILE* o = std::fopen(out.c_str(), "wb");
      if (!o) throw meshtrain::UserError("cannot write " + out);
      for (long long r = 0; r < rows; ++r) {
        gguf_dequantize(t.type, t.data + r * row_bytes, 0, cols, row.data());
        // A range that starts and ends inside blocks (how a rank reads its slice) must give
        // the same values as the whole row.
        const long long a = cols / 3, n = cols / 2 - a + 1;
        std::vector<float> part(static_cast<std::size_t>(n));
        gguf_dequantize(t.type, t.data + r * row_bytes, a, n, part.data());
        for (long long i = 0; i < n; ++i)
          if (!(part[i] == row[a + i]) && !(part[i] != part[i] && row[a + i] != row[a + i]))
            throw meshtrain::UserError(name + ": a partial-row read differs from the whole row");
        std::fwrite(row.data(), 4, row.size(), o);
      }
      std::fclose(o);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
