// rayaccel/log_level.h: the levels of the library's log (RegistryOptions, the log callback).
#ifndef RAYACCEL_LOG_LEVEL_H_
#define RAYACCEL_LOG_LEVEL_H_

namespace rayaccel {

enum class LogLevel { kTrace = 0, kDebug = 1, kInfo = 2, kWarning = 3, kError = 4, kOff = 5 };

}  // namespace rayaccel

#endif  // RAYACCEL_LOG_LEVEL_H_
