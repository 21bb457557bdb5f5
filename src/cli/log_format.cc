#include "cli/log_format.h"

#include <cstdio>
#include <memory>

#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace rayaccel::cli {
namespace {

// The message as the body of a JSON string: quotes, backslashes and control characters
// escaped (plugin and peer text can contain anything).
class JsonEscapedMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm& /*tm*/,
              spdlog::memory_buf_t& dest) override {
    for (char c : msg.payload) {
      switch (c) {
        case '"':
          dest.append(std::string_view("\\\""));
          break;
        case '\\':
          dest.append(std::string_view("\\\\"));
          break;
        case '\n':
          dest.append(std::string_view("\\n"));
          break;
        case '\t':
          dest.append(std::string_view("\\t"));
          break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char escaped[8];
            std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
            dest.append(std::string_view(escaped));
          } else {
            dest.push_back(c);
          }
      }
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonEscapedMessage>();
  }
};

}  // namespace

bool SetUpLogging(const std::string& format, const std::string& level) {
  if (format != "text" && format != "json") return false;
  auto logger = spdlog::stderr_color_mt("rayaccel");
  if (format == "json") {
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<JsonEscapedMessage>('*').set_pattern(
        R"({"ts": "%Y-%m-%dT%H:%M:%S.%f%z", "level": "%l", "logger": "%n", "pid": %P, )"
        R"("thread": %t, "msg": "%*"})");
    logger->set_formatter(std::move(formatter));
  }
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(level));
  return true;
}

}  // namespace rayaccel::cli
