#include "cli/sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"

namespace rayaccel::cli {

bool SdNotify(const std::string& state) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (path == nullptr || path[0] == '\0') return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const size_t length = std::strlen(path);
  // An absolute path, or an abstract socket written with a leading '@'.
  if ((path[0] != '/' && path[0] != '@') || length >= sizeof(addr.sun_path)) return false;
  std::memcpy(addr.sun_path, path, length);
  if (path[0] == '@') addr.sun_path[0] = '\0';
  const socklen_t size = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + length);
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  ssize_t sent = sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                        reinterpret_cast<const sockaddr*>(&addr), size);
  close(fd);
  return sent == static_cast<ssize_t>(state.size());
}

std::chrono::microseconds SdWatchdogInterval() {
  const char* usec = std::getenv("WATCHDOG_USEC");
  uint64_t value = 0;
  if (usec == nullptr || !absl::SimpleAtoi(usec, &value) || value == 0) {
    return std::chrono::microseconds(0);
  }
  // The interval is for the process WATCHDOG_PID names, when it names one.
  if (const char* pid = std::getenv("WATCHDOG_PID"); pid != nullptr) {
    int64_t for_pid = 0;
    if (!absl::SimpleAtoi(pid, &for_pid) || for_pid != getpid()) {
      return std::chrono::microseconds(0);
    }
  }
  return std::chrono::microseconds(value);
}

}  // namespace rayaccel::cli
