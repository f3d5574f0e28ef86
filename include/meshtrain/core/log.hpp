#pragma once
/// \brief Logging: rank 0 by default, every rank on request (`output.log_all_ranks`).
/// Lines go to stderr for warnings/errors and stdout for info (and debug), prefixed by the
/// rank when all ranks log; a command whose stdout is its result sends info to stderr too.

#include <string>

#include "core/format.hpp"

namespace meshtrain::log {

enum class Level { Debug = 0, Info = 1, Warn = 2, Error = 3 };

/// Configures the logger (called once the config is known; defaults: rank 0, Info).
void configure(int rank, bool all_ranks, Level level);
int rank();
/// Info and debug lines to stderr as well (default: stdout, the log of train and the other
/// commands). For a command whose stdout is its result -- generate's text or JSON lines --,
/// called before it loads anything: a note printed while loading would be read as the text.
/// Kept by configure().
void send_info_to_stderr();

void write(Level level, const std::string& line);
/// Prints on every rank regardless of configuration (used for per-rank summaries).
void write_any_rank(const std::string& line);

template <class... A>
void info(const char* fmt, A... a) { write(Level::Info, strprintf(fmt, a...)); }
template <class... A>
void warn(const char* fmt, A... a) { write(Level::Warn, strprintf(fmt, a...)); }
template <class... A>
void debug(const char* fmt, A... a) { write(Level::Debug, strprintf(fmt, a...)); }
template <class... A>
void error(const char* fmt, A... a) { write(Level::Error, strprintf(fmt, a...)); }
inline void info(const char* s) { write(Level::Info, s); }
inline void warn(const char* s) { write(Level::Warn, s); }

}  // namespace meshtrain::log
