// What the host's transport (rayaccel/transport.h) shares between its files: the plugin's
// statuses as absl::Status, the counters behind Stats(), and Transport::Impl.
#ifndef RAYACCEL_TRANSPORT_TRANSPORT_INTERNAL_H_
#define RAYACCEL_TRANSPORT_TRANSPORT_INTERNAL_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "loader/plugin_loader.h"
#include "rayaccel/plugin.h"
#include "rayaccel/transport.h"

namespace rayaccel {
namespace transport {

// Request latency buckets, in seconds: from a small transfer on one host to a large one over
// a slow network.
constexpr double kLatencyBounds[] = {10e-6, 50e-6, 100e-6, 500e-6, 1e-3, 5e-3,
                                     10e-3, 50e-3, 100e-3, 500e-3, 1,    5};

struct Counters {
  Counters() {
    for (TransportStats::Latency& l : latency) {
      l.bounds.assign(std::begin(kLatencyBounds), std::end(kLatencyBounds));
      l.counts.assign(l.bounds.size() + 1, 0);
    }
  }
  void Transfer(int op, TransferPath path, uint64_t bytes, const absl::Status& s,
                uint64_t connection) {
    std::lock_guard<std::mutex> lock(mu);
    TransferLocked(op, path, bytes, s, connection);
  }
  // A batch's entries, under one lock.
  void Transfers(int op, const std::vector<TransferPath>& paths, const std::vector<uint64_t>& bytes,
                 const std::vector<absl::Status>& s, uint64_t connection) {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = 0; i < s.size(); ++i) TransferLocked(op, paths[i], bytes[i], s[i], connection);
  }
  void Latency(int op, absl::Duration d) {
    const double seconds = absl::ToDoubleSeconds(d);
    std::lock_guard<std::mutex> lock(mu);
    TransportStats::Latency& l = latency[op];
    const size_t bucket =
        std::lower_bound(l.bounds.begin(), l.bounds.end(), seconds) - l.bounds.begin();
    l.counts[bucket]++;
    l.sum_seconds += seconds;
    l.count++;
  }
  void TransferLocked(int op, TransferPath path, uint64_t bytes, const absl::Status& s,
                      uint64_t connection) {
    TransportStats::Transfers& t = transfers[op][static_cast<int>(path)];
    if (s.ok()) {
      t.completed++;
      t.bytes += bytes;
    } else {
      t.failed++;
      if (IsPeerLost(s)) lost.insert(connection);
    }
  }
  std::mutex mu;
  TransportStats::Transfers transfers[2][kTransferPaths];
  TransportStats::Latency latency[2];
  uint64_t connections_opened = 0;
  std::set<uint64_t> lost;  // connections
  uint64_t notifications_sent = 0, notifications_received = 0;
};

// A transport hook's status, classified by cause (see transport.h).
absl::Status StatusFor(rayaccel_status code, const std::string& text);

absl::Status ToStatus(rayaccel_status code, const ErrorBuffer& err, absl::string_view what);

// A value outside the enumerators (a broken plugin's) reads as unreported.
TransferPath PathOf(rayaccel_transfer_path path);

// What a batch entry's status says, where the plugin gives only the code.
std::string EntryText(rayaccel_status code);

// Written into a part's statuses before the plugin sees them: a value no plugin returns, so an
// entry the plugin forgot to report is caught.
constexpr auto kUnreported = static_cast<rayaccel_status>(0xffffffffu);

// A duration as a hook's milliseconds: rounded up, at least 1.
uint32_t Millis(absl::Duration d);

// A blob sink that appends each blob to a vector of strings.
struct Collect {
  std::vector<std::string> blobs;
  rayaccel_blob_sink sink{sizeof(rayaccel_blob_sink), this, &Put};
  static rayaccel_status Put(void* self, rayaccel_blob b) {
    if (b.size > 0 && b.data == nullptr) return RAYACCEL_STATUS_INVALID_ARGUMENT;
    static_cast<Collect*>(self)->blobs.emplace_back(reinterpret_cast<const char*>(b.data), b.size);
    return RAYACCEL_STATUS_OK;
  }
};

}  // namespace transport

struct Transport::Impl {
  // Set as the transport closes: its endpoint's requests are gone, whoever holds one.
  std::shared_ptr<bool> closed = std::make_shared<bool>(false);
  // Shared with the requests, which count themselves as they end (also after a close).
  std::shared_ptr<transport::Counters> counters = std::make_shared<transport::Counters>();
  std::unique_ptr<LoadedPlugin> plugin;
  rayaccel_transport_api api{};
  rayaccel_transport_endpoint* endpoint = nullptr;
  uint64_t endpoint_id = 0;

  struct Region {
    rayaccel_memory_region* handle;
    uint64_t length;
    MemoryKind kind;
    uint32_t device;
    std::string descriptor;
  };
  // Guards the maps. Hooks on a handle run under the shared lock; removing a handle takes the
  // exclusive lock, so no hook still uses it when it is closed.
  mutable std::shared_mutex mu;
  std::map<RegionId, Region> regions;
  RegionId next_region = 1;
  std::map<ConnectionId, rayaccel_connection*> connections;
  ConnectionId next_connection = 1;

  // What a call naming a connection that is not open gets: ids are never reused, so one this
  // transport gave out was closed (UNAVAILABLE, as its transfers in flight failed), any other
  // was never a connection (INVALID_ARGUMENT).
  absl::Status NoConnection(ConnectionId connection) const {
    if (connection > 0 && connection < next_connection) {
      return absl::UnavailableError(absl::StrCat("connection ", connection, " was closed"));
    }
    return absl::InvalidArgumentError(absl::StrCat("no connection ", connection));
  }

  template <typename Hook>
  absl::Status Call(absl::string_view what, Hook&& hook) const {
    ErrorBuffer err;
    rayaccel_status s = CallPlugin(&err, hook);
    return transport::ToStatus(s, err, what);
  }
};

}  // namespace rayaccel

#endif  // RAYACCEL_TRANSPORT_TRANSPORT_INTERNAL_H_
