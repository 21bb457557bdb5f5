// librayaccel's own logger. Never spdlog's default logger (that one belongs to whoever embeds
// the library) and never stdout: lines go to stderr, or to the embedder's callback
// (RegistryOptions::log_callback), at the level it chose.
#ifndef RAYACCEL_UTIL_LOG_H_
#define RAYACCEL_UTIL_LOG_H_

#include <cstdint>
#include <functional>
#include <string>

#include "rayaccel/log_level.h"
#include "spdlog/logger.h"

namespace rayaccel {

// Between the library's levels (RegistryOptions::log_level) and spdlog's.
spdlog::level::level_enum ToSpdlogLevel(LogLevel level);
LogLevel FromSpdlogLevel(spdlog::level::level_enum level);

// The library's logger; every piece of librayaccel logs through it (the RPC library, built
// apart, through LogLine in util/log_line.h).
spdlog::logger& Log();

// Where Log() writes from now on: `callback` (empty: stderr) at `level` and above.
// Process-wide: the library has one logger. Returns a token for RestoreLogSink.
uint64_t SetLogSink(LogLevel level, std::function<void(LogLevel, const std::string&)> callback);
// Withdraws the sink `token` set: the one set before it (still in place) takes over again, or
// stderr at warning. A registry's callback must not outlive the registry: it may capture what
// dies with it.
void RestoreLogSink(uint64_t token);

// For a command's main, first thing, before any thread starts and before UCX loads: UCX's own
// log lines (its errors too: "select.c:549 UCX ERROR no active messages transport ...") go to
// stderr rather than UCX's default, stdout, where they would corrupt a command's --json
// output. UCX reads UCX_LOG_FILE once, when libucs loads; a value the user set stays.
// (libfabric logs to stderr already.)
void KeepLibraryLogsOffStdout();

}  // namespace rayaccel

#endif  // RAYACCEL_UTIL_LOG_H_
