#include "isolation/wire.h"

#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace rayaccel::isolation::wire {
namespace {

// Sends `count` parts with as few system calls as the socket allows: a frame's length and its
// payload together, so that the reader wakes once for a frame rather than once for its length
// and again for the rest.
absl::Status WriteAll(int fd, iovec* part, size_t count) {
  while (count > 0) {
    msghdr m{};
    m.msg_iov = part;
    m.msg_iovlen = count;
    // MSG_NOSIGNAL: a peer that died must be an error here, not a SIGPIPE that kills us.
    ssize_t n = sendmsg(fd, &m, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError(absl::StrCat("write: ", std::strerror(errno)));
    auto sent = static_cast<size_t>(n);
    for (; count > 0 && sent >= part->iov_len; ++part, --count) sent -= part->iov_len;
    if (count > 0) {
      part->iov_base = static_cast<char*>(part->iov_base) + sent;
      part->iov_len -= sent;
    }
  }
  return absl::OkStatus();
}

absl::Status ReadAll(int fd, char* data, size_t size,
                     std::chrono::steady_clock::time_point deadline,
                     std::chrono::microseconds spin = std::chrono::microseconds(0)) {
  // An answer expected soon is looked for without sleeping first: a wake-up from poll costs
  // tens of microseconds on a virtual machine, more than many answers take. The thread yields
  // between looks, so that on one core the other side still runs.
  for (auto until = std::chrono::steady_clock::now() + spin;
       size > 0 && std::chrono::steady_clock::now() < until;) {
    ssize_t n = recv(fd, data, size, MSG_DONTWAIT);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
    } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      return absl::UnavailableError("the plugin host is gone");
    } else {
      sched_yield();
    }
  }
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
  iovec parts[2] = {{len, sizeof(len)}, {const_cast<char*>(payload.data()), payload.size()}};
  return WriteAll(fd, parts, 2);
}

absl::StatusOr<std::string> ReadFrame(int fd, std::chrono::steady_clock::time_point deadline,
                                      size_t max_bytes, std::chrono::microseconds spin) {
  unsigned char len[4];
  if (absl::Status st = ReadAll(fd, reinterpret_cast<char*>(len), 4, deadline, spin); !st.ok()) {
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
