#include "util/log.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "spdlog/sinks/base_sink.h"
#include "util/log_line.h"

namespace rayaccel {
namespace {

// One line per message: to the callback as the bare message, or to stderr with time and level.
class Sink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  void Set(std::function<void(LogLevel, const std::string&)> callback) {
    std::lock_guard<std::mutex> lock(mutex_);
    callback_ = std::move(callback);
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (callback_) {
      callback_(FromSpdlogLevel(msg.level), std::string(msg.payload.data(), msg.payload.size()));
      return;
    }
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
  void flush_() override { std::fflush(stderr); }

 private:
  std::function<void(LogLevel, const std::string&)> callback_;
};

struct Logger {
  std::mutex mu;
  uint64_t last_token = 0;
  // Every sink set and not yet restored, newest last: restoring one brings back the one before.
  struct Entry {
    uint64_t token;
    LogLevel level;
    std::function<void(LogLevel, const std::string&)> callback;
  };
  std::vector<Entry> stack;
  std::shared_ptr<Sink> sink = std::make_shared<Sink>();
  spdlog::logger logger{"rayaccel", sink};  // not in spdlog's registry: nobody else's to change
  Logger() { logger.set_level(spdlog::level::warn); }

  void Apply() {  // caller holds mu
    if (stack.empty()) {
      sink->Set(nullptr);
      logger.set_level(spdlog::level::warn);
    } else {
      sink->Set(stack.back().callback);
      logger.set_level(ToSpdlogLevel(stack.back().level));
    }
  }
};

Logger& Instance() {
  static Logger* instance = new Logger();  // never destroyed: threads may log at exit
  return *instance;
}

}  // namespace

spdlog::level::level_enum ToSpdlogLevel(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return spdlog::level::trace;
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarning:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
    default:
      return spdlog::level::off;
  }
}

LogLevel FromSpdlogLevel(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
      return LogLevel::kTrace;
    case spdlog::level::debug:
      return LogLevel::kDebug;
    case spdlog::level::info:
      return LogLevel::kInfo;
    case spdlog::level::warn:
      return LogLevel::kWarning;
    case spdlog::level::err:
    case spdlog::level::critical:
      return LogLevel::kError;
    default:
      return LogLevel::kOff;
  }
}

spdlog::logger& Log() { return Instance().logger; }

bool LogEnabled(LogLevel level) { return Instance().logger.should_log(ToSpdlogLevel(level)); }

void LogLine(LogLevel level, const std::string& line) {
  Instance().logger.log(ToSpdlogLevel(level), "{}", line);
}

uint64_t SetLogSink(LogLevel level, std::function<void(LogLevel, const std::string&)> callback) {
  Logger& l = Instance();
  std::lock_guard<std::mutex> lock(l.mu);
  l.stack.push_back({++l.last_token, level, std::move(callback)});
  l.Apply();
  return l.last_token;
}

void RestoreLogSink(uint64_t token) {
  Logger& l = Instance();
  std::lock_guard<std::mutex> lock(l.mu);
  l.stack.erase(std::remove_if(l.stack.begin(), l.stack.end(),
                               [&](const Logger::Entry& e) { return e.token == token; }),
                l.stack.end());
  l.Apply();
}

void KeepLibraryLogsOffStdout() { setenv("UCX_LOG_FILE", "stderr", /*overwrite=*/0); }

}  // namespace rayaccel
