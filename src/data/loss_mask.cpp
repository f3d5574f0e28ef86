// Loss-mask files: the per-token 0/1 bytes beside the token files of an instruction or chat
// dataset, in the side-file layout of data/side_file.hpp.
#include "data/loss_mask.hpp"

#include <utility>

#include "core/error.hpp"

namespace meshtrain::data {
namespace {

using ull = unsigned long long;

constexpr SideFileKind kMaskKind{kMaskFileMagic, kMaskFileVersion, 1, 0, "loss-mask file", "re-run `meshtrain prepare`"};

}  // namespace

MaskFile::MaskFile(const std::string& path) : file_(path, kMaskKind) {}

void MaskFile::read(std::uint64_t offset, int len, std::uint8_t* out) const {
  MESHTRAIN_REQUIRE(len >= 0 && offset + static_cast<std::uint64_t>(len) <= size(),
                    "%s: reading mask bytes %llu..%llu past its %llu bytes", path().c_str(), static_cast<ull>(offset),
                    static_cast<ull>(offset + static_cast<std::uint64_t>(len)), static_cast<ull>(size()));
  const unsigned char* m = file_.entries(offset);
  for (int i = 0; i < len; ++i) {
    MESHTRAIN_REQUIRE(m[i] <= 1, "%s: mask byte %u at position %llu is neither 0 nor 1; the file is corrupt, re-run "
                      "`meshtrain prepare`",
                      path().c_str(), static_cast<unsigned>(m[i]), static_cast<ull>(offset + static_cast<std::uint64_t>(i)));
    out[i] = m[i];
  }
}

MaskFileWriter::MaskFileWriter(std::string path, std::uint32_t row_tokens) : file_(std::move(path), kMaskKind, row_tokens) {}

}  // namespace meshtrain::data
