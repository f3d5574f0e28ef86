#include "meshtrain/data/text_files.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <utility>

#include "meshtrain/core/error.hpp"

namespace meshtrain::data {
namespace {

namespace fs = std::filesystem;

struct Collector {
  std::set<std::string> dirs_seen;                          // canonical paths
  std::vector<std::pair<std::string, std::string>> files;   // (path as found, canonical)
};

void visit(const fs::path& p, bool named_by_user, Collector& c) {
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);  // follows symlinks
  if (ec || !fs::exists(st)) {
    // A dangling link inside a directory is skipped; a missing input is the user's to fix.
    MESHTRAIN_REQUIRE(!named_by_user, "input %s does not exist", p.string().c_str());
    return;
  }
  const fs::path canonical = fs::canonical(p, ec);
  if (ec) return;
  if (fs::is_directory(st)) {
    if (!c.dirs_seen.insert(canonical.string()).second) return;  // a loop or a second link
    std::vector<fs::path> entries;
    fs::directory_iterator it(p, ec);
    MESHTRAIN_REQUIRE(!ec, "cannot read directory %s: %s", p.string().c_str(), ec.message().c_str());
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      MESHTRAIN_REQUIRE(!ec, "cannot read directory %s: %s", p.string().c_str(), ec.message().c_str());
      entries.push_back(it->path());
    }
    std::sort(entries.begin(), entries.end());
    for (const fs::path& e : entries) visit(e, false, c);
  } else if (fs::is_regular_file(st) && p.extension() != ".dat") {
    c.files.emplace_back(p.string(), canonical.string());
  }
}

// Length of the UTF-8 sequence that starts with byte b (0 for an invalid lead byte).
int sequence_length(unsigned char b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

}  // namespace

std::vector<std::string> collect_input_files(const std::vector<std::string>& inputs) {
  Collector c;
  for (const std::string& in : inputs) visit(fs::path(in), true, c);
  std::sort(c.files.begin(), c.files.end());
  std::set<std::string> files_seen;
  std::vector<std::string> out;
  for (const auto& [path, canonical] : c.files)
    if (files_seen.insert(canonical).second) out.push_back(path);
  return out;
}

bool is_valid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  for (std::size_t i = 0; i < n;) {
    const int len = sequence_length(p[i]);
    if (len == 0 || i + len > n) return false;
    for (int k = 1; k < len; ++k)
      if ((p[i + k] & 0xC0) != 0x80) return false;
    if (len == 3) {
      if (p[i] == 0xE0 && p[i + 1] < 0xA0) return false;   // overlong
      if (p[i] == 0xED && p[i + 1] >= 0xA0) return false;  // surrogate
    } else if (len == 4) {
      if (p[i] == 0xF0 && p[i + 1] < 0x90) return false;   // overlong
      if (p[i] == 0xF4 && p[i + 1] >= 0x90) return false;  // above U+10FFFF
    }
    i += static_cast<std::size_t>(len);
  }
  return true;
}

std::string text_rejection(const std::string& content) {
  if (content.empty()) return "empty";
  if (content.find('\0') != std::string::npos) return "contains NUL bytes (binary)";
  if (!is_valid_utf8(content)) return "is not valid UTF-8";
  return "";
}

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MESHTRAIN_REQUIRE(in.good(), "cannot open %s for reading", path.c_str());
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  MESHTRAIN_REQUIRE(!in.bad(), "cannot read %s", path.c_str());
  return bytes;
}

}  // namespace meshtrain::data
