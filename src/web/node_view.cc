#include "web/node_view.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "present/render.h"
#include "web/assets.h"
#include "web/conformance_reports.h"

namespace rayaccel::web {
namespace {

Response NotFound(const std::string& what) {
  return {"text/plain; charset=utf-8", what + "\n", 404};
}

Response AssetResponse(const std::string& name) {
  const Asset* asset = FindAsset(name);
  if (asset == nullptr) return NotFound(absl::StrCat("no asset ", name));
  return {std::string(asset->content_type), std::string(asset->body)};
}

// A route answering with one rendering of the node's current snapshot.
std::function<Response(const Request&)> Rendered(std::function<NodeFeed(const Request&)> feed,
                                                 std::string content_type,
                                                 std::string (*render)(const NodeSnapshot&)) {
  return [feed = std::move(feed), content_type = std::move(content_type),
          render](const Request& request) {
    std::shared_ptr<const NodeSnapshot> snapshot = feed(request).current();
    if (snapshot == nullptr) return NotFound("no such node has published");
    return Response{content_type, render(*snapshot)};
  };
}

}  // namespace

void AddNodeView(Routes* routes, const std::string& page, const std::string& api,
                 std::function<NodeFeed(const Request&)> feed) {
  routes->pages[page] = [feed](const Request& request) {
    if (feed(request).current() == nullptr) return NotFound("no such node has published");
    return AssetResponse("node.html");
  };
  routes->pages[api + "/snapshot"] = Rendered(feed, "application/json", present::DiscoverJson);
  routes->pages[api + "/topology"] = Rendered(feed, "application/json", present::TopoJson);
  routes->pages[api + "/topology.svg"] = Rendered(feed, "image/svg+xml", present::TopoSvg);
  // Each event is the generation now shown; the first comes at once, the next on a change.
  routes->events[api + "/events"] = [feed](const Request& request) -> std::optional<EventSource> {
    NodeFeed node = feed(request);
    if (node.current() == nullptr) return std::nullopt;  // no such node: 404
    auto shown = std::make_shared<std::shared_ptr<const NodeSnapshot>>();
    return EventSource([node, shown](std::chrono::milliseconds wait) -> std::optional<std::string> {
      std::shared_ptr<const NodeSnapshot> now =
          *shown == nullptr ? node.current() : node.wait(shown->get(), wait);
      if (now == nullptr) return std::nullopt;  // the node is gone
      if (now == *shown) return std::string();
      *shown = now;
      return absl::StrCat("{\"generation\":", now->generation, "}");
    });
  };
}

void AddAssets(Routes* routes) {
  routes->pages["/assets/([a-z]+\\.(?:js|css))"] = [](const Request& request) {
    return AssetResponse(request.captures.at(0));
  };
}

Routes AgentRoutes(Registry* registry, std::function<AgentCounts()> counts,
                   std::string conformance_reports, const TelemetryHistory* telemetry) {
  Routes routes;
  routes.pages["/api/conformance"] = [dir = std::move(conformance_reports)](const Request&) {
    return Response{"application/json", ConformanceReportsJson(dir)};
  };
  AddAssets(&routes);
  AddNodeView(&routes, "/", "/api", [registry](const Request&) {
    NodeFeed feed;
    feed.current = [registry] { return registry->snapshot(); };
    feed.wait = [registry](const NodeSnapshot* shown, std::chrono::milliseconds timeout) {
      return registry->WaitForNewer(shown == nullptr ? 0 : shown->generation, timeout);
    };
    return feed;
  });
  routes.pages["/api/ray"] = [counts](const Request&) {
    const AgentCounts now = counts();
    return Response{"application/json", now.device_loss ? DeviceLossJson(*now.device_loss)
                                                        : std::string("{\"off\": true}")};
  };
  routes.pages["/metrics"] = [registry, counts = std::move(counts), telemetry](const Request&) {
    std::shared_ptr<const NodeSnapshot> snap = registry->snapshot();
    std::string text = NodeMetrics(*snap, registry->stats(), counts());
    if (telemetry != nullptr) text += TelemetryMetrics(*snap, telemetry->view());
    return Response{"text/plain; version=0.0.4; charset=utf-8", std::move(text)};
  };
  routes.pages["/api/telemetry"] = [telemetry](const Request&) {
    return Response{"application/json", telemetry != nullptr ? TelemetryJson(telemetry->view())
                                                             : std::string("{\"off\": true}")};
  };
  return routes;
}

}  // namespace rayaccel::web
