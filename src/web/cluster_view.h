// The sink's view of the cluster: every node that published, one summary row each, filtered
// and paged on the server so that a page of a thousand-node cluster costs the browser one
// page of rows; each node's own page; and the sink's metrics.
#ifndef RAYACCEL_WEB_CLUSTER_VIEW_H_
#define RAYACCEL_WEB_CLUSTER_VIEW_H_

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "rpc/raylet_sink.h"
#include "web/http_server.h"

namespace rayaccel::web {

// What /api/nodes is asked for: a page of the nodes that match every filter given.
struct ClusterQuery {
  size_t offset = 0;
  size_t limit = 50;   // at most kMaxClusterPage
  std::string family;  // a device resource the node has ("GPU")
  std::string type;    // an accelerator type it has ("H100")
  std::string health;  // "unhealthy": some device is; "healthy": every device is
  std::string node;    // a prefix of the node id
};
inline constexpr size_t kMaxClusterPage = 500;

// The query from a request's parameters, or why it is malformed.
absl::StatusOr<ClusterQuery> ParseClusterQuery(const Request& request);

// {version, total, matched, offset, devices, unhealthy_devices, facets{families, types},
//  nodes[{node_id, generation, age_ms, families{resource: n}, types[], health{healthy,
//  unhealthy, unknown}, domains[{kind, id, devices}], plugins_not_active}]}, sorted by node id.
//  nodes[... load[{t, utilization?, memory_used?, memory_total?, power_mw?}]]: each row's
//  telemetry summed over its devices (load_of; an agent that publishes none has none).
std::string ClusterJson(
    const std::vector<rpc::SinkState::NodeEntry>& nodes, uint64_t version,
    const ClusterQuery& query, std::chrono::system_clock::time_point now,
    const std::function<std::vector<rpc::SinkState::Load>(const std::string&)>& load_of = {});

// The sink's whole view: the cluster at "/", each node at "/node/ID", the assets, /metrics.
// `sink` must outlive the server that serves these.
Routes SinkRoutes(const rpc::RayletSink* sink);

}  // namespace rayaccel::web

#endif  // RAYACCEL_WEB_CLUSTER_VIEW_H_
