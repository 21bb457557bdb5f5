#include "web/metrics.h"

#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/json.h"
#include "util/prometheus.h"

namespace rayaccel::web {

std::string NodeMetrics(const NodeSnapshot& s, const RegistryStats& stats,
                        const AgentCounts& agent) {
  PrometheusWriter w;
  w.Family("rayaccel_snapshot_generation", "gauge",
           "Generation of the current snapshot; a new one means the node changed.");
  w.Sample("rayaccel_snapshot_generation", {}, static_cast<double>(s.generation));

  w.Family("rayaccel_devices", "gauge", "Devices in the snapshot, by plugin, resource and health.");
  std::map<std::tuple<std::string, std::string, std::string>, size_t> devices;
  for (const PluginStatus& p : s.plugins) {
    // Every plugin with a resource appears, at 0 when it has no device (a broken driver).
    if (!p.resource_name.empty()) devices[{p.name, p.resource_name, "healthy"}] += 0;
  }
  for (const Device& d : s.devices) ++devices[{d.plugin, d.resource, HealthName(d.health)}];
  for (const auto& [key, count] : devices) {
    w.Sample("rayaccel_devices",
             {{"plugin", std::get<0>(key)},
              {"resource", std::get<1>(key)},
              {"health", std::get<2>(key)}},
             static_cast<double>(count));
  }

  w.Family("rayaccel_plugin_state", "gauge",
           "1 for each plugin's current state (active, degraded, failed, refused).");
  for (const PluginStatus& p : s.plugins) {
    w.Sample("rayaccel_plugin_state", {{"plugin", p.name}, {"state", PluginStateName(p.state)}}, 1);
  }

  w.Family("rayaccel_ray_resource", "gauge", "Resources the node gives Ray, by name.");
  for (const auto& [name, quantity] : s.ray.resources) {
    w.Sample("rayaccel_ray_resource", {{"resource", name}}, quantity);
  }

  w.Family("rayaccel_scans_total", "counter", "Scans that asked the plugins.");
  w.Sample("rayaccel_scans_total", {}, static_cast<double>(stats.scans));
  w.Family("rayaccel_snapshot_changes_total", "counter", "Scans that found a change.");
  w.Sample("rayaccel_snapshot_changes_total", {}, static_cast<double>(stats.changes));
  w.Family("rayaccel_scan_duration_seconds", "summary", "Time the scans took.");
  w.Sample("rayaccel_scan_duration_seconds_sum", {}, stats.scan_seconds);
  w.Sample("rayaccel_scan_duration_seconds_count", {}, static_cast<double>(stats.scans));
  w.Family("rayaccel_health_events_total", "counter", "Health events that led to a scan.");
  w.Sample("rayaccel_health_events_total", {}, static_cast<double>(stats.health_events));
  w.Family("rayaccel_plugin_restarts_total", "counter",
           "Isolated plugins started again after a crash.");
  w.Sample("rayaccel_plugin_restarts_total", {}, static_cast<double>(stats.plugin_restarts));

  w.Family("rayaccel_watchers", "gauge", "WatchSnapshots streams open.");
  w.Sample("rayaccel_watchers", {}, static_cast<double>(agent.watchers));
  if (agent.publishing) {
    w.Family("rayaccel_publish_acked_generation", "gauge",
             "The generation the raylet's sink last acknowledged.");
    w.Sample("rayaccel_publish_acked_generation", {},
             static_cast<double>(agent.publish_acked_generation));
    w.Family("rayaccel_publish_acks_total", "counter",
             "Snapshots the sink acknowledged (applied, or already had).");
    w.Sample("rayaccel_publish_acks_total", {}, static_cast<double>(agent.publish_acks));
    w.Family("rayaccel_publish_connects_total", "counter", "Streams opened to the sink.");
    w.Sample("rayaccel_publish_connects_total", {}, static_cast<double>(agent.publish_connects));
    w.Family("rayaccel_publish_failures_total", "counter", "Streams to the sink that failed.");
    w.Sample("rayaccel_publish_failures_total", {}, static_cast<double>(agent.publish_failures));
  }
  if (agent.device_loss) {
    const rpc::DeviceLossState& loss = *agent.device_loss;
    w.Family("rayaccel_lost_devices", "gauge",
             "Devices the node had at start that are unhealthy or gone since.");
    w.Sample("rayaccel_lost_devices", {}, static_cast<double>(loss.lost.size()));
    w.Family("rayaccel_node_draining", "gauge",
             "1 once Ray's GCS accepted to drain this node for a lost device.");
    w.Sample("rayaccel_node_draining", {{"policy", rpc::OnDeviceLossName(loss.policy)}},
             loss.drained ? 1.0 : 0.0);
    w.Family("rayaccel_drain_attempts_total", "counter",
             "DrainNode calls made to Ray's GCS (serve --on-device-loss drain).");
    w.Sample("rayaccel_drain_attempts_total", {}, static_cast<double>(loss.drain_attempts));
  }
  return w.Take();
}

std::string DeviceLossJson(const rpc::DeviceLossState& state) {
  auto unix_ms = [](std::chrono::system_clock::time_point t) {
    return static_cast<int64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count());
  };
  json::Writer w;
  w.BeginObject().Key("on_device_loss").String(rpc::OnDeviceLossName(state.policy));
  w.Key("lost").BeginArray();
  for (const rpc::LostDevice& d : state.lost) {
    w.BeginObject()
        .Key("id")
        .String(d.id)
        .Key("resource")
        .String(d.resource)
        .Key("name")
        .String(d.name)
        .Key("reason")
        .String(d.reason)
        .Key("at_unix_ms")
        .Int(unix_ms(d.at))
        .EndObject();
  }
  w.EndArray();
  if (state.policy == rpc::OnDeviceLoss::kDrain) {
    w.Key("drain").BeginObject();
    w.Key("requested").Bool(state.drain_requested).Key("accepted").Bool(state.drained);
    w.Key("attempts").Uint(state.drain_attempts);
    if (!state.node_id.empty()) w.Key("node_id").String(state.node_id);
    if (!state.drain_message.empty()) w.Key("message").String(state.drain_message);
    if (!state.drain_error.empty()) w.Key("error").String(state.drain_error);
    if (state.drained) w.Key("accepted_unix_ms").Int(unix_ms(state.drained_at));
    w.EndObject();
  }
  w.EndObject();
  return w.Finish();
}

