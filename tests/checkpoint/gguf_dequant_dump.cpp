// gguf_dequant_dump FILE OUTDIR NAME[:ROWS]...: writes OUTDIR/NAME.f32, the first ROWS rows
// (default all) of tensor NAME of GGUF file FILE dequantised by meshtrain (raw
// little-endian float32, row-major), for gguf_dequant.py to compare with the reference.
// The same rows are also dequantised by the Kokkos kernel of a base kept in its GGUF blocks
// (kernels::dequantize_gguf, model.base_quant=gguf), which must give the same bits: the
// kernel is then bitwise the reference too, on the gguf package's tensors and SmolLM2's.
#include <Kokkos_Core.hpp>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/views.hpp"
#include "formats/gguf_dequant.hpp"
#include "formats/gguf_file.hpp"
#include "kernels/dequant_gguf.hpp"

namespace {

/// kernels::dequantize_gguf of `numel` elements of `type` at `data` (one run).
std::vector<float> kernel_values(meshtrain::formats::GgmlType type, const std::byte* data, std::size_t bytes,
                                 std::int64_t numel) {
  using namespace meshtrain;
  Buffer<std::uint8_t> pay(bytes, MemCategory::Workspace);
  Kokkos::deep_copy(pay.view(), UView<std::uint8_t, HostMem>(reinterpret_cast<std::uint8_t*>(const_cast<std::byte*>(data)), bytes));
  const kernels::GgufRun run{0, numel, 0, 0, static_cast<std::uint32_t>(type)};
  Buffer<kernels::GgufRun> runs(1, MemCategory::Workspace);
  Kokkos::deep_copy(runs.view(), UView<kernels::GgufRun, HostMem>(const_cast<kernels::GgufRun*>(&run), 1));
  Buffer<float> out(static_cast<std::size_t>(numel), MemCategory::Workspace);
  kernels::dequantize_gguf(pay.data(), runs.data(), 1, 0, kernels::gguf_groups(numel), 0, numel, out.data());
  std::vector<float> host(static_cast<std::size_t>(numel));
  Kokkos::deep_copy(UView<float, HostMem>(host.data(), host.size()), out.view());
  return host;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace meshtrain::formats;
  if (argc < 4) {
    std::fprintf(stderr, "usage: gguf_dequant_dump FILE OUTDIR NAME[:ROWS]...\n");
    return 2;
  }
  Kokkos::ScopeGuard kokkos(argc, argv);
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
      const std::vector<float> kernel = kernel_values(t.type, t.data, rows * row_bytes, rows * cols);
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
        if (std::memcmp(row.data(), kernel.data() + r * cols, row.size() * 4) != 0)
          throw meshtrain::UserError(name + ": kernels::dequantize_gguf differs from formats::gguf_dequantize in row " +
                                     std::to_string(r));
        std::fwrite(row.data(), 4, row.size(), o);
      }
      std::fclose(o);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    meshtrain::MemoryPool::instance().trim();
    return 1;
  }
  meshtrain::MemoryPool::instance().trim();  // the pool's cached blocks go back before Kokkos finalizes
  return 0;
}
