// The agent's metrics in the Prometheus text exposition format (version 0.0.4): what the node
// has (devices by plugin and health, plugin states, the Ray resources), what the registry has
// done (scans, changes, health events, restarts), and what the agent serves and publishes.
#ifndef RAYACCEL_WEB_METRICS_H_
#define RAYACCEL_WEB_METRICS_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "rayaccel/registry.h"
#include "rpc/device_loss.h"
#include "rpc/raylet_sink.h"

namespace rayaccel::web {

// What the agent adds to the registry's own counts.
struct AgentCounts {
  uint64_t watchers = 0;  // WatchSnapshots streams open now
  bool publishing = false;
  uint64_t publish_acked_generation = 0;
  uint64_t publish_acks = 0;                        // snapshots the sink acknowledged
  uint64_t publish_connects = 0;                    // streams opened to the sink
  uint64_t publish_failures = 0;                    // streams that ended in an error
  std::optional<rpc::DeviceLossState> device_loss;  // devices lost since start, and the drain
};

// /api/ray: the policy, the devices lost since start and what was asked of Ray's GCS.
std::string DeviceLossJson(const rpc::DeviceLossState& state);

std::string NodeMetrics(const NodeSnapshot& snapshot, const RegistryStats& stats,
                        const AgentCounts& agent);

// The sink's: nodes and how long since each last published, devices across the cluster by
// resource and health, updates applied and stale, agents' streams and refusals.
std::string SinkMetrics(const rpc::RayletSink& sink, std::chrono::system_clock::time_point now);

}  // namespace rayaccel::web

#endif  // RAYACCEL_WEB_METRICS_H_
