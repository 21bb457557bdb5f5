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

namespace {

void PutU32(std::string* out, uint32_t v) {
  char b[4] = {static_cast<char>(v), static_cast<char>(v >> 8), static_cast<char>(v >> 16),
               static_cast<char>(v >> 24)};
  out->append(b, 4);
}

uint32_t GetU32(absl::string_view* in) {
  const auto* p = reinterpret_cast<const unsigned char*>(in->data());
  uint32_t v = p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
  in->remove_prefix(4);
  return v;
}

// A short text of the reply head, at most kMaxNoteBytes: kept as the plugin gave it, as an
// in-process registry keeps it (printing escapes it).
bool GetText(absl::string_view* in, std::string* out) {
  if (in->size() < 4) return false;
  uint32_t n = GetU32(in);
  if (n > kMaxNoteBytes || in->size() < n) return false;
  out->assign(in->data(), n);
  in->remove_prefix(n);
  return true;
}

}  // namespace

std::string EncodeReportReply(const ReportReply& reply) {
  std::string out = "R";
  PutU32(&out, static_cast<uint32_t>(reply.answer_id));
  PutU32(&out, static_cast<uint32_t>(reply.answer_id >> 32));
  out.push_back(reply.unchanged ? 1 : 0);
  for (const std::string* s : {&reply.discover_error, &reply.zero_devices_reason}) {
    absl::string_view text = absl::string_view(*s).substr(0, kMaxNoteBytes);
    PutU32(&out, static_cast<uint32_t>(text.size()));
    out.append(text.data(), text.size());
  }
  out.append(reply.report.data(), reply.report.size());
  return out;
}

absl::StatusOr<ReportReply> DecodeReportReply(absl::string_view frame) {
  auto malformed = [] { return absl::DataLossError("the plugin host sent a malformed reply"); };
  if (frame.size() < 1 + 8 + 1 || frame[0] != 'R') return malformed();
  frame.remove_prefix(1);
  ReportReply reply;
  reply.answer_id = GetU32(&frame);
  reply.answer_id |= static_cast<uint64_t>(GetU32(&frame)) << 32;
  reply.unchanged = frame[0] != 0;
  frame.remove_prefix(1);
  if (!GetText(&frame, &reply.discover_error) || !GetText(&frame, &reply.zero_devices_reason)) {
    return malformed();
  }
  if (reply.unchanged && !frame.empty()) return malformed();
  reply.report = frame;
  return reply;
}

}  // namespace rayaccel::isolation::wire
