// The Intel GPU plugin (.so) through the registry, on i915- and xe-shaped sysfs trees
// (tests/fixtures/intel_gpu, where each fact came from is in SOURCES.md): what Ray's own
// IntelGPUAcceleratorManager gives (GPU, one per Level Zero root device: a tile of a Max 1550
// under the default flat hierarchy; "Intel-GPU-" and the name's last two words as type;
// ZE_AFFINITY_MASK and ONEAPI_DEVICE_SELECTOR as Ray writes them), and the cards Ray does
// not see.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "rayaccel/registry.h"
#include "support/test_support.h"

namespace rayaccel {
namespace {

using testing::Fixture;
using testing::StatusOf;

std::unique_ptr<Registry> IntelGpu(const std::string& fixture,
                                   std::map<std::string, std::string> extra = {}) {
  RegistryOptions options;
  options.plugins = {std::string(RAYACCEL_PLUGIN_DIR) + "/librayaccel-intel_gpu.so"};
  options.use_environment = false;
  options.host_topology = false;
  options.config["intel_gpu"]["sysfs_root"] = Fixture("intel_gpu/" + fixture + "/sys");
  options.config["intel_gpu"]["hierarchy"] = "FLAT";  // not the environment's
  for (auto& [k, v] : extra) options.config["intel_gpu"][k] = v;
  auto registry = Registry::Create(options);
  EXPECT_TRUE(registry.ok()) << registry.status();
  return *std::move(registry);
}

int64_t IntAttribute(const Device& d, const std::string& name) {
  for (const Attribute& a : d.attributes) {
    if (a.name == name) return a.int_value;
  }
  ADD_FAILURE() << d.id << " has no " << name;
  return -1;
}

std::string StringAttribute(const Device& d, const std::string& name) {
  for (const Attribute& a : d.attributes) {
    if (a.name == name) return a.string_value;
  }
  return "";
}

std::set<std::pair<size_t, size_t>> OnPackagePairs(const NodeSnapshot& s) {
  std::set<std::pair<size_t, size_t>> pairs;
  for (const Link& l : s.links) {
    if (l.type_name == "on-package") pairs.insert({l.a, l.b});
  }
  return pairs;
}

TEST(IntelGpuPlugin, FourMax1550sAreEightTilesAsRayCountsThem) {
  auto registry = IntelGpu("max1550-x4-i915");
  auto s = registry->snapshot();
  const PluginStatus& p = StatusOf(*s, "intel_gpu");
  EXPECT_EQ(p.state, PluginStatus::State::kActive) << p.message;
  EXPECT_EQ(p.resource_name, "GPU");
  EXPECT_EQ(p.visible_devices_env, "ZE_AFFINITY_MASK");
  // The BMC's ASPEED VGA (card0) is no Intel GPU; each Max 1550 is two Level Zero devices.
  ASSERT_EQ(s->devices.size(), 8u);
  EXPECT_EQ(s->ray.resources.at("GPU"), 8);
  EXPECT_EQ(s->ray.resources.at("accelerator_type:Intel-GPU-Max-1550"), 1);
  // Level Zero's order: by PCI bus id, a card's tiles together.
  const Device& d3 = s->devices[3];
  EXPECT_EQ(d3.index, 3u);
  EXPECT_EQ(d3.id, "intel-0000:3a:00.0-t1");
  EXPECT_EQ(d3.pci_bus_id, "0000:3a:00.0");
  EXPECT_EQ(d3.name, "Intel(R) Data Center GPU Max 1550");
  EXPECT_EQ(d3.accelerator_type, "Intel-GPU-Max-1550");
  EXPECT_EQ(d3.memory_bytes, uint64_t{64} << 30);
  EXPECT_EQ(d3.numa_node, 0);
  EXPECT_EQ(s->devices[7].numa_node, 1);
  EXPECT_EQ(IntAttribute(d3, "card"), 2);
  EXPECT_EQ(IntAttribute(d3, "tile"), 1);
  EXPECT_EQ(StringAttribute(d3, "driver"), "i915");
}

TEST(IntelGpuPlugin, TheTilesOfACardShareItsPackage) {
  auto registry = IntelGpu("max1550-x4-i915");
  auto s = registry->snapshot();
  EXPECT_EQ(OnPackagePairs(*s),
            (std::set<std::pair<size_t, size_t>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  size_t cards = 0;
  for (const Domain& d : s->domains) {
    if (d.kind != "intel-gpu-card") continue;
    ++cards;
    EXPECT_EQ(d.devices.size(), 2u);
  }
  EXPECT_EQ(cards, 4u);
  // Two tiles: one card, not halves of two.
  auto two = registry->PreferredAllocation({}, {}, 2, "GPU");
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_EQ(two->devices.size(), 2u);
  EXPECT_EQ(s->devices[two->devices[0]].pci_bus_id, s->devices[two->devices[1]].pci_bus_id);
}

// As intel_gpu.py: the mask names the devices, and the selector, read after the mask has
// renumbered them, names 0 to n-1. The registry lets the plugin set the selector beside its
// variable, as it lets no other variable outside the family.
TEST(IntelGpuPlugin, AWorkerIsGivenTheMaskAndTheSelectorAsRayGivesThem) {
  auto registry = IntelGpu("max1550-x4-i915");
  auto s = registry->snapshot();
  auto env = registry->PrepareAllocation({s->devices[5].id, s->devices[2].id}, s->generation);
  ASSERT_TRUE(env.ok()) << env.status();
  ASSERT_EQ(env->size(), 2u);
  EXPECT_EQ(env->at("ZE_AFFINITY_MASK"), "5,2");
  EXPECT_EQ(env->at("ONEAPI_DEVICE_SELECTOR"), "level_zero:0,1");
}

// get_telemetry from the card's xe hwmon (fixture: the first of the two Flex 170s): power as the
// energy counter's rate between two samples (none on the first), the package temperature;
// the second has no hwmon folder, so nothing; a Max 1550 tile gets nothing, the drivers measuring
// the card; what neither driver keeps in sysfs explained once.
TEST(IntelGpuPlugin, TelemetryFromTheCardsHwmon) {
  std::string root = testing::MakeTempDir("intel-hwmon");
  std::filesystem::copy(
      Fixture("intel_gpu/flex170-x2-xe"), root,
      std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
  RegistryOptions options;
  options.plugins = {std::string(RAYACCEL_PLUGIN_DIR) + "/librayaccel-intel_gpu.so"};
  options.use_environment = false;
  options.host_topology = false;
  options.config["intel_gpu"]["sysfs_root"] = root + "/sys";
  options.config["intel_gpu"]["hierarchy"] = "FLAT";
  auto registry = Registry::Create(options);
  ASSERT_TRUE(registry.ok()) << registry.status();
  const std::string energy =
      root + "/sys/devices/pci0000:4b/0000:4d:00.0/hwmon/hwmon3/energy1_input";

  Telemetry t = (*registry)->SampleTelemetry();
  ASSERT_EQ(t.devices.size(), 2u);
  EXPECT_EQ(t.devices[0].known, RAYACCEL_SAMPLE_TEMPERATURE);
  EXPECT_EQ(t.devices[0].temperature_c, 48);
  EXPECT_EQ(t.devices[1].known, 0u);
  EXPECT_NE(t.plugins[0].unknown.at(RAYACCEL_SAMPLE_POWER).find("two samples"), std::string::npos);

  // 150 W for 200 ms and more: 30 J or a little less per the time that passed.
  const auto before = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::ofstream(energy) << (123456789012ull + 30000000ull) << "\n";
  t = (*registry)->SampleTelemetry();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - before).count();
  ASSERT_EQ(t.devices[0].known, RAYACCEL_SAMPLE_POWER | RAYACCEL_SAMPLE_TEMPERATURE);
  EXPECT_LE(t.devices[0].power_mw, 150000u);
  EXPECT_GE(t.devices[0].power_mw, static_cast<uint32_t>(30000000.0 / ms) - 1);
  EXPECT_EQ(t.plugins[0].unknown.count(RAYACCEL_SAMPLE_POWER), 0u);
  EXPECT_EQ(t.plugins[0].unknown.count(RAYACCEL_SAMPLE_MEMORY), 1u);

  // A counter that is no count costs the power alone.
  std::ofstream(energy) << "-1\n";
  t = (*registry)->SampleTelemetry();
  EXPECT_EQ(t.devices[0].known, RAYACCEL_SAMPLE_TEMPERATURE);

  t = IntelGpu("max1550-x4-i915")->SampleTelemetry();
  ASSERT_EQ(t.devices.size(), 8u);
  for (const DeviceSample& d : t.devices) EXPECT_EQ(d.known, 0u);
  EXPECT_EQ(t.plugins[0].unknown.at(RAYACCEL_SAMPLE_POWER),
            "the driver measures power per card, not per tile");
}

TEST(IntelGpuPlugin, TheCompositeHierarchyMakesACardOneDevice) {
  auto registry = IntelGpu("max1550-x4-i915", {{"hierarchy", "COMPOSITE"}});
  auto s = registry->snapshot();
  ASSERT_EQ(s->devices.size(), 4u);
  EXPECT_EQ(s->devices[1].id, "intel-0000:3a:00.0");
  EXPECT_EQ(s->devices[1].memory_bytes, uint64_t{128} << 30);
  EXPECT_EQ(IntAttribute(s->devices[1], "tiles"), 2);
  EXPECT_TRUE(OnPackagePairs(*s).empty());
  // Anything Level Zero does not take is refused, not guessed.
  auto bad = IntelGpu("max1550-x4-i915", {{"hierarchy", "flat"}});
  EXPECT_EQ(StatusOf(*bad->snapshot(), "intel_gpu").state, PluginStatus::State::kFailed);
}

TEST(IntelGpuPlugin, FlexCardsUnderXeAreOneDeviceEach) {
  auto registry = IntelGpu("flex170-x2-xe");
  auto s = registry->snapshot();
  ASSERT_EQ(s->devices.size(), 2u);
  EXPECT_EQ(s->ray.resources.at("GPU"), 2);
  EXPECT_EQ(s->ray.resources.at("accelerator_type:Intel-GPU-Flex-170"), 1);
  EXPECT_EQ(s->devices[0].id, "intel-0000:4d:00.0");
  EXPECT_EQ(s->devices[1].pci_bus_id, "0000:b3:00.0");
  EXPECT_EQ(s->devices[1].memory_bytes, uint64_t{16} << 30);
  EXPECT_EQ(IntAttribute(s->devices[1], "card"), 2);
  EXPECT_EQ(StringAttribute(s->devices[1], "driver"), "xe");
  EXPECT_TRUE(OnPackagePairs(*s).empty());
}

TEST(IntelGpuPlugin, IntegratedGraphicsCountOnlyWhenAskedFor) {
  auto registry = IntelGpu("igpu-only");
  auto s = registry->snapshot();
  EXPECT_EQ(StatusOf(*s, "intel_gpu").state, PluginStatus::State::kActive);
  EXPECT_TRUE(s->devices.empty());
  EXPECT_EQ(s->ray.resources.count("GPU"), 0u);

  auto asked = IntelGpu("igpu-only", {{"integrated", "true"}});
  auto t = asked->snapshot();
  ASSERT_EQ(t->devices.size(), 1u);  // the HDMI connector is no card
  EXPECT_EQ(t->devices[0].pci_bus_id, "0000:00:02.0");
  EXPECT_EQ(t->devices[0].accelerator_type, "Intel-GPU-Graphics-770");
  bool integrated = false;
  for (const Attribute& a : t->devices[0].attributes) {
    integrated |= a.name == "integrated" && a.int_value == 1;
  }
  EXPECT_TRUE(integrated);
}

TEST(IntelGpuPlugin, LiesInTheDriversTreeCostOnlyWhatTheyTouch) {
  auto registry = IntelGpu("malformed");
  auto s = registry->snapshot();
  EXPECT_EQ(StatusOf(*s, "intel_gpu").state, PluginStatus::State::kActive);
  // card0 (a Max 1550 whose NUMA node is "zero"), card4 (a device id that is no hex) and
  // card5 (a Flex 170 with tile folders past any package); the platform framebuffer, the
  // NVIDIA and AMD GPUs, the vendor file that is no id, cardX and the Intel function that is
  // no display are not.
  ASSERT_EQ(s->devices.size(), 4u);
  EXPECT_EQ(s->devices[0].id, "intel-0000:18:00.0-t0");
  EXPECT_EQ(s->devices[1].id, "intel-0000:18:00.0-t1");
  EXPECT_EQ(s->devices[0].numa_node, -1);
  EXPECT_EQ(s->devices[2].pci_bus_id, "0000:81:00.0");
  EXPECT_EQ(s->devices[2].name, "Intel GPU");
  EXPECT_EQ(s->devices[2].accelerator_type, "");
  EXPECT_EQ(s->devices[2].memory_bytes, 0u);
  EXPECT_EQ(s->devices[3].id, "intel-0000:a1:00.0");  // tile0 alone is a tile
  EXPECT_EQ(s->ray.resources.at("GPU"), 4);
  for (const Device& d : s->devices) EXPECT_EQ(d.pci_vendor_id, 0x8086u);
}

TEST(IntelGpuPlugin, ANodeWithoutIntelGpusGivesNothingAndSaysSo) {
  auto registry = IntelGpu("no-gpu");  // the BMC's VGA alone
  auto s = registry->snapshot();
  EXPECT_TRUE(s->devices.empty());
  EXPECT_EQ(s->ray.resources.count("GPU"), 0u);
  auto none = IntelGpu("no-such-tree");
  EXPECT_TRUE(none->snapshot()->devices.empty());
  EXPECT_EQ(StatusOf(*none->snapshot(), "intel_gpu").state, PluginStatus::State::kActive);
}

}  // namespace
}  // namespace rayaccel
