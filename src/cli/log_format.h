// How the CLI and the agent log: spdlog's text lines, or one JSON object per line for log
// collectors (`--log-format json`): {"ts", "level", "logger", "pid", "thread", "msg"}.
#ifndef RAYACCEL_CLI_LOG_FORMAT_H_
#define RAYACCEL_CLI_LOG_FORMAT_H_

#include <string>

namespace rayaccel::cli {

// Installs the process's default logger on stderr; `format` is "text" or "json". False for
// any other format.
bool SetUpLogging(const std::string& format, const std::string& level);

}  // namespace rayaccel::cli

#endif  // RAYACCEL_CLI_LOG_FORMAT_H_
