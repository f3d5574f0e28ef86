#pragma once
/// \brief metrics.jsonl: one JSON object per logged step, written by rank 0, each record
/// (object + newline) in one write(2) whose result is checked, so that the file only ever
/// holds whole records -- unless the process dies inside that write, which leaves a torn
/// last line that the next resumed run cuts off (`prepare_metrics_for_resume`).

#include <string>

namespace meshtrain::train {

class MetricsWriter {
 public:
  /// Opens `path` on rank 0 (truncating unless `append`); a no-op writer elsewhere.
  /// UserError / IoError naming the path when it cannot be opened.
  MetricsWriter(const std::string& path, bool append, bool is_root);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  /// Appends `json_line` + '\n' in one write. On failure the file is cut back to its
  /// previous length (no partial record stays) and IoError/UserError names the path (rank
  /// 0 only: the caller makes the ranks agree).
  void write(const std::string& json_line);

 private:
  int fd_ = -1;
  std::string path_;
};

/// \brief Before a run resumed at `last_step` appends to metrics.jsonl (rank 0): keeps the
/// records of steps <= last_step, drops later ones (a run that died after its last
/// checkpoint) and cuts off a torn last line left by a crash inside a write, with a warning.
/// The file is replaced atomically, and only when something changes.
void prepare_metrics_for_resume(const std::string& path, int last_step);

}  // namespace meshtrain::train
