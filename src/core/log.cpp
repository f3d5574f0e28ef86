#include "core/log.hpp"

#include <cstdio>
#include <mutex>

namespace meshtrain::log {
namespace {
int g_rank = 0;
bool g_all_ranks = false;
Level g_level = Level::Info;
bool g_info_to_stderr = false;
std::mutex g_mutex;
}  // namespace

void configure(int rank, bool all_ranks, Level level) {
  g_rank = rank;
  g_all_ranks = all_ranks;
  g_level = level;
}

int rank() { return g_rank; }

void send_info_to_stderr() { g_info_to_stderr = true; }

void write(Level level, const std::string& line) {
  if (level < g_level) return;
  // Warnings and errors from any rank are worth seeing; info only from rank 0 by default.
  if (!g_all_ranks && g_rank != 0 && level < Level::Warn) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  FILE* out = level >= Level::Warn || g_info_to_stderr ? stderr : stdout;
  const char* tag = level == Level::Warn ? "warning: " : level == Level::Error ? "error: " : "";
  if (g_all_ranks || level >= Level::Warn)
    std::fprintf(out, "[rank %d] %s%s\n", g_rank, tag, line.c_str());
  else
    std::fprintf(out, "%s%s\n", tag, line.c_str());
  std::fflush(out);
}

void write_any_rank(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stdout, "[rank %d] %s\n", g_rank, line.c_str());
  std::fflush(stdout);
}

}  // namespace meshtrain::log
