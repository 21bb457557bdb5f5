// The agent's telemetry history (web/telemetry_history.h) against real plugins: samples kept per
// device, the newest in /metrics' text; a plugin whose sampling starts failing keeps its
// devices' last values marked stale, out of /metrics, and its error.
#include "web/telemetry_history.h"

#include <chrono>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "support/test_support.h"

namespace rayaccel {
namespace {

std::unique_ptr<Registry> Make(std::vector<std::string> plugins) {
  RegistryOptions options;
  options.plugins = std::move(plugins);
  options.config["sim"]["spec"] = testing::Example("dgx-h100.json");
  options.use_environment = false;
  options.host_topology = false;
  options.isolation = RegistryOptions::Isolation::kChildProcess;
  options.plugin_host = RAYACCEL_PLUGIN_HOST;
  absl::StatusOr<std::unique_ptr<Registry>> registry = Registry::Create(options);
  EXPECT_TRUE(registry.ok()) << registry.status();
  return *std::move(registry);
}

TEST(TelemetryHistory, KeepsSamplesAndMarksAFailingPluginsDevicesStale) {
  std::unique_ptr<Registry> registry =
      Make({testing::SimPlugin(), testing::TestPlugin("telemetry-once")});
  // An hour between rounds: the thread's first round, then the test's own.
  web::TelemetryHistory history(registry.get(), std::chrono::hours(1), /*keep=*/2);
  for (int i = 0; i < 200 && history.view().samples < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  web::TelemetryHistory::View first = history.view();
  ASSERT_EQ(first.samples, 1u);
  ASSERT_EQ(first.devices.size(), 9u);  // 8 sim GPUs and the test plugin's device 0
  std::string once;                     // the test plugin's device 0, the one it samples
  for (const Device& d : registry->snapshot()->devices) {
    if (d.plugin == "telemetry-once" && d.index == 0) once = d.id;
  }
  ASSERT_FALSE(once.empty());
  EXPECT_FALSE(first.devices.at(once).stale);
  EXPECT_NE(web::TelemetryMetrics(*registry->snapshot(), first).find(once), std::string::npos);

  history.SampleOnce();
  history.SampleOnce();
  web::TelemetryHistory::View later = history.view();
  EXPECT_EQ(later.samples, 3u);
  EXPECT_EQ(later.plugins.at("telemetry-once").error,
            "get_telemetry: the driver stopped answering");
  const web::TelemetryHistory::DeviceHistory& stale = later.devices.at(once);
  EXPECT_TRUE(stale.stale);
  ASSERT_EQ(stale.points.size(), 1u);  // its one real sample, kept
  EXPECT_EQ(stale.points.back().sample.utilization_percent, 12u);
  for (const auto& [id, h] : later.devices) {
    if (id != once) EXPECT_EQ(h.points.size(), 2u);  // at most `keep`
  }
  const std::string metrics = web::TelemetryMetrics(*registry->snapshot(), later);
  EXPECT_EQ(metrics.find(once), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("rayaccel_telemetry_sample_failed{plugin=\"telemetry-once\"} 1"),
            std::string::npos)
      << metrics;
  const std::string json = web::TelemetryJson(later);
  EXPECT_NE(json.find("\"stale\": true"), std::string::npos) << json;
}

}  // namespace
}  // namespace rayaccel
