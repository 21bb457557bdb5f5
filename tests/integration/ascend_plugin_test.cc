// The Ascend plugin (.so) through the registry, on driver-shaped /dev and sysfs trees
// (tests/fixtures/ascend, where each fact came from is in SOURCES.md): what Ray's own
// NPUAcceleratorManager gives (NPU, one per /dev/davinci<N>, ASCEND_RT_VISIBLE_DEVICES as
// comma-separated logical ids), and the PCI functions and HCCS wiring Ray does not see.
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "rayaccel/registry.h"
#include "support/test_support.h"

namespace rayaccel {
namespace {

using testing::Fixture;
using testing::StatusOf;

std::unique_ptr<Registry> Ascend(const std::string& fixture, const std::string& dcmi = "") {
  RegistryOptions options;
  options.plugins = {std::string(RAYACCEL_PLUGIN_DIR) + "/librayaccel-ascend.so"};
  options.use_environment = false;
  options.host_topology = false;
  options.config["ascend"]["sysfs_root"] = Fixture("ascend/" + fixture + "/sys");
  options.config["ascend"]["dcmi_library"] = dcmi.empty() ? "/nonexistent/libdcmi.so" : dcmi;
  options.config["ascend"]["dev_root"] = Fixture("ascend/" + fixture + "/dev");
  auto registry = Registry::Create(options);
  EXPECT_TRUE(registry.ok()) << registry.status();
  return *std::move(registry);
}

int64_t PhysicalId(const Device& d) {
  for (const Attribute& a : d.attributes) {
    if (a.name == "physical_id") return a.int_value;
  }
  ADD_FAILURE() << d.id << " has no physical_id";
  return -1;
}

std::set<std::pair<int64_t, int64_t>> HccsPairs(const NodeSnapshot& s) {
  std::set<std::pair<int64_t, int64_t>> pairs;
  for (const Link& l : s.links) {
    if (l.type_name == "HCCS") {
      pairs.insert({PhysicalId(s.devices[l.a]), PhysicalId(s.devices[l.b])});
    }
  }
  return pairs;
}

TEST(AscendPlugin, AnAtlas800TrainingServerIsEightNpusAsRayCountsThem) {
  auto registry = Ascend("atlas-800-9000");
  auto s = registry->snapshot();
  const PluginStatus& p = StatusOf(*s, "ascend");
  EXPECT_EQ(p.state, PluginStatus::State::kActive) << p.message;
  EXPECT_EQ(p.resource_name, "NPU");
  EXPECT_EQ(p.visible_devices_env, "ASCEND_RT_VISIBLE_DEVICES");
  // The control nodes (davinci_manager) and the Huawei NIC are not NPUs.
  ASSERT_EQ(s->devices.size(), 8u);
  EXPECT_EQ(s->ray.resources.at("NPU"), 8);
  EXPECT_EQ(s->ray.resources.at("accelerator_type:Ascend910"), 1);
  const Device& npu3 = s->devices[3];
  EXPECT_EQ(npu3.index, 3u);
  EXPECT_EQ(npu3.pci_bus_id, "0000:01:00.0");  // the function whose davinci_dev_id is 3
  EXPECT_EQ(npu3.numa_node, 0);
  EXPECT_EQ(npu3.name, "Ascend 910");
  EXPECT_EQ(npu3.memory_bytes, uint64_t{32} << 30);
}

TEST(AscendPlugin, TheTrainingServersTwoHccsRingsAndTheA2sFullMesh) {
  auto atlas = Ascend("atlas-800-9000");
  std::set<std::pair<int64_t, int64_t>> rings;
  for (int64_t a = 0; a < 8; ++a) {
    for (int64_t b = a + 1; b < 8; ++b) {
      if (a / 4 == b / 4) rings.insert({a, b});
    }
  }
  EXPECT_EQ(HccsPairs(*atlas->snapshot()), rings);
  // Four NPUs: one ring, not two NPUs of each.
  auto four = atlas->PreferredAllocation({}, {}, 4, "NPU");
  ASSERT_TRUE(four.ok()) << four.status();
  std::set<int64_t> rings_used;
  for (size_t p : four->devices) rings_used.insert(PhysicalId(atlas->snapshot()->devices[p]) / 4);
  EXPECT_EQ(rings_used.size(), 1u);

  auto a2 = Ascend("atlas-800t-a2");
  EXPECT_EQ(HccsPairs(*a2->snapshot()).size(), 28u);  // all 8 x 7 / 2 pairs
  EXPECT_EQ(a2->snapshot()->ray.resources.at("accelerator_type:Ascend910B"), 1);
}

// get_telemetry from DCMI (the tests' libdcmi.so, whose values move): the AI Core's busy
// percent, HBM used and total, power (DCMI's tenths of a watt), temperature, HBM ECC totals
// and isolated pages, by logical id; an NPU DCMI does not know (davinci7 here) has no sample
// values, a call not supported on one NPU costs that field there alone, ECC off is said. No
// libdcmi.so: every field explained, no NPU sampled.
TEST(AscendPlugin, TelemetryFromDcmi) {
  setenv("FAKE_DCMI_FIXTURE", Fixture("fake-dcmi/atlas-800t-a2.json").c_str(), 1);
  auto registry = Ascend("atlas-800t-a2", RAYACCEL_FAKE_DCMI);
  Telemetry t = registry->SampleTelemetry();
  ASSERT_EQ(t.plugins.size(), 1u);
  EXPECT_EQ(t.plugins[0].error, "");
  ASSERT_EQ(t.devices.size(), 8u);
  const DeviceSample& busy = t.devices[0];
  EXPECT_EQ(busy.index, 0u);
  EXPECT_EQ(busy.known, RAYACCEL_SAMPLE_UTILIZATION | RAYACCEL_SAMPLE_MEMORY |
                            RAYACCEL_SAMPLE_POWER | RAYACCEL_SAMPLE_TEMPERATURE |
                            RAYACCEL_SAMPLE_ECC | RAYACCEL_SAMPLE_RETIRED_PAGES);
  EXPECT_GE(busy.utilization_percent, 35u);
  EXPECT_EQ(busy.memory_total_bytes, 64ull << 30);
  EXPECT_GE(busy.memory_used_bytes, 20ull << 30);
  EXPECT_GE(busy.power_mw, 215000u);  // 2150 tenths of a watt, and more as it works
  EXPECT_GE(busy.temperature_c, 45);
  EXPECT_EQ(busy.ecc_corrected, 3u);
  EXPECT_EQ(busy.ecc_uncorrected, 0u);
  EXPECT_EQ(busy.retired_pages, 1u);
  EXPECT_EQ(t.devices[2].known & RAYACCEL_SAMPLE_ECC, 0u);  // ECC off
  EXPECT_EQ(t.devices[3].known & RAYACCEL_SAMPLE_POWER, 0u);
  EXPECT_NE(t.devices[3].known & RAYACCEL_SAMPLE_TEMPERATURE, 0u);
  EXPECT_EQ(t.devices[7].known, 0u);  // not in DCMI's list
  EXPECT_EQ(t.plugins[0].unknown.at(RAYACCEL_SAMPLE_LINK_ERRORS), "DCMI keeps no HCCS error total");
  EXPECT_EQ(t.plugins[0].unknown.count(RAYACCEL_SAMPLE_POWER), 0u);

  t = Ascend("atlas-800t-a2")->SampleTelemetry();
  EXPECT_TRUE(t.devices.empty());
  ASSERT_EQ(t.plugins[0].unknown.size(), 1u);
  EXPECT_NE(t.plugins[0].unknown.begin()->second.find("no libdcmi.so"), std::string::npos);
  unsetenv("FAKE_DCMI_FIXTURE");
}

TEST(AscendPlugin, AContainersNpusAreNumberedLogicallyAsTheRuntimeNumbersThem) {
  auto registry = Ascend("atlas-800-9000-container");
  auto s = registry->snapshot();
  ASSERT_EQ(s->devices.size(), 2u);
  EXPECT_EQ(PhysicalId(s->devices[0]), 3);
  EXPECT_EQ(PhysicalId(s->devices[1]), 5);
  // Ray writes ",".join(ids) of the logical ids the runtime sees: 0 and 1 here, not 3 and 5.
  auto env = registry->PrepareAllocation({s->devices[0].id, s->devices[1].id}, s->generation);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->at("ASCEND_RT_VISIBLE_DEVICES"), "0,1");
  EXPECT_TRUE(HccsPairs(*s).empty());  // 3 and 5 are in different rings
}

TEST(AscendPlugin, LyingNodesAndPciAttributesCostOnlyWhatTheyTouch) {
  auto registry = Ascend("malformed");
  auto s = registry->snapshot();
  EXPECT_EQ(StatusOf(*s, "ascend").state, PluginStatus::State::kActive);
  // davinci0-2 are NPUs; davinciX, an id past any driver and davinci_manager are not.
  ASSERT_EQ(s->devices.size(), 3u);
  EXPECT_EQ(s->devices[0].pci_bus_id, "0000:01:00.0");
  EXPECT_EQ(s->devices[0].accelerator_type, "Ascend910");
  // NPU 1's function gives "one" as its id, NPU 2's says a device id that is not hex: neither
  // is matched, and the NPUs stay, without PCI facts.
  EXPECT_EQ(s->devices[1].pci_bus_id, "");
  EXPECT_EQ(s->devices[2].pci_bus_id, "");
  EXPECT_EQ(s->ray.resources.at("NPU"), 3);
  EXPECT_TRUE(HccsPairs(*s).empty());
}

TEST(AscendPlugin, ANodeWithoutNpusGivesNothingAndSaysSo) {
  auto registry = Ascend("no-npus");  // a Huawei NIC, no davinci nodes
  auto s = registry->snapshot();
  EXPECT_TRUE(s->devices.empty());
  EXPECT_EQ(s->ray.resources.count("NPU"), 0u);
}

}  // namespace
}  // namespace rayaccel
