#include "web/telemetry_history.h"

#include <set>
#include <utility>

#include "util/json.h"
#include "util/prometheus.h"

namespace rayaccel::web {

TelemetryHistory::TelemetryHistory(const Registry* registry, std::chrono::milliseconds interval,
                                   size_t keep)
    : registry_(registry), interval_(interval), keep_(keep == 0 ? 1 : keep) {
  thread_ = std::thread([this] { Run(); });
}

TelemetryHistory::TelemetryHistory(size_t keep)
    : registry_(nullptr), interval_(0), keep_(keep == 0 ? 1 : keep) {}

TelemetryHistory::~TelemetryHistory() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Telemetry TelemetryHistory::latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latest_;
}

TelemetryHistory::View TelemetryHistory::view() const {
  std::lock_guard<std::mutex> lock(mu_);
  return view_;
}

void TelemetryHistory::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    SampleOnce();
    lock.lock();
    wake_.wait_for(lock, interval_, [this] { return stopping_; });
  }
}

void TelemetryHistory::SampleOnce() {
  if (registry_ != nullptr) Add(registry_->SampleTelemetry());  // plugins take their time
}

void TelemetryHistory::Add(Telemetry t) {
  std::lock_guard<std::mutex> lock(mu_);
  latest_ = t;
  ++view_.samples;
  view_.last_unix_ms = t.unix_ms;
  std::set<std::string> failed;
  for (PluginTelemetry& p : t.plugins) {
    if (!p.error.empty()) failed.insert(p.plugin);
    view_.plugins[p.plugin] = std::move(p);
  }
  std::set<std::string> sampled;
  for (DeviceSample& s : t.devices) {
    DeviceHistory& h = view_.devices[s.device_id];
    sampled.insert(s.device_id);
    h.stale = false;
    h.points.push_back({t.unix_ms, std::move(s)});
    while (h.points.size() > keep_) h.points.pop_front();
  }
  for (auto it = view_.devices.begin(); it != view_.devices.end();) {
    if (sampled.count(it->first) > 0) {
      ++it;
      continue;
    }
    const std::string& plugin =
        it->second.points.empty() ? "" : it->second.points.back().sample.plugin;
    if (failed.count(plugin) > 0) {
      it->second.stale = true;  // kept, as it was last seen
      ++it;
    } else {
      it = view_.devices.erase(it);  // gone from the node, or lost: no longer shown
    }
  }
}

