// The plugin host protocol: frames over a socketpair (sockets only: frames are sent with
// MSG_NOSIGNAL) between the registry and rayaccel-plugin-host, each a 4-byte little-endian
// length and a payload.
//
// Requests are JSON: {"op": "open"|"initialize"|"properties"|"query"|"validate_quantity"|
//                            "prepare_allocation"|"wait_health_events"|"shutdown", ...}
// Replies are JSON ({"ok": true, ...} or {"ok": false, "code": N, "error": "..."}), at most
// kMaxJsonReplyBytes, except the answers that carry a plugin's report ("query" and
// "prepare_allocation"), which start with 'R' (report_codec.h):
//   'R' u64 answer id, u8 unchanged, str discover error, str zero-devices reason, [report]
// A query names the answer the registry holds ("have"); when the plugin's new answer encodes
// to the same bytes, the host says "unchanged" and sends no report: a steady rescan costs
// one small round trip.
#ifndef RAYACCEL_ISOLATION_WIRE_H_
#define RAYACCEL_ISOLATION_WIRE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
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
// what the length claims.
absl::StatusOr<std::string> ReadFrame(int fd, std::chrono::steady_clock::time_point deadline,
                                      size_t max_bytes);

// The head of a report reply; `report` is the encoded report (empty when unchanged).
struct ReportReply {
  uint64_t answer_id = 0;
  bool unchanged = false;
  std::string discover_error;  // empty when discover succeeded
  std::string zero_devices_reason;
  absl::string_view report;
};
std::string EncodeReportReply(const ReportReply& reply);
// Texts are bounded (kMaxNoteBytes); `report` points into `frame`.
absl::StatusOr<ReportReply> DecodeReportReply(absl::string_view frame);

}  // namespace rayaccel::isolation::wire

#endif  // RAYACCEL_ISOLATION_WIRE_H_