std::string SinkMetrics(const rpc::RayletSink& sink, std::chrono::system_clock::time_point now) {
  const std::vector<rpc::SinkState::NodeEntry> nodes = sink.state().Nodes();
  PrometheusWriter w;
  w.Family("rayaccel_sink_nodes", "gauge", "Nodes that have published to this sink.");
  w.Sample("rayaccel_sink_nodes", {}, static_cast<double>(nodes.size()));
  w.Family("rayaccel_sink_node_last_update_age_seconds", "gauge",
           "Seconds since each node's agent last published (a change or its heartbeat).");
  std::map<std::pair<std::string, std::string>, size_t> devices;
  for (const rpc::SinkState::NodeEntry& n : nodes) {
    w.Sample("rayaccel_sink_node_last_update_age_seconds", {{"node_id", n.node_id}},
             std::chrono::duration<double>(now - n.updated).count());
    for (const Device& d : n.snapshot->devices) ++devices[{d.resource, HealthName(d.health)}];
  }
  w.Family("rayaccel_sink_devices", "gauge", "Devices across the nodes, by resource and health.");
  for (const auto& [key, count] : devices) {
    w.Sample("rayaccel_sink_devices", {{"resource", key.first}, {"health", key.second}},
             static_cast<double>(count));
  }
  w.Family("rayaccel_sink_updates_total", "counter", "Snapshots applied.");
  w.Sample("rayaccel_sink_updates_total", {}, static_cast<double>(sink.state().version()));
  w.Family("rayaccel_sink_stale_updates_total", "counter",
           "Snapshots acknowledged but not applied (older than the node's current one).");
  w.Sample("rayaccel_sink_stale_updates_total", {},
           static_cast<double>(sink.state().stale_updates()));
  w.Family("rayaccel_sink_streams_open", "gauge", "Agents' publishing streams open.");
  w.Sample("rayaccel_sink_streams_open", {}, static_cast<double>(sink.streams_open()));
  w.Family("rayaccel_sink_streams_total", "counter", "Agents' streams accepted (after hello).");
  w.Sample("rayaccel_sink_streams_total", {}, static_cast<double>(sink.streams_accepted()));
  w.Family("rayaccel_sink_refusals_total", "counter",
           "Streams refused: a bad token, hello or snapshot.");
  w.Sample("rayaccel_sink_refusals_total", {}, static_cast<double>(sink.refusals()));
  return w.Take();
}

}  // namespace rayaccel::web
