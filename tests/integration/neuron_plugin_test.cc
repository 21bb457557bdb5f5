// The Neuron plugin (.so) through the registry, on Neuron-driver-shaped sysfs trees
// (tests/fixtures/neuron, where each fact came from is in SOURCES.md): what Ray's own
// NeuronAcceleratorManager gives (neuron_cores counted per NeuronCore, aws-neuron-core,
// NEURON_RT_VISIBLE_CORES as comma-separated core numbers), and the wiring Ray does not see.
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "rayaccel/registry.h"
#include "support/test_support.h"

namespace rayaccel {
namespace {

using testing::Fixture;
using testing::StatusOf;

std::unique_ptr<Registry> Neuron(const std::string& fixture) {
  RegistryOptions options;
  options.plugins = {std::string(RAYACCEL_PLUGIN_DIR) + "/librayaccel-neuron.so"};
  options.use_environment = false;
  options.host_topology = false;
  options.config["neuron"]["sysfs_root"] = Fixture("neuron/" + fixture + "/sys");
  options.config["neuron"]["dev_root"] = Fixture("neuron/" + fixture + "/dev");
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

const Device& Core(const NodeSnapshot& s, uint32_t core) {
  for (const Device& d : s.devices) {
    if (d.index == core) return d;
  }
  ADD_FAILURE() << "no core " << core;
  return s.devices.front();
}

// The devices whose cores core 0 reaches over NeuronLink.
std::set<int64_t> NeuronLinkPeersOfCore0(const NodeSnapshot& s) {
  std::set<int64_t> peers;
  for (const Link& l : s.links) {
    if (l.type_name != "NeuronLink") continue;
    const Device& a = s.devices[l.a];
    const Device& b = s.devices[l.b];
    if (a.index == 0) peers.insert(IntAttribute(b, "neuron_device"));
    if (b.index == 0) peers.insert(IntAttribute(a, "neuron_device"));
  }
  return peers;
}

TEST(NeuronPlugin, ATrn1_32xlargeIsThirtyTwoNeuronCoresAsRayCountsThem) {
  auto registry = Neuron("trn1-32xlarge");
  auto s = registry->snapshot();
  const PluginStatus& p = StatusOf(*s, "neuron");
  EXPECT_EQ(p.state, PluginStatus::State::kActive) << p.message;
  EXPECT_EQ(p.resource_name, "neuron_cores");
  EXPECT_EQ(p.visible_devices_env, "NEURON_RT_VISIBLE_CORES");
  ASSERT_EQ(s->devices.size(), 32u);
  // Ray: neuron_cores is the sum of nc_count over the devices, and the type is always
  // ray.util.accelerators.AWS_NEURON_CORE.
  EXPECT_EQ(s->ray.resources.at("neuron_cores"), 32);
  EXPECT_EQ(s->ray.resources.at("accelerator_type:aws-neuron-core"), 1);
  for (const Device& d : s->devices) EXPECT_EQ(d.accelerator_type, "aws-neuron-core");
  // The runtime's numbering: device N's cores are 2N and 2N + 1.
  EXPECT_EQ(IntAttribute(Core(*s, 10), "neuron_device"), 5);
  EXPECT_EQ(IntAttribute(Core(*s, 11), "core_on_device"), 1);
  EXPECT_EQ(Core(*s, 31).name, "Trainium1 NeuronCore");
  EXPECT_EQ(Core(*s, 31).architecture, "NDv2");
}

TEST(NeuronPlugin, TheDriversWiringBecomesNeuronLinkLinksAndDomains) {
  auto registry = Neuron("trn1-32xlarge");
  auto s = registry->snapshot();
  // Device 0 is wired to 12, 3, 4 and 1 (trn1_32xl_neigbor_ids), and to no other.
  EXPECT_EQ(NeuronLinkPeersOfCore0(*s), (std::set<int64_t>{1, 3, 4, 12}));
  size_t neuronlink = 0, on_device = 0;
  for (const Link& l : s->links) {
    neuronlink += l.type_name == "NeuronLink";
    on_device += l.type_name == "on-device";
  }
  EXPECT_EQ(neuronlink, 32u * 4u);  // 32 wired pairs of devices, 2 x 2 cores each
  EXPECT_EQ(on_device, 16u);
  size_t devices = 0, fabric = 0;
  for (const Domain& d : s->domains) {
    devices += d.kind == "neuron-device" && d.devices.size() == 2;
    fabric += d.kind == "neuronlink" && d.devices.size() == 32;
  }
  EXPECT_EQ(devices, 16u);
  EXPECT_EQ(fabric, 1u);
}

TEST(NeuronPlugin, AWorkerGetsNeuronRtVisibleCoresInRaysFormat) {
  auto registry = Neuron("trn1-32xlarge");
  auto s = registry->snapshot();
  // Ray writes ",".join(str(i) for i in ids): core numbers, comma-separated, no ranges.
  auto env =
      registry->PrepareAllocation({Core(*s, 0).id, Core(*s, 1).id, Core(*s, 5).id}, s->generation);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->at("NEURON_RT_VISIBLE_CORES"), "0,1,5");
  // Two cores: the two of one device, the closest pair there is.
  auto pair = registry->PreferredAllocation({}, {}, 2, "neuron_cores");
  ASSERT_TRUE(pair.ok()) << pair.status();
  ASSERT_EQ(pair->devices.size(), 2u);
  EXPECT_EQ(IntAttribute(s->devices[pair->devices[0]], "neuron_device"),
            IntAttribute(s->devices[pair->devices[1]], "neuron_device"));
}

TEST(NeuronPlugin, AnAgentThatIsNotRootCountsCoresFromTheMetricsFolders) {
  auto registry = Neuron("inf2-xlarge-unprivileged");
  auto s = registry->snapshot();
  ASSERT_EQ(s->devices.size(), 2u);
  EXPECT_EQ(s->ray.resources.at("neuron_cores"), 2);
  EXPECT_EQ(Core(*s, 1).name, "Inferentia2 NeuronCore");
  for (const Link& l : s->links) EXPECT_NE(l.type_name, "NeuronLink");
}

TEST(NeuronPlugin, LiesAndDamageInTheDriversFilesCostOnlyWhatTheyTouch) {
  auto registry = Neuron("malformed");
  auto s = registry->snapshot();
  EXPECT_EQ(StatusOf(*s, "neuron").state, PluginStatus::State::kActive);
  // neuron0 (core_count "two": its two neuron_core folders count) and neuron2; neuron1 (4096
  // cores of an unknown architecture) and neuron3 (no count anywhere) are left out.
  ASSERT_EQ(s->devices.size(), 4u);
  EXPECT_EQ(s->devices[0].id, "neuron-0-nc0");
  EXPECT_EQ(s->devices[3].id, "neuron-2-nc1");
  EXPECT_EQ(s->ray.resources.at("neuron_cores"), 4);
  // Neither wiring list is believed: one has a bad entry, the other an overflow.
  for (const Link& l : s->links) EXPECT_NE(l.type_name, "NeuronLink");
}

// get_telemetry from the driver's per-core memory counters: each category's bytes in use
// summed, against the core's share of the chip's HBM (Trainium1: 32 GiB for 2 cores); a core
// without counters has no memory value; what the driver cannot say is explained once.
TEST(NeuronPlugin, TelemetryIsEachCoresDeviceMemory) {
  auto registry = Neuron("trn1-32xlarge");
  Telemetry t = registry->SampleTelemetry();
  ASSERT_EQ(t.plugins.size(), 1u);
  EXPECT_EQ(t.plugins[0].error, "");
  ASSERT_EQ(t.devices.size(), 32u);
  EXPECT_EQ(t.devices[0].known, RAYACCEL_SAMPLE_MEMORY);
  EXPECT_EQ(t.devices[0].memory_used_bytes, (4ull << 30) + (512ull << 20) + (64ull << 20));
  EXPECT_EQ(t.devices[0].memory_total_bytes, 16ull << 30);
  EXPECT_EQ(t.devices[1].memory_used_bytes, (2ull << 30) + (576ull << 20));
  EXPECT_EQ(t.devices[2].known, RAYACCEL_SAMPLE_MEMORY);  // neuron1 core 0: idle
  EXPECT_EQ(t.devices[2].memory_used_bytes, 0u);
  EXPECT_EQ(t.devices[3].known, 0u);  // no counters
  EXPECT_EQ(t.plugins[0].unknown.count(RAYACCEL_SAMPLE_MEMORY), 0u);
  EXPECT_EQ(t.plugins[0].unknown.size(), 6u);
  EXPECT_NE(t.plugins[0].unknown.at(RAYACCEL_SAMPLE_POWER).find("percent"), std::string::npos);

  // A counter that is not a size costs that core its value only.
  std::string root = testing::MakeTempDir("neuron-telemetry");
  std::filesystem::copy(
      Fixture("neuron/trn1-32xlarge"), root,
      std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
  std::ofstream(root +
                "/sys/devices/virtual/neuron_device/neuron0/neuron_core1/stats/memory_usage/"
                "device_mem/tensors/total")
      << "-5\n";
  RegistryOptions options;
  options.plugins = {std::string(RAYACCEL_PLUGIN_DIR) + "/librayaccel-neuron.so"};
  options.use_environment = false;
  options.host_topology = false;
  options.config["neuron"]["sysfs_root"] = root + "/sys";
  options.config["neuron"]["dev_root"] = root + "/dev";
  auto damaged = Registry::Create(options);
  ASSERT_TRUE(damaged.ok());
  t = (*damaged)->SampleTelemetry();
  EXPECT_EQ(t.devices[0].known, RAYACCEL_SAMPLE_MEMORY);
  EXPECT_EQ(t.devices[1].known, 0u);
  EXPECT_TRUE(t.plugins[0].problems.empty());
}

TEST(NeuronPlugin, ADriverWithoutDevicesGivesNothingAndSaysSo) {
  auto registry = Neuron("driver-no-devices");
  auto s = registry->snapshot();
  EXPECT_TRUE(s->devices.empty());
  EXPECT_EQ(s->ray.resources.count("neuron_cores"), 0u);
  const PluginStatus& p = StatusOf(*s, "neuron");
  EXPECT_EQ(p.state, PluginStatus::State::kActive) << p.message;
}

}  // namespace
}  // namespace rayaccel
