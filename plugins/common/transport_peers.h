// What the UCX and libfabric helpers do alike with an endpoint's peers, written once: the
// handshake's states and refusals, how many readers an owner takes, the clock that finds a
// silent peer, the owner's table of live regions and its bounds check, the queue of received
// notifications, and logging of what a peer can provoke at will. Each helper keeps only what its
// fabric does differently (docs/architecture.md, "The transport's rooms").
//
// Not thread-safe: each is guarded by its endpoint's lock.
#ifndef RAYACCEL_PLUGINS_COMMON_TRANSPORT_PEERS_H_
#define RAYACCEL_PLUGINS_COMMON_TRANSPORT_PEERS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>

#include "rayaccel/plugin.h"

namespace rayaccel::plugin::peers {

using Clock = std::chrono::steady_clock;

// A reader's connection, from its hello to its owner's welcome (docs/transport.md, "The
// handshake"): hello sent, owner's proof checked and ours sent, admitted.
enum class HandshakeState { kHello, kProven, kWelcomed };

// Why an owner refused a reader, as both wires say it (a U32).
enum RefusedReason : uint32_t {
  kWrongKey = 1,  // it could not prove the shared key
  kTooMany = 2,   // the owner holds as many readers, or handshakes, as it takes
};

// What a reader's connection fails with when its owner refused it for `reason`, and why in
// words. An unknown reason is taken as a refused key.
rayaccel_status RefusalStatus(uint32_t reason);
std::string RefusalText(uint32_t reason);

// Readers between hello and proof an owner keeps at most: a flood of hellos from peers that
// never prove the key costs a bounded handshake table.
constexpr size_t kMaxHandshakes = 64;

// Whether an owner holding `peers` readers' records, `handshakes` of them not yet proven, takes
// another hello, where it admits `max_peers` at most.
bool MayAdmit(size_t peers, size_t handshakes, size_t max_peers);

// How often a side tells the other it is alive: four times per peer timeout, at most every
// second and at least every 10 ms, so that a peer silent for the timeout missed four.
std::chrono::milliseconds HeartbeatInterval(std::chrono::milliseconds peer_timeout);

// An event a peer can provoke at will (a refused hello, a malformed message): counted, and
// logged the first time, then at most once a minute, so that a peer cannot flood the log.
class EventCount {
 public:
  // Counts one; whether to log it.
  bool Count();
  uint64_t count() const { return count_; }

 private:
  uint64_t count_ = 0;
  Clock::time_point logged_;
};

// The log lines of what a peer provoked, with the count so far: a refused peer, a dropped
// malformed message (`what` it was), the first notification dropped because the queue was full.
std::string RefusedLine(const std::string& why, uint64_t count);
std::string MalformedLine(const std::string& what, uint64_t count);
constexpr char kNotificationsDropped[] = "notification queue full: dropping new notifications";

// Whether [offset, offset + length) is a non-empty range within `size` bytes, without overflow.
bool RangeWithin(uint64_t offset, uint64_t length, uint64_t size);

// An owner's live regions by id: what every range a reader names is checked against. Ids count
// up from 1 and are never reused, so an id below the next one names a region deregistered
// since: STALE, where an id never given out is INVALID_ARGUMENT. `R` has a `length`. Owns
// nothing: the helper frees what it takes out.
template <typename R>
class RegionTable {
 public:
  // Puts `r` among the live regions under a new id, which it returns.
  uint64_t Add(R* r) {
    const uint64_t id = next_id_++;
    live_[id] = r;
    return id;
  }
  // Takes region `id` out: from now on a range in it is STALE. Null when it was not live.
  R* Remove(uint64_t id) {
    auto it = live_.find(id);
    if (it == live_.end()) return nullptr;
    R* r = it->second;
    live_.erase(it);
    return r;
  }
  // OK with the live region `id` in *out, or STALE or INVALID_ARGUMENT.
  rayaccel_status Find(uint64_t id, R** out) const {
    auto it = live_.find(id);
    if (it == live_.end()) {
      return id != 0 && id < next_id_ ? RAYACCEL_STATUS_STALE : RAYACCEL_STATUS_INVALID_ARGUMENT;
    }
    *out = it->second;
    return RAYACCEL_STATUS_OK;
  }
  // The owner's bounds check: OK with the region in *out when [offset, offset + length) lies in
  // live region `id`; else STALE or INVALID_ARGUMENT, and nothing of the region is touched.
  rayaccel_status Check(uint64_t id, uint64_t offset, uint64_t length, R** out) const {
    R* r = nullptr;
    const rayaccel_status s = Find(id, &r);
    if (s != RAYACCEL_STATUS_OK) return s;
    if (!RangeWithin(offset, length, r->length)) return RAYACCEL_STATUS_INVALID_ARGUMENT;
    *out = r;
    return RAYACCEL_STATUS_OK;
  }
  // Every live region (the endpoint's teardown), emptied.
  std::map<uint64_t, R*> TakeAll() {
    std::map<uint64_t, R*> all;
    all.swap(live_);
    return all;
  }

 private:
  std::map<uint64_t, R*> live_;
  uint64_t next_id_ = 1;
};

// Notifications received and not yet taken by get_notifications: at most kMax; while full,
// new ones are dropped (a reader that floods them loses its own, not the owner's memory).
class NotificationQueue {
 public:
  static constexpr size_t kMax = 65536;
  // Queues a copy of `bytes`; false when the queue is full and it was dropped. `*first_drop`
  // says this is the endpoint's first drop (to log).
  bool Push(const void* bytes, size_t n, bool* first_drop);
  std::deque<std::string> TakeAll();
  uint64_t dropped() const { return dropped_; }

 private:
  std::deque<std::string> queue_;
  uint64_t dropped_ = 0;
};

}  // namespace rayaccel::plugin::peers

#endif  // RAYACCEL_PLUGINS_COMMON_TRANSPORT_PEERS_H_
