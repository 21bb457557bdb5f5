// The plugin's statuses as absl::Status, and small helpers of the host's transport.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "transport/transport_internal.h"

namespace rayaccel::transport {

absl::Status StatusFor(rayaccel_status code, const std::string& text) {
  switch (code) {
    case RAYACCEL_STATUS_OK:
      return absl::OkStatus();
    case RAYACCEL_STATUS_PEER_LOST:
      return absl::UnavailableError(absl::StrCat("peer lost: ", text));
    case RAYACCEL_STATUS_STALE:
      return absl::FailedPreconditionError(absl::StrCat("stale descriptor: ", text));
    case RAYACCEL_STATUS_UNAUTHENTICATED:
      return absl::UnauthenticatedError(absl::StrCat("peer refused: ", text));
    case RAYACCEL_STATUS_INVALID_ARGUMENT:
    case RAYACCEL_STATUS_NOT_FOUND:
      return absl::InvalidArgumentError(text);
    case RAYACCEL_STATUS_UNSUPPORTED:
    case RAYACCEL_STATUS_UNAVAILABLE:
      return absl::UnimplementedError(text);
    case RAYACCEL_STATUS_RESOURCE_EXHAUSTED:
      return absl::ResourceExhaustedError(text);
    case RAYACCEL_STATUS_TIMEOUT:
      return absl::DeadlineExceededError(text);
    default:
      return absl::InternalError(text);
  }
}

absl::Status ToStatus(rayaccel_status code, const ErrorBuffer& err, absl::string_view what) {
  return StatusFor(code, absl::StrCat(what, ": ", err.text[0] != '\0' ? err.text : "(no message)"));
}

TransferPath PathOf(rayaccel_transfer_path path) {
  const auto p = static_cast<uint32_t>(path);
  return p <= RAYACCEL_PATH_SAME_HOST ? static_cast<TransferPath>(p) : TransferPath::kUnreported;
}

std::string EntryText(rayaccel_status code) {
  switch (code) {
    case RAYACCEL_STATUS_STALE:
      return "the peer has deregistered the region";
    case RAYACCEL_STATUS_INVALID_ARGUMENT:
      return "the peer refused the range (not inside a region it holds)";
    case RAYACCEL_STATUS_PEER_LOST:
      return "the peer was lost";
    default:
      return absl::StrCat("failed (status ", static_cast<int>(code), ")");
  }
}

uint32_t Millis(absl::Duration d) {
  int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(d, absl::Milliseconds(1)));
  return static_cast<uint32_t>(std::clamp<int64_t>(ms, 1, UINT32_MAX));
}

}  // namespace rayaccel::transport
