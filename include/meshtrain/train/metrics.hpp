#pragma once
/// \brief metrics.jsonl: one JSON object per logged step, written by rank 0 and flushed
/// per line (so a preempted job keeps everything it logged).

#include <cstdio>
#include <string>

namespace meshtrain::train {

class MetricsWriter {
 public:
  /// Opens `path` on rank 0 (truncating unless `append`); a no-op writer elsewhere.
  MetricsWriter(const std::string& path, bool append, bool is_root);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write(const std::string& json_line);

 private:
  std::FILE* file_ = nullptr;
};

}  // namespace meshtrain::train
