// The agent's telemetry: Registry::SampleTelemetry every `interval` on a thread of its own,
// the newest sample of each device for /metrics and the last `keep` for the page's charts. A
// plugin whose sample fails or times out keeps its devices' last values, marked stale with
// the time they were taken, and its error: never a broken page, never made-up values.
#ifndef RAYACCEL_WEB_TELEMETRY_HISTORY_H_
#define RAYACCEL_WEB_TELEMETRY_HISTORY_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "rayaccel/registry.h"

namespace rayaccel::web {

class TelemetryHistory {
 public:
  struct Point {
    int64_t unix_ms = 0;
    DeviceSample sample;
  };
  struct DeviceHistory {
    std::deque<Point> points;  // oldest first
    bool stale = false;        // its plugin's last sample failed: points.back() is older
  };
  struct View {
    std::map<std::string, DeviceHistory> devices;  // by device id
    std::map<std::string, PluginTelemetry> plugins;
    int64_t last_unix_ms = 0;
    uint64_t samples = 0;  // rounds taken
  };

  // Starts sampling at once, then every `interval`.
  TelemetryHistory(const Registry* registry, std::chrono::milliseconds interval, size_t keep = 120);
  // No sampling: a history of the samples given to Add (a sink's, of what a node published).
  explicit TelemetryHistory(size_t keep);
  ~TelemetryHistory();  // stops the thread, waiting for a round in progress
  TelemetryHistory(const TelemetryHistory&) = delete;
  TelemetryHistory& operator=(const TelemetryHistory&) = delete;

  View view() const;
  // One round now (the thread's work; tests call it to be deterministic).
  void SampleOnce();
  // Takes one sample into the history.
  void Add(Telemetry sample);
  // The newest sample as taken (unix_ms 0 before the first): what the agent publishes.
  Telemetry latest() const;

 private:
  void Run();

  const Registry* registry_;
  const std::chrono::milliseconds interval_;
  const size_t keep_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  View view_;
  Telemetry latest_;
  std::thread thread_;  // not running without a registry
};

// /metrics' part: each device's newest values, by plugin, device id and resource, and each
// plugin's sampling seconds and failures; stale devices are left out (Prometheus then marks
// them stale rather than keep a value that is no longer true).
std::string TelemetryMetrics(const NodeSnapshot& snapshot, const TelemetryHistory::View& view);

// /api/telemetry: the history as JSON, for the page's charts.
std::string TelemetryJson(const TelemetryHistory::View& view);

}  // namespace rayaccel::web

#endif  // RAYACCEL_WEB_TELEMETRY_HISTORY_H_
