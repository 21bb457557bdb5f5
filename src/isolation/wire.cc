#include "isolation/wire.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace rayaccel::isolation::wire {
namespace {

absl::Status WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    // MSG_NOSIGNAL: a peer that died must be an error here, not a SIGPIPE that kills us.
    ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError(absl::StrCat("write: ", std::strerror(errno)));
    data += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status ReadAll(int fd, char* data, size_t size,
                     std::chrono::steady_clock::time_point deadline) {
  while (size > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return absl::DeadlineExceededError("no answer in time");
    pollfd p{fd, POLLIN, 0};
    // poll() takes an int: wait in slices of at most ~24 days, the loop checks the deadline.
    int ready = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), INT32_MAX)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) continue;
    ssize_t n = read(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError("the plugin host is gone");
    data += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteFrame(int fd, absl::string_view payload) {
  if (payload.size() > kMaxFrameBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a ", payload.size(), "-byte answer, over the frame limit of ", kMaxFrameBytes, " bytes"));
  }
  uint32_t n = static_cast<uint32_t>(payload.size());
  unsigned char len[4] = {static_cast<unsigned char>(n), static_cast<unsigned char>(n >> 8),
                          static_cast<unsigned char>(n >> 16), static_cast<unsigned char>(n >> 24)};
  if (absl::Status st = WriteAll(fd, reinterpret_cast<const char*>(len), 4); !st.ok()) return st;
  return WriteAll(fd, payload.data(), payload.size());
}

absl::StatusOr<std::string> ReadFrame(int fd, std::chrono::steady_clock::time_point deadline,
                                      size_t max_bytes) {
  unsigned char len[4];
  if (absl::Status st = ReadAll(fd, reinterpret_cast<char*>(len), 4, deadline); !st.ok()) {
    return st;
  }
  uint32_t n = len[0] | (len[1] << 8) | (len[2] << 16) | (static_cast<uint32_t>(len[3]) << 24);
  if (n > max_bytes) {
    return absl::DataLossError(
        absl::StrCat("a ", n, "-byte frame, over the ", max_bytes, "-byte limit for this answer"));
  }
  // Grown as the bytes arrive, so a length that lies costs nothing until it is sent.
  constexpr size_t kChunk = 1 << 20;
  std::string payload;
  while (payload.size() < n) {
    size_t at = payload.size();
    payload.resize(at + std::min<size_t>(kChunk, n - at));
    if (absl::Status st = ReadAll(fd, payload.data() + at, payload.size() - at, deadline);
        !st.ok()) {
      return st;
    }
  }
  return payload;
}

}  // namespace rayaccel::isolation::wire
