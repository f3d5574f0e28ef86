// Document-boundary files of packed datasets: one u16 segment id per token beside the token
// and mask files, in the side-file layout of data/side_file.hpp.
#include "data/doc_file.hpp"

#include <utility>
#include <vector>

#include "core/error.hpp"
#include "formats/le_bytes.hpp"

namespace meshtrain::data {
namespace {

using ull = unsigned long long;

constexpr SideFileKind kDocsKind{kDocFileMagic, kDocFileVersion, 2, kDocFileMaxRow, "document-boundary file",
                                 "re-run `meshtrain prepare --pack`"};

}  // namespace

DocFile::DocFile(const std::string& path) : file_(path, kDocsKind) {}

void DocFile::read_row(std::uint64_t offset, int len, std::uint16_t* out) const {
  const std::uint32_t row = row_tokens();
  MESHTRAIN_REQUIRE(len >= 0 && len <= static_cast<int>(row) && offset % row == 0 &&
                        offset + static_cast<std::uint64_t>(len) <= size(),
                    "%s: reading segment ids %llu..%llu, not within one of its rows of %u (%llu ids)", path().c_str(),
                    static_cast<ull>(offset), static_cast<ull>(offset + static_cast<std::uint64_t>(len)), row,
                    static_cast<ull>(size()));
  const unsigned char* p = file_.entries(offset);
  for (int i = 0; i < len; ++i) {
    const auto id = static_cast<std::uint16_t>(formats::load_le16(p + 2 * i));
    const std::uint32_t want_lo = i == 0 ? 0 : out[i - 1], want_hi = i == 0 ? 0 : want_lo + 1u;
    MESHTRAIN_REQUIRE(id >= want_lo && id <= want_hi,
                      "%s: segment id %u at position %llu (token %d of its row) is %s; ids start at 0 in each row and "
                      "grow by 0 or 1; the file is corrupt, re-run `meshtrain prepare --pack`",
                      path().c_str(), static_cast<unsigned>(id), static_cast<ull>(offset + static_cast<std::uint64_t>(i)),
                      i, i == 0 ? "not 0" : (id < want_lo ? "decreasing" : "a jump of more than 1"));
    out[i] = id;
  }
}

DocFileWriter::DocFileWriter(std::string path, std::uint32_t row_tokens) : file_(std::move(path), kDocsKind, row_tokens) {}

void DocFileWriter::append(const std::uint16_t* ids, std::size_t n) {
  std::vector<unsigned char> le(2 * n);
  for (std::size_t i = 0; i < n; ++i) formats::store_le16(le.data() + 2 * i, ids[i]);
  file_.append(le.data(), n);
}

void doc_starts_from_segments(const std::uint16_t* seg, int len, std::int32_t* doc_start) {
  for (int t = 0; t < len; ++t) doc_start[t] = t == 0 || seg[t] != seg[t - 1] ? t : doc_start[t - 1];
}

}  // namespace meshtrain::data
