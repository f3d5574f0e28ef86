#include "train/metrics.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/fault.hpp"
#include "core/file_io.hpp"
#include "core/log.hpp"

namespace meshtrain::train {

MetricsWriter::MetricsWriter(const std::string& path, bool append, bool is_root) : path_(path) {
  if (!is_root) return;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (append ? 0 : O_TRUNC), 0644);
  if (fd_ < 0) throw file_io::write_error(path, errno);
}

MetricsWriter::~MetricsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsWriter::write(const std::string& line) {
  if (fd_ < 0) return;
  const std::string record = line + "\n";
  const off_t before = ::lseek(fd_, 0, SEEK_END);
  int err = fault::pass(fault::Point::MetricsWrite);
  if (err == 0) {
    const ssize_t n = ::write(fd_, record.data(), record.size());
    if (n < 0) err = errno;
    else if (static_cast<std::size_t>(n) != record.size()) err = ENOSPC;  // a short write: the disk filled up
  }
  if (err == 0) return;
  // No partial record may stay: a resumed run appends after the last newline.
  if (before >= 0 && ::ftruncate(fd_, before) != 0) {
    // Nothing more to do: the next resumed run cuts the torn line off.
  }
  throw file_io::write_error(path_, err, record.size());
}

void prepare_metrics_for_resume(const std::string& path, int last_step) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return;
  // No size bound: a long run's metrics are all kept (read_text_file still refuses a FIFO).
  const std::string text = file_io::read_text_file(path, "", /*max_bytes=*/0);
  std::string kept;
  std::size_t start = 0, dropped = 0, damaged = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    if (end == std::string::npos) {
      log::warn("%s: cut off a torn last line (%zu bytes without a newline) left by an earlier run that died while "
                "writing it",
                path.c_str(), text.size() - start);
      break;
    }
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    // Each record is one JSON object with an integer "step"; anything else (a line damaged
    // by hand or by the file system) cannot be placed before or after the resume point.
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const bool has_step = record.is_object() && record.contains("step") && record["step"].is_number_integer();
    if (!has_step) {
      ++damaged;
      continue;
    }
    if (record["step"].get<long long>() <= last_step)
      kept += line + "\n";
    else
      ++dropped;
  }
  if (damaged > 0)
    log::warn("%s: dropped %zu line(s) that are not metrics records (no JSON object with an integer \"step\")",
              path.c_str(), damaged);
  if (kept.size() == text.size()) return;
  if (dropped > 0)
    log::info("%s: dropped %zu record(s) past step %d, the step this run resumes from", path.c_str(), dropped,
              last_step);
  file_io::replace_file(path, kept);
}

}  // namespace meshtrain::train
