#include "transport_peers.h"

#include <algorithm>

namespace rayaccel::plugin::peers {

rayaccel_status RefusalStatus(uint32_t reason) {
  return reason == kTooMany ? RAYACCEL_STATUS_RESOURCE_EXHAUSTED : RAYACCEL_STATUS_UNAUTHENTICATED;
}

std::string RefusalText(uint32_t reason) {
  return reason == kTooMany ? "the peer admits no more readers"
                            : "the peer refused our transport key (the two keys differ)";
}

bool MayAdmit(size_t peers, size_t handshakes, size_t max_peers) {
  return peers < max_peers && handshakes < kMaxHandshakes;
}

std::chrono::milliseconds HeartbeatInterval(std::chrono::milliseconds peer_timeout) {
  using std::chrono::milliseconds;
  return std::clamp(peer_timeout / 4, milliseconds(10), milliseconds(1000));
}

bool EventCount::Count() {
  ++count_;
  const Clock::time_point now = Clock::now();
  if (count_ > 1 && now - logged_ < std::chrono::minutes(1)) return false;
  logged_ = now;
  return true;
}

std::string RefusedLine(const std::string& why, uint64_t count) {
  return "refused a peer: " + why + " (" + std::to_string(count) + " refused so far)";
}

std::string MalformedLine(const std::string& what, uint64_t count) {
  return "dropped a malformed message: " + what + " (" + std::to_string(count) + " so far)";
}

bool RangeWithin(uint64_t offset, uint64_t length, uint64_t size) {
  return length != 0 && offset <= size && length <= size - offset;
}

bool NotificationQueue::Push(const void* bytes, size_t n, bool* first_drop) {
  *first_drop = false;
  if (queue_.size() >= kMax) {
    *first_drop = dropped_++ == 0;
    return false;
  }
  queue_.emplace_back(static_cast<const char*>(bytes), n);
  return true;
}

std::deque<std::string> NotificationQueue::TakeAll() {
  std::deque<std::string> all;
  all.swap(queue_);
  return all;
}

}  // namespace rayaccel::plugin::peers
