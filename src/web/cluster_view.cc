#include "web/cluster_view.h"

#include <algorithm>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "util/json.h"
#include "web/assets.h"
#include "web/metrics.h"
#include "web/node_view.h"
#include "web/telemetry_history.h"

namespace rayaccel::web {
namespace {

// A node's row, from its snapshot.
struct Summary {
  std::map<std::string, size_t> families;
  std::set<std::string> types;
  size_t healthy = 0, unhealthy = 0, unknown = 0;
  size_t plugins_not_active = 0;  // degraded or failed
};

Summary Summarize(const NodeSnapshot& s) {
  Summary out;
  for (const Device& d : s.devices) {
    ++out.families[d.resource];
    if (!d.accelerator_type.empty()) out.types.insert(d.accelerator_type);
    switch (d.health) {
      case Health::kHealthy:
        ++out.healthy;
        break;
      case Health::kUnhealthy:
        ++out.unhealthy;
        break;
      default:
        ++out.unknown;
    }
  }
  for (const PluginStatus& p : s.plugins) {
    if (p.state == PluginStatus::State::kDegraded || p.state == PluginStatus::State::kFailed) {
      ++out.plugins_not_active;
    }
  }
  return out;
}

bool Matches(const rpc::SinkState::NodeEntry& node, const Summary& s, const ClusterQuery& q) {
  if (!q.node.empty() && !absl::StartsWith(node.node_id, q.node)) return false;
  if (!q.family.empty() && s.families.count(q.family) == 0) return false;
  if (!q.type.empty() && s.types.count(q.type) == 0) return false;
  if (q.health == "unhealthy" && s.unhealthy == 0) return false;
  if (q.health == "healthy" && (s.unhealthy != 0 || s.unknown != 0)) return false;
  return true;
}

// At most this often per stream: a busy cluster's page redraws a few times a second, not once
// per update. And a change is announced this long after it arrives, so that one event covers
// a burst (many agents publishing at once).
constexpr auto kClusterEventInterval = std::chrono::milliseconds(100);
constexpr auto kClusterEventSettle = std::chrono::milliseconds(10);

}  // namespace

absl::StatusOr<ClusterQuery> ParseClusterQuery(const Request& request) {
  ClusterQuery q;
  for (const auto& [name, value] : request.query) {
    if (name == "offset" || name == "limit") {
      size_t n = 0;
      if (!absl::SimpleAtoi(value, &n)) {
        return absl::InvalidArgumentError(absl::StrCat(name, " must be a whole number"));
      }
      (name == "offset" ? q.offset : q.limit) = n;
    } else if (name == "family") {
      q.family = value;
    } else if (name == "type") {
      q.type = value;
    } else if (name == "health") {
      if (value != "healthy" && value != "unhealthy" && !value.empty()) {
        return absl::InvalidArgumentError("health is \"healthy\" or \"unhealthy\"");
      }
      q.health = value;
    } else if (name == "q") {
      q.node = value;
    } else if (name != "token") {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown parameter ", name, " (offset, limit, family, type, health, q)"));
    }
  }
  q.limit = std::min(q.limit, kMaxClusterPage);
  return q;
}

std::string ClusterJson(
    const std::vector<rpc::SinkState::NodeEntry>& nodes, uint64_t version,
    const ClusterQuery& query, std::chrono::system_clock::time_point now,
    const std::function<std::vector<rpc::SinkState::Load>(const std::string&)>& load_of) {
  std::set<std::string> families, types;
  size_t devices = 0, unhealthy = 0, matched = 0;
  json::Writer rows;
  rows.BeginArray();
  for (const rpc::SinkState::NodeEntry& node : nodes) {
    const NodeSnapshot& snap = *node.snapshot;
    const Summary s = Summarize(snap);
    for (const auto& [family, n] : s.families) families.insert(family);
    types.insert(s.types.begin(), s.types.end());
    devices += snap.devices.size();
    unhealthy += s.unhealthy;
    if (!Matches(node, s, query)) continue;
    const size_t index = matched++;
    if (index < query.offset || index >= query.offset + query.limit) continue;
    rows.BeginObject();
    rows.Key("node_id").String(node.node_id);
    rows.Key("generation").Uint(snap.generation);
    rows.Key("age_ms").Int(
        std::chrono::duration_cast<std::chrono::milliseconds>(now - node.updated).count());
    rows.Key("families").BeginObject();
    for (const auto& [family, n] : s.families) rows.Key(family).Uint(n);
    rows.EndObject();
    rows.Key("types").BeginArray();
    for (const std::string& t : s.types) rows.String(t);
    rows.EndArray();
    rows.Key("health").BeginObject();
    rows.Key("healthy").Uint(s.healthy).Key("unhealthy").Uint(s.unhealthy);
    rows.Key("unknown").Uint(s.unknown).EndObject();
    rows.Key("domains").BeginArray();
    for (const Domain& d : snap.domains) {
      rows.BeginObject().Key("kind").String(d.kind).Key("id").String(d.id);
      rows.Key("devices").Uint(d.devices.size()).EndObject();
    }
    rows.EndArray();
    rows.Key("plugins_not_active").Uint(s.plugins_not_active);
    rows.Key("load").BeginArray();
    for (const rpc::SinkState::Load& l :
         load_of ? load_of(node.node_id) : std::vector<rpc::SinkState::Load>()) {
      rows.BeginObject().Key("t").Int(l.unix_ms);
      if (l.utilization_percent >= 0) rows.Key("utilization").Int(l.utilization_percent);
      if (l.memory_known) {
        rows.Key("memory_used").Uint(l.memory_used_bytes);
        rows.Key("memory_total").Uint(l.memory_total_bytes);
      }
      if (l.power_known) rows.Key("power_mw").Uint(l.power_mw);
      rows.EndObject();
    }
    rows.EndArray();
    rows.EndObject();
  }
  rows.EndArray();

  json::Writer w;
  w.BeginObject();
  w.Key("version").Uint(version);
  w.Key("total").Uint(nodes.size());
  w.Key("matched").Uint(matched);
  w.Key("offset").Uint(query.offset);
  w.Key("devices").Uint(devices);
  w.Key("unhealthy_devices").Uint(unhealthy);
  w.Key("facets").BeginObject();
  w.Key("families").BeginArray();
  for (const std::string& f : families) w.String(f);
  w.EndArray();
  w.Key("types").BeginArray();
  for (const std::string& t : types) w.String(t);
  w.EndArray();
  w.EndObject();
  w.Key("nodes").Raw(rows.Finish());
  w.EndObject();
  return w.Finish();
}

Routes SinkRoutes(const rpc::RayletSink* sink) {
  const rpc::SinkState* state = &sink->state();
  Routes routes;
  AddAssets(&routes);
  routes.pages["/"] = [](const Request&) {
    const Asset* page = FindAsset("cluster.html");
    return Response{std::string(page->content_type), std::string(page->body)};
  };
  routes.pages["/api/nodes"] = [state](const Request& request) {
    absl::StatusOr<ClusterQuery> query = ParseClusterQuery(request);
    if (!query.ok()) {
      return Response{"text/plain; charset=utf-8", absl::StrCat(query.status().message(), "\n"),
                      400};
    }
    const uint64_t version = state->version();  // before the read: never newer than the rows
    return Response{"application/json",
                    ClusterJson(state->Nodes(), version, *query, std::chrono::system_clock::now(),
                                [state](const std::string& id) { return state->LoadOf(id); })};
  };
  // A node's telemetry as its agent published it, in the agent's /api/telemetry form.
  routes.pages["/api/node/([0-9a-f]{56})/telemetry"] = [state](const Request& request) {
    std::vector<Telemetry> samples = state->TelemetryOf(request.captures.at(0));
    if (samples.empty()) return Response{"application/json", "{\"off\": true}"};
    TelemetryHistory history(rpc::SinkState::kTelemetryKept);
    for (Telemetry& t : samples) history.Add(std::move(t));
    return Response{"application/json", TelemetryJson(history.view())};
  };
  // An event whenever any node changed (the version), at most every kClusterEventInterval.
  routes.events["/api/events"] = [state](const Request&) -> std::optional<EventSource> {
    auto seen = std::make_shared<std::optional<uint64_t>>();
    auto last = std::make_shared<std::chrono::steady_clock::time_point>();
    return EventSource(
        [state, seen, last](std::chrono::milliseconds wait) -> std::optional<std::string> {
          if (seen->has_value()) {
            std::this_thread::sleep_until(*last + kClusterEventInterval);
            const uint64_t now = state->WaitForChange(**seen, wait);
            if (now == **seen) return std::string();
            std::this_thread::sleep_for(kClusterEventSettle);
          }
          *seen = state->version();
          *last = std::chrono::steady_clock::now();
          return absl::StrCat("{\"version\":", **seen, "}");
        });
  };
  AddNodeView(
      &routes, "/node/([0-9a-f]{56})", "/api/node/([0-9a-f]{56})", [state](const Request& request) {
        const std::string id = request.captures.at(0);
        NodeFeed feed;
        feed.current = [state, id]() -> std::shared_ptr<const NodeSnapshot> {
          std::optional<rpc::SinkState::NodeEntry> node = state->Find(id);
          return node.has_value() ? node->snapshot : nullptr;
        };
        feed.wait = [state, id](
                        const NodeSnapshot* shown,
                        std::chrono::milliseconds timeout) -> std::shared_ptr<const NodeSnapshot> {
          const auto deadline = std::chrono::steady_clock::now() + timeout;
          uint64_t version = state->version();
          while (true) {
            std::optional<rpc::SinkState::NodeEntry> node = state->Find(id);
            if (!node.has_value()) return nullptr;
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now());
            if (node->snapshot.get() != shown || left.count() <= 0) return node->snapshot;
            version = state->WaitForChange(version, left);
          }
        };
        return feed;
      });
  routes.pages["/metrics"] = [sink](const Request&) {
    return Response{"text/plain; version=0.0.4; charset=utf-8",
                    SinkMetrics(*sink, std::chrono::system_clock::now())};
  };
  return routes;
}

}  // namespace rayaccel::web
