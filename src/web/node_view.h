// One node's page and its data: the agent serves its own node at "/", a sink serves each node
// that published at "/node/ID". The page (assets/node.html) reads the snapshot as discover's
// JSON, the matrix as topo's, the picture as topo's SVG, and follows an event stream that
// fires when the node's snapshot changes.
#ifndef RAYACCEL_WEB_NODE_VIEW_H_
#define RAYACCEL_WEB_NODE_VIEW_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "rayaccel/registry.h"
#include "web/http_server.h"
#include "web/metrics.h"
#include "web/telemetry_history.h"

namespace rayaccel::web {

// Where a node's page reads from.
struct NodeFeed {
  // The node's snapshot now; null when there is none (a sink that has not heard of the node).
  std::function<std::shared_ptr<const NodeSnapshot>()> current;
  // Waits until a snapshot other than `shown` is current, or `timeout`; returns the current one.
  std::function<std::shared_ptr<const NodeSnapshot>(const NodeSnapshot* shown,
                                                    std::chrono::milliseconds timeout)>
      wait;
};

// Adds the node page at `page` and its data at `api` + "/snapshot", "/topology",
// "/topology.svg" and "/events". Patterns may capture (a sink's node id): `feed` gets the
// request and says where that node's data comes from.
void AddNodeView(Routes* routes, const std::string& page, const std::string& api,
                 std::function<NodeFeed(const Request&)> feed);

// The pages' script and style, at /assets/NAME.
void AddAssets(Routes* routes);

// The agent's whole view: its node at "/", the assets, and /metrics (`counts`: what the agent
// adds to the registry's own numbers); /api/conformance, the newest conformance report of each
// plugin in `conformance_reports` (conformance_reports.h; "": none), read on each request.
// With `telemetry` (which must outlive the routes), /metrics carries each device's newest
// sample and /api/telemetry the history (telemetry_history.h); without, /api/telemetry says
// it is off.
Routes AgentRoutes(Registry* registry, std::function<AgentCounts()> counts,
                   std::string conformance_reports = "",
                   const TelemetryHistory* telemetry = nullptr);

}  // namespace rayaccel::web

#endif  // RAYACCEL_WEB_NODE_VIEW_H_
