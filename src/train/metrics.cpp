#include "meshtrain/train/metrics.hpp"

#include <cerrno>
#include <cstring>

#include "meshtrain/core/error.hpp"

namespace meshtrain::train {

MetricsWriter::MetricsWriter(const std::string& path, bool append, bool is_root) {
  if (!is_root) return;
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  MESHTRAIN_ASSERT(file_ != nullptr, "cannot open %s: %s", path.c_str(), std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

void MetricsWriter::write(const std::string& line) {
  if (!file_) return;
  std::fputs(line.c_str(), file_);
  std::fputc('\n', file_);
  std::fflush(file_);
}

}  // namespace meshtrain::train
