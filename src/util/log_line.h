// The library's log as plain text, for code built outside librayaccel that links it: the RPC
// library (rayaccel::rpc), which may be compiled against another spdlog or fmt than the copy
// inside librayaccel.so, formats on its own side and hands over a line. No spdlog or fmt type
// crosses the boundary.
#ifndef RAYACCEL_UTIL_LOG_LINE_H_
#define RAYACCEL_UTIL_LOG_LINE_H_

#include <string>
#include <utility>

#include "fmt/format.h"
#include "rayaccel/log_level.h"

namespace rayaccel {

// Whether a line at `level` would be written (RegistryOptions::log_level).
bool LogEnabled(LogLevel level);
// Writes one line to the library's log (stderr, or RegistryOptions::log_callback).
void LogLine(LogLevel level, const std::string& line);

// Formats (with the caller's fmt) only when the line would be written.
template <typename... Args>
void LogAt(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (LogEnabled(level)) LogLine(level, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace rayaccel

#endif  // RAYACCEL_UTIL_LOG_LINE_H_