std::string TelemetryMetrics(const NodeSnapshot& snapshot, const TelemetryHistory::View& view) {
  std::map<std::string, std::string> resource;
  for (const Device& d : snapshot.devices) resource[d.id] = d.resource;
  PrometheusWriter w;
  struct Gauge {
    const char* name;
    const char* type;
    const char* help;
    uint32_t bit;
    double (*value)(const DeviceSample&);
  };
  static const Gauge kGauges[] = {
      {"rayaccel_device_utilization_percent", "gauge",
       "How busy each device's compute was over the driver's last period, 0-100.",
       RAYACCEL_SAMPLE_UTILIZATION,
       [](const DeviceSample& s) { return static_cast<double>(s.utilization_percent); }},
      {"rayaccel_device_memory_used_bytes", "gauge", "Device memory in use.",
       RAYACCEL_SAMPLE_MEMORY,
       [](const DeviceSample& s) { return static_cast<double>(s.memory_used_bytes); }},
      {"rayaccel_device_memory_total_bytes", "gauge", "Device memory in all.",
       RAYACCEL_SAMPLE_MEMORY,
       [](const DeviceSample& s) { return static_cast<double>(s.memory_total_bytes); }},
      {"rayaccel_device_power_milliwatts", "gauge", "Power drawn, as the driver averages it.",
       RAYACCEL_SAMPLE_POWER,
       [](const DeviceSample& s) { return static_cast<double>(s.power_mw); }},
      {"rayaccel_device_temperature_celsius", "gauge", "The driver's main temperature sensor.",
       RAYACCEL_SAMPLE_TEMPERATURE,
       [](const DeviceSample& s) { return static_cast<double>(s.temperature_c); }},
      {"rayaccel_device_ecc_corrected_total", "counter",
       "ECC errors corrected since the driver loaded.", RAYACCEL_SAMPLE_ECC,
       [](const DeviceSample& s) { return static_cast<double>(s.ecc_corrected); }},
      {"rayaccel_device_ecc_uncorrected_total", "counter",
       "ECC errors not corrected since the driver loaded.", RAYACCEL_SAMPLE_ECC,
       [](const DeviceSample& s) { return static_cast<double>(s.ecc_uncorrected); }},
      {"rayaccel_device_retired_pages_total", "counter",
       "Memory pages retired or rows remapped for errors.", RAYACCEL_SAMPLE_RETIRED_PAGES,
       [](const DeviceSample& s) { return static_cast<double>(s.retired_pages); }},
      {"rayaccel_device_link_errors_total", "counter",
       "Errors counted on the device's links (NVLink, xGMI, ...).", RAYACCEL_SAMPLE_LINK_ERRORS,
       [](const DeviceSample& s) { return static_cast<double>(s.link_errors); }},
  };
  for (const Gauge& g : kGauges) {
    w.Family(g.name, g.type, g.help);
    for (const auto& [id, history] : view.devices) {
      if (history.stale || history.points.empty()) continue;
      const DeviceSample& s = history.points.back().sample;
      if ((s.known & g.bit) == 0) continue;
      auto r = resource.find(id);
      w.Sample(g.name,
               {{"plugin", s.plugin},
                {"device", id},
                {"resource", r != resource.end() ? r->second : ""},
                {"index", std::to_string(s.index)}},
               g.value(s));
    }
  }
  w.Family("rayaccel_telemetry_sample_seconds", "gauge",
           "How long each plugin's last telemetry sample took.");
  for (const auto& [name, p] : view.plugins) {
    w.Sample("rayaccel_telemetry_sample_seconds", {{"plugin", name}}, p.seconds);
  }
  w.Family("rayaccel_telemetry_sample_failed", "gauge",
           "1 when a plugin's last telemetry sample failed or timed out (its devices are stale).");
  for (const auto& [name, p] : view.plugins) {
    w.Sample("rayaccel_telemetry_sample_failed", {{"plugin", name}}, p.error.empty() ? 0 : 1);
  }
  return w.Take();
}

std::string TelemetryJson(const TelemetryHistory::View& view) {
  json::Writer w;
  w.BeginObject().Key("last_unix_ms").Int(view.last_unix_ms).Key("samples").Uint(view.samples);
  w.Key("devices").BeginObject();
  for (const auto& [id, history] : view.devices) {
    w.Key(id).BeginObject().Key("stale").Bool(history.stale).Key("points").BeginArray();
    for (const TelemetryHistory::Point& p : history.points) {
      const DeviceSample& s = p.sample;
      w.BeginObject().Key("t").Int(p.unix_ms);
      if (s.known & RAYACCEL_SAMPLE_UTILIZATION) w.Key("utilization").Uint(s.utilization_percent);
      if (s.known & RAYACCEL_SAMPLE_MEMORY) {
        w.Key("memory_used")
            .Uint(s.memory_used_bytes)
            .Key("memory_total")
            .Uint(s.memory_total_bytes);
      }
      if (s.known & RAYACCEL_SAMPLE_POWER) w.Key("power_mw").Uint(s.power_mw);
      if (s.known & RAYACCEL_SAMPLE_TEMPERATURE) w.Key("temperature_c").Int(s.temperature_c);
      w.EndObject();
    }
    w.EndArray().EndObject();
  }
  w.EndObject();
  w.Key("plugins").BeginObject();
  for (const auto& [name, p] : view.plugins) {
    w.Key(name).BeginObject().Key("seconds").Double(p.seconds);
    if (!p.error.empty()) w.Key("error").String(p.error);
    w.EndObject();
  }
  w.EndObject();
  w.EndObject();
  return w.Finish();
}

}  // namespace rayaccel::web
