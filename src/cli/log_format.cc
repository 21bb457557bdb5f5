#include "cli/log_format.h"

#include <cstdio>
#include <memory>

#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace rayaccel::cli {
namespace {

// Length of the well-formed UTF-8 sequence at s[0..n), or 0 when it is not one.
size_t Utf8Length(const unsigned char* s, size_t n) {
  auto cont = [&](size_t i, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    return i < n && s[i] >= lo && s[i] <= hi;
  };
  unsigned char c = s[0];
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    bool second = c == 0xE0 ? cont(1, 0xA0) : c == 0xED ? cont(1, 0x80, 0x9F) : cont(1);
    return second && cont(2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    bool second = c == 0xF0 ? cont(1, 0x90) : c == 0xF4 ? cont(1, 0x80, 0x8F) : cont(1);
    return second && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

// The message as the body of a JSON string: quotes, backslashes and control characters
// escaped, bytes that are not UTF-8 replaced by U+FFFD (plugin and peer text can contain
// anything).
class JsonEscapedMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm& /*tm*/,
              spdlog::memory_buf_t& dest) override {
    const auto* bytes = reinterpret_cast<const unsigned char*>(msg.payload.data());
    const size_t size = msg.payload.size();
    for (size_t i = 0; i < size; ++i) {
      const char c = static_cast<char>(bytes[i]);
      if (bytes[i] >= 0x80) {
        size_t length = Utf8Length(bytes + i, size - i);
        if (length == 0) {
          dest.append(std::string_view("\\ufffd"));
        } else {
          dest.append(std::string_view(msg.payload.data() + i, length));
          i += length - 1;
        }
        continue;
      }
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
