// The plugin host protocol: frames over a socketpair (sockets only: frames are sent with
// MSG_NOSIGNAL) between the registry and rayaccel-plugin-host, each a 4-byte little-endian
// length and a payload.
//
// Requests are JSON: {"op": "open"|"initialize"|"properties"|"query"|"validate_quantity"|
//                            "prepare_allocation"|"wait_health_events"|"shutdown", ...}
// Replies are JSON ({"ok": true, ...} or {"ok": false, "code": N, "error": "..."}), at most
// kMaxJsonReplyBytes, except the answers that carry a plugin's report ("query" and
// "prepare_allocation"): a ReportReply (report_codec.h).
#ifndef RAYACCEL_ISOLATION_WIRE_H_
#define RAYACCEL_ISOLATION_WIRE_H_

#include <chrono>
#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "isolation/report_codec.h"

namespace rayaccel::isolation::wire {

// A JSON reply is small (names, a status); bounding it bounds what parsing it may allocate.
inline constexpr size_t kMaxJsonReplyBytes = 64 << 10;
// A report reply: the largest report the limits allow, and its header.
inline constexpr size_t kMaxFrameBytes = kMaxEncodedReportBytes + 4096;

// ResourceExhausted (with the sizes) when `payload` is over kMaxFrameBytes.
absl::Status WriteFrame(int fd, absl::string_view payload);
// Waits until `deadline`; DeadlineExceeded on timeout, Unavailable when the peer is gone,
// DataLoss for a frame over `max_bytes`. Memory grows with the bytes received, not with
// what the length claims. For the first `spin` it looks for the frame without sleeping
// (yielding between looks): for an answer that usually comes within that time.
absl::StatusOr<std::string> ReadFrame(
    int fd, std::chrono::steady_clock::time_point deadline, size_t max_bytes,
    std::chrono::microseconds spin = std::chrono::microseconds(0));

}  // namespace rayaccel::isolation::wire

#endif  // RAYACCEL_ISOLATION_WIRE_H_
