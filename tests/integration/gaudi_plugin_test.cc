// The Gaudi plugin (.so) through the registry and the conformance suite, on habanalabs-shaped
// sysfs trees (tests/fixtures/gaudi). In these boxes the module ids (OAM slots) follow
// neither the accel numbering nor the PCI bus order, so confusing them fails a test.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "rayaccel/registry.h"
#include "support/test_support.h"

namespace rayaccel {
namespace {

using testing::Fixture;
using testing::StatusOf;

std::string GaudiPlugin() { return std::string(RAYACCEL_PLUGIN_DIR) + "/librayaccel-gaudi.so"; }

std::unique_ptr<Registry> Gaudi(const std::string& sysfs_root) {
  RegistryOptions options;
  options.plugins = {GaudiPlugin()};
  options.use_environment = false;
  options.host_topology = false;
  options.config["gaudi"]["sysfs_root"] = sysfs_root;
  auto registry = Registry::Create(options);
  EXPECT_TRUE(registry.ok()) << registry.status();
  return *std::move(registry);
}

const Device& ByModule(const NodeSnapshot& s, uint32_t module) {
  for (const Device& d : s.devices) {
    if (d.index == module) return d;
  }
  ADD_FAILURE() << "no device with module id " << module;
  return s.devices.front();
}

std::string AttributeOf(const Device& d, const std::string& name) {
  for (const Attribute& a : d.attributes) {
    if (a.name == name) {
      return a.kind == Attribute::Kind::kInt ? std::to_string(a.int_value) : a.string_value;
    }
  }
  return "";
}

TEST(GaudiPlugin, AnHls2BoxIsAddressedByModuleId) {
  auto registry = Gaudi(Fixture("gaudi/hls2/sys"));
  auto s = registry->snapshot();
  const PluginStatus& p = StatusOf(*s, "gaudi");
  EXPECT_EQ(p.state, PluginStatus::State::kActive) << p.message;
  EXPECT_EQ(p.resource_name, "HPU");
  EXPECT_EQ(p.visible_devices_env, "HABANA_VISIBLE_MODULES");
  ASSERT_EQ(s->devices.size(), 8u);
  // accel2 sits in OAM slot 0 at 0000:33:00.0; accel0 in slot 3 at 0000:b3:00.0.
  const Device& slot0 = ByModule(*s, 0);
  EXPECT_EQ(slot0.pci_bus_id, "0000:33:00.0");
  EXPECT_EQ(AttributeOf(slot0, "device_node"), "/dev/accel/accel2");
  EXPECT_EQ(AttributeOf(slot0, "scale_out_nic"), "hbl_2");
  EXPECT_EQ(ByModule(*s, 3).pci_bus_id, "0000:b3:00.0");
  EXPECT_EQ(slot0.name, "Intel Gaudi 2");
  EXPECT_EQ(slot0.accelerator_type, "Intel-GAUDI2");  // Ray's "Intel-" + the device name
  EXPECT_EQ(slot0.driver_version, "1.17.0-fw-51.4.0");
  EXPECT_EQ(slot0.numa_node, 0);
  EXPECT_EQ(slot0.health, Health::kHealthy);
  EXPECT_EQ(s->ray.resources,
            (std::map<std::string, double>{{"HPU", 8}, {"accelerator_type:Intel-GAUDI2", 1}}));

  // Every pair of OAMs: three 100 GbE scale-up ports; the box is one domain.
  size_t links = 0;
  for (const Link& l : s->links) {
    if (l.type != LinkType::kScaleOut) continue;
    ++links;
    EXPECT_EQ(l.count, 3u);
    EXPECT_EQ(l.bandwidth_mbps, 37500u);
  }
  EXPECT_EQ(links, 28u);
  ASSERT_EQ(s->domains.size(), 1u);
  EXPECT_EQ(s->domains[0].kind, "gaudi-box");
  EXPECT_EQ(s->domains[0].devices.size(), 8u);

  // HABANA_VISIBLE_MODULES names module ids, never accel numbers or bus order.
  auto env = registry->PrepareAllocation({ByModule(*s, 3).id, ByModule(*s, 5).id});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->at("HABANA_VISIBLE_MODULES"), "3,5");
  // Ray's HPU takes any whole number of devices.
  EXPECT_TRUE(registry->ValidateQuantity("HPU", 3).ok());
}

TEST(GaudiPlugin, AnHls3BoxLeavesOtherAccelDevicesAlone) {
  auto registry = Gaudi(Fixture("gaudi/hls3/sys"));
  auto s = registry->snapshot();
  ASSERT_EQ(s->devices.size(), 8u) << "accel8 is another Intel device, not a Gaudi";
  EXPECT_EQ(ByModule(*s, 0).pci_bus_id, "0000:1a:00.0");  // accel3
  EXPECT_EQ(ByModule(*s, 0).name, "Intel Gaudi 3");
  EXPECT_EQ(s->ray.resources.at("accelerator_type:Intel-GAUDI3"), 1);
  for (const Link& l : s->links) EXPECT_EQ(l.bandwidth_mbps, 75000u);  // 3 x 200 GbE
}

TEST(GaudiPlugin, AFailedDeviceIsUnhealthyAndRecoversWhenOperationalAgain) {
  std::string root = testing::MakeTempDir("gaudi-failed");
  std::filesystem::copy(
      Fixture("gaudi/hls2-failed"), root,
      std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
  auto registry = Gaudi(root + "/sys");
  auto s = registry->snapshot();
  const Device& bad = ByModule(*s, 5);  // accel5
  EXPECT_EQ(bad.health, Health::kUnhealthy);
  EXPECT_EQ(bad.health_reason, "status: Needs reset");
  EXPECT_EQ(s->ray.resources.at("HPU"), 7);
  std::ofstream(root + "/sys/devices/pci0000:00/0000:9a:00.0/status") << "Operational\n";
  s = registry->Rescan();
  EXPECT_EQ(ByModule(*s, 5).health, Health::kHealthy);
  EXPECT_EQ(s->ray.resources.at("HPU"), 8);
}

TEST(GaudiPlugin, ADriverWithoutDevicesSaysSo) {
  auto s = Gaudi(Fixture("gaudi/driver-no-devices/sys"))->snapshot();
  const PluginStatus& p = StatusOf(*s, "gaudi");
  EXPECT_EQ(p.device_count, 0u);
  EXPECT_NE(p.message.find("habanalabs 1.17.0-fw-51.4.0 is loaded"), std::string::npos)
      << p.message;
  s = Gaudi(testing::MakeTempDir("no-sysfs"))->snapshot();
  EXPECT_NE(StatusOf(*s, "gaudi").message.find("driver is not loaded"), std::string::npos);
}

// With libhlml.so (here the tests' stand-in): serial numbers, and a critical-error event makes
// a device unhealthy at once; it stays so across rescans until the device has been reset
// (out of operation, then operational again). A DRAM event it was not asked for is ignored.
TEST(GaudiPlugin, HlmlEventsMakeADeviceUnhealthyUntilItIsReset) {
  std::string root = testing::MakeTempDir("gaudi-hlml");
  std::filesystem::copy(
      Fixture("gaudi/hls2"), root,
      std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
  setenv("FAKE_HLML_FIXTURE", Fixture("fake-hlml/hls2.json").c_str(), 1);
  RegistryOptions options;
  options.plugins = {GaudiPlugin()};
  options.use_environment = false;
  options.host_topology = false;
  options.watch_health = true;
  options.config["gaudi"]["sysfs_root"] = root + "/sys";
  options.config["gaudi"]["hlml_library"] = RAYACCEL_FAKE_HLML;
  auto registry = Registry::Create(options);
  ASSERT_TRUE(registry.ok()) << registry.status();
  auto s = (*registry)->snapshot();
  EXPECT_EQ(AttributeOf(ByModule(*s, 0), "serial_number"), "AN00000033");
  EXPECT_EQ(AttributeOf(ByModule(*s, 2), "serial_number"), "AN0000001A")
      << "bus ids compared in lower case";
  EXPECT_EQ(ByModule(*s, 5).health, Health::kHealthy);

  // The critical error on 0000:9a:00.0 (module 5) arrives 300 ms after hlml_init.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ByModule(*s, 5).health == Health::kHealthy &&
         std::chrono::steady_clock::now() < deadline) {
    s = (*registry)->WaitForNewer(s->generation, std::chrono::milliseconds(500));
  }
  EXPECT_EQ(ByModule(*s, 5).health, Health::kUnhealthy);
  EXPECT_EQ(ByModule(*s, 5).health_reason, "HLML critical error");
  EXPECT_EQ(s->ray.resources.at("HPU"), 7);
  s = (*registry)->Rescan();
  EXPECT_EQ(ByModule(*s, 5).health, Health::kUnhealthy) << "an event outlives a rescan";

  std::string status = root + "/sys/devices/pci0000:00/0000:9a:00.0/status";
  std::ofstream(status) << "In reset\n";
  s = (*registry)->Rescan();
  EXPECT_EQ(ByModule(*s, 5).health_reason, "status: In reset");
  std::ofstream(status) << "Operational\n";
  s = (*registry)->Rescan();
  EXPECT_EQ(ByModule(*s, 5).health, Health::kHealthy) << "reset and operational again";
  EXPECT_EQ(s->ray.resources.at("HPU"), 8);
  unsetenv("FAKE_HLML_FIXTURE");
}

TEST(GaudiPlugin, AnHlmlThatCannotStartLeavesSysfsHealth) {
  setenv("FAKE_HLML_FIXTURE", Fixture("fake-hlml/driver-not-loaded.json").c_str(), 1);
  RegistryOptions options;
  options.plugins = {GaudiPlugin()};
  options.use_environment = false;
  options.host_topology = false;
  options.watch_health = true;
  options.config["gaudi"]["sysfs_root"] = Fixture("gaudi/hls2-failed/sys");
  options.config["gaudi"]["hlml_library"] = RAYACCEL_FAKE_HLML;
  auto registry = Registry::Create(options);
  ASSERT_TRUE(registry.ok()) << registry.status();
  auto s = (*registry)->snapshot();
  EXPECT_EQ(StatusOf(*s, "gaudi").state, PluginStatus::State::kActive);
  EXPECT_EQ(s->ray.resources.at("HPU"), 7);
  EXPECT_EQ(AttributeOf(ByModule(*s, 0), "serial_number"), "");
  options.config["gaudi"]["hlml_library"] = "/nonexistent/libhlml.so";
  registry = Registry::Create(options);
  ASSERT_TRUE(registry.ok());
  EXPECT_EQ((*registry)->snapshot()->ray.resources.at("HPU"), 7);
  unsetenv("FAKE_HLML_FIXTURE");
}

// get_telemetry from HLML (the tests' libhlml.so, whose busy devices' values move over time):
// utilization, memory, power and the AIP's temperature by module id, rows replaced; the ECC
// pair unknown (HLML has no corrected count), said once; a power reading the library does not
// support on one device leaves that field out there alone. Without libhlml.so, every field
// is explained and no device is sampled.
TEST(GaudiPlugin, TelemetryFromHlml) {
  setenv("FAKE_HLML_FIXTURE", Fixture("fake-hlml/hls2.json").c_str(), 1);
  RegistryOptions options;
  options.plugins = {GaudiPlugin()};
  options.use_environment = false;
  options.host_topology = false;
  options.config["gaudi"]["sysfs_root"] = Fixture("gaudi/hls2/sys");
  options.config["gaudi"]["hlml_library"] = RAYACCEL_FAKE_HLML;
  auto registry = Registry::Create(options);
  ASSERT_TRUE(registry.ok()) << registry.status();
  Telemetry t = (*registry)->SampleTelemetry();
  ASSERT_EQ(t.plugins.size(), 1u);
  EXPECT_EQ(t.plugins[0].error, "");
  EXPECT_TRUE(t.plugins[0].problems.empty());
  ASSERT_EQ(t.devices.size(), 8u);
  auto by_bus = [&](const std::string& bus) -> const DeviceSample& {
    auto s = (*registry)->snapshot();
    for (const DeviceSample& d : t.devices) {
      for (const Device& dev : s->devices) {
        if (dev.id == d.device_id && dev.pci_bus_id == bus) return d;
      }
    }
    ADD_FAILURE() << "no sample for " << bus;
    return t.devices[0];
  };
  const uint32_t read = RAYACCEL_SAMPLE_UTILIZATION | RAYACCEL_SAMPLE_MEMORY |
                        RAYACCEL_SAMPLE_POWER | RAYACCEL_SAMPLE_TEMPERATURE |
                        RAYACCEL_SAMPLE_RETIRED_PAGES;
  const DeviceSample& busy = by_bus("0000:33:00.0");  // HLML's third: 50% at start
  EXPECT_EQ(busy.known, read);
  EXPECT_GE(busy.utilization_percent, 50u);
  EXPECT_EQ(busy.memory_total_bytes, 96ull << 30);
  EXPECT_GE(busy.memory_used_bytes, 24ull << 30);
  EXPECT_GE(busy.power_mw, 140000u + 3000u * 50u);
  EXPECT_GE(busy.temperature_c, 37 + 12);
  EXPECT_EQ(busy.retired_pages, 2u);
  EXPECT_EQ(by_bus("0000:4d:00.0").known, read & ~RAYACCEL_SAMPLE_POWER);
  EXPECT_EQ(by_bus("0000:cc:00.0").utilization_percent, 0u);  // idle
  EXPECT_EQ(t.plugins[0].unknown.at(RAYACCEL_SAMPLE_ECC),
            "hlml_device_get_total_ecc_errors (corrected): not supported");
  EXPECT_EQ(t.plugins[0].unknown.count(RAYACCEL_SAMPLE_POWER), 0u) << "other devices had power";
  EXPECT_EQ(t.plugins[0].unknown.count(RAYACCEL_SAMPLE_LINK_ERRORS), 1u);

  options.config["gaudi"]["hlml_library"] = "/nonexistent/libhlml.so";
  registry = Registry::Create(options);
  ASSERT_TRUE(registry.ok());
  t = (*registry)->SampleTelemetry();
  EXPECT_TRUE(t.devices.empty());
  ASSERT_EQ(t.plugins[0].unknown.size(), 1u);  // one reason for every field
  EXPECT_EQ(t.plugins[0].unknown.begin()->first, 0x7fu);
  EXPECT_NE(t.plugins[0].unknown.begin()->second.find("no libhlml.so"), std::string::npos);
  unsetenv("FAKE_HLML_FIXTURE");
}

TEST(GaudiPlugin, ReachesTierTwo) {
  testing::CommandResult r =
      testing::Run({RAYACCEL_CONFORMANCE, GaudiPlugin(), "--config",
                    "sysfs_root=" + Fixture("gaudi/hls2/sys"), "--tier", "2", "--timeout", "60"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("Tier reached: 2 (schedulable)"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace rayaccel
