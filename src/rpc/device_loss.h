// What the agent does when a device the node gave Ray is lost after start (`serve
// --on-device-loss`): report it (the health watch, the page, the log: what it always does), or
// also ask Ray's GCS to drain the node, so that no new task lands there while running ones
// finish (docs/operations.md).
#ifndef RAYACCEL_RPC_DEVICE_LOSS_H_
#define RAYACCEL_RPC_DEVICE_LOSS_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "rayaccel/registry.h"
#include "rpc/ray_gcs.h"

namespace rayaccel::rpc {

enum class OnDeviceLoss { kReport, kDrain };
absl::StatusOr<OnDeviceLoss> ParseOnDeviceLoss(const std::string& text);  // "report", "drain"
const char* OnDeviceLossName(OnDeviceLoss policy);

struct DeviceLossOptions {
  OnDeviceLoss policy = OnDeviceLoss::kReport;
  GcsOptions gcs;  // with kDrain: where to ask
  // Ray's NodeID of this node, asked at each drain attempt until one is given (--node-id, the
  // one a sink named, or FindNodeOnThisHost); an error says why it is not known yet, and the
  // attempt is retried.
  std::function<absl::StatusOr<std::string>()> node_id;
  std::chrono::milliseconds min_retry{1000};  // between refused or failed attempts, doubling
  std::chrono::milliseconds max_retry{60000};
};

// A device of the first snapshot that has been lost since: unhealthy, or gone while its plugin
// still answers.
struct LostDevice {
  std::string id;
  std::string resource;
  std::string name;
  std::string reason;  // the plugin's health reason, or "no longer discovered"
  std::chrono::system_clock::time_point at;
};

struct DeviceLossState {
  OnDeviceLoss policy = OnDeviceLoss::kReport;
  std::vector<LostDevice> lost;  // in the order they were lost
  // kDrain only:
  bool drain_requested = false;  // an attempt was made
  bool drained = false;          // Ray's GCS accepted: the node is draining
  uint64_t drain_attempts = 0;
  std::string node_id;        // the node drained (or asked for)
  std::string drain_message;  // the reason given to Ray
  std::string drain_error;    // the last attempt's failure; empty once accepted
  std::chrono::system_clock::time_point drained_at;
};

// Watches `registry` (which must outlive it). The devices of its snapshot when this starts are
// what the node gave Ray (the agent starts before `ray start` reads it); one of them lost later
// is logged once, and with kDrain the node is drained once (retried until Ray's GCS accepts).
// A device that comes back does not undo it: Ray has no call that ends a drain.
class DeviceLossWatch {
 public:
  DeviceLossWatch(Registry* registry, DeviceLossOptions options);
  ~DeviceLossWatch();
  DeviceLossWatch(const DeviceLossWatch&) = delete;
  DeviceLossWatch& operator=(const DeviceLossWatch&) = delete;

  DeviceLossState state() const;

 private:
  void Observe(const NodeSnapshot& snap);
  void DrainLoop();

  const DeviceLossOptions options_;
  std::vector<Device> given_;  // the first snapshot's devices that were not unhealthy
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::set<std::string> lost_ids_;
  DeviceLossState state_;
  std::thread drainer_;  // kDrain only
  std::unique_ptr<Registry::Subscription> subscription_;
};

}  // namespace rayaccel::rpc

#endif  // RAYACCEL_RPC_DEVICE_LOSS_H_
