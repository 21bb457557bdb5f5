// The plugin host protocol: frames over a socketpair (sockets only: frames are sent with
// MSG_NOSIGNAL) between the registry and
// rayaccel-plugin-host, each a 4-byte little-endian length and a JSON document.
//
// Requests  {"op": "open"|"initialize"|"properties"|"query"|"validate_quantity"|
//                  "prepare_allocation"|"shutdown", ...}
// Responses {"ok": true, ...} or {"ok": false, "error": "..."}
//
// A query's answer carries the plugin's sink calls verbatim ("calls"), recorded before any
// check; the registry replays them into its own Collector, so everything the child says is
// checked again on this side.
#ifndef RAYACCEL_REGISTRY_WIRE_H_
#define RAYACCEL_REGISTRY_WIRE_H_

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rayaccel/plugin.h"
#include "registry/plugin_loader.h"
#include "util/json.h"

namespace rayaccel::wire {

// Bounds what a (possibly corrupted) plugin host can make the registry parse.
inline constexpr size_t kMaxFrameBytes = 16 << 20;

absl::Status WriteFrame(int fd, const std::string& payload);
// Waits until `deadline`; DeadlineExceeded on timeout, Unavailable when the peer is gone.
absl::StatusOr<std::string> ReadFrame(int fd, std::chrono::steady_clock::time_point deadline);

// A SinkTap that records every sink call as a JSON value before forwarding it.
class Recorder : public SinkTap {
 public:
  const rayaccel_sink* Wrap(const rayaccel_sink* inner) override;
  // The recorded calls as a JSON array.
  void Write(json::Writer* w) const;

 private:
  static rayaccel_status AddDevice(void* ctx, const rayaccel_device_info* d);
  static rayaccel_status AddAttribute(void* ctx, const rayaccel_attribute* a);
  static rayaccel_status AddLabel(void* ctx, rayaccel_string k, rayaccel_string v);
  static rayaccel_status AddLink(void* ctx, const rayaccel_link* l);
  static rayaccel_status AddDomain(void* ctx, const rayaccel_domain* d);
  static rayaccel_status SetHealth(void* ctx, uint32_t i, rayaccel_health h, rayaccel_string r);
  static rayaccel_status SetEnv(void* ctx, rayaccel_string n, rayaccel_string v);

  rayaccel_sink inner_{};
  rayaccel_sink sink_{};
  std::vector<std::string> calls_;  // each a JSON object, already serialised
};

// Replays recorded calls into `sink` (a Collector's): devices, links and the rest are rebuilt
// as ABI structs with the struct_size the plugin used, capped at this host's size.
absl::Status Replay(const json::Value& calls, const rayaccel_sink* sink);

}  // namespace rayaccel::wire

#endif  // RAYACCEL_REGISTRY_WIRE_H_
