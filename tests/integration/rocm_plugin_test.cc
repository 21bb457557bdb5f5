// The real ROCm plugin (.so) through the registry and the CLI, on KFD trees captured from
// real AMD machines; RAS health on hand-made sysfs trees.
#include <sys/stat.h>

#include <fstream>
#include <set>

#include "gtest/gtest.h"
#include "rayaccel/registry.h"
#include "support/test_support.h"

namespace rayaccel {
namespace {

using testing::Fixture;
using testing::StatusOf;

std::string RocmPlugin() { return std::string(RAYACCEL_PLUGIN_DIR) + "/librayaccel-rocm.so"; }

std::unique_ptr<Registry> Rocm(const std::string& capture, const std::string& sysfs_root = "") {
  RegistryOptions options;
  options.plugins = {RocmPlugin()};
  options.use_environment = false;
  options.host_topology = false;
  options.config["rocm"]["kfd_topology_dir"] = Fixture("rocm-kfd/" + capture);
  options.config["rocm"]["sysfs_root"] =
      sysfs_root.empty() ? testing::MakeTempDir("empty-sysfs") : sysfs_root;
  auto registry = Registry::Create(options);
  EXPECT_TRUE(registry.ok()) << registry.status();
  return *std::move(registry);
}

TEST(RocmPlugin, Mi210Capture) {
  std::unique_ptr<Registry> registry = Rocm("topo-mi210-xgmi-pcie");
  std::shared_ptr<const NodeSnapshot> s = registry->snapshot();
  const PluginStatus& p = StatusOf(*s, "rocm");
  EXPECT_EQ(p.state, PluginStatus::State::kActive) << p.message;
  EXPECT_EQ(p.visible_devices_env, "HIP_VISIBLE_DEVICES");
  ASSERT_EQ(s->devices.size(), 8u);
  EXPECT_EQ(s->devices[0].accelerator_type, "AMD-Instinct-MI210");  // Ray's rule, by the host
  EXPECT_EQ(s->devices[0].architecture, "gfx90a");
  EXPECT_EQ(s->devices[0].health, Health::kUnknown);  // no RAS counters: never invented
  EXPECT_EQ(s->ray.resources, (std::map<std::string, double>{
                                  {"GPU", 8}, {"accelerator_type:AMD-Instinct-MI210", 1}}));
  ASSERT_EQ(s->domains.size(), 2u);
  EXPECT_EQ(s->domains[0].kind, "xgmi");
  int xgmi = 0;
  for (const Link& l : s->links) {
    if (l.type == LinkType::kXgmi) {
      ++xgmi;
      EXPECT_EQ(l.weight, 15u);
      EXPECT_EQ(l.bandwidth_mbps, 50000u);
    }
  }
  EXPECT_EQ(xgmi, 12);

  // Preferred allocation keeps requests inside one hive and on one NUMA node.
  for (size_t size : {2u, 3u, 4u}) {
    absl::StatusOr<Allocation> a = registry->PreferredAllocation({}, {}, size);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_EQ(a->devices.size(), size);
    std::set<bool> hive;
    std::set<int> numa;
    for (size_t d : a->devices) {
      hive.insert(d < 4);
      numa.insert(s->devices[d].numa_node);
    }
    EXPECT_EQ(hive.size(), 1u) << size;
    EXPECT_EQ(numa.size(), 1u) << size;
  }
  // Three free in hive A, two in hive B: a pair takes hive B's two.
  std::vector<std::string> free;
  for (size_t p : {0, 1, 2, 5, 6}) free.push_back(registry->snapshot()->devices[p].id);
  absl::StatusOr<Allocation> pair = registry->PreferredAllocation(free, {}, 2);
  ASSERT_TRUE(pair.ok());
  EXPECT_EQ(pair->devices, (std::vector<size_t>{5, 6}));

  auto env = registry->PrepareAllocationAt({0, 3}, registry->snapshot()->generation);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(*env, (std::map<std::string, std::string>{{"HIP_VISIBLE_DEVICES", "0,3"}}));
}

TEST(RocmPlugin, Mi300xCpxCountsPartitionsNotGpus) {
  std::unique_ptr<Registry> registry = Rocm("topo-mi300-cpx/topology");
  std::shared_ptr<const NodeSnapshot> s = registry->snapshot();
  EXPECT_EQ(StatusOf(*s, "rocm").state, PluginStatus::State::kActive);
  size_t parents = 0, partitions = 0;
  for (const Device& d : s->devices) {
    if (d.parent_id.empty()) {
      ++parents;
      EXPECT_EQ(d.accelerator_type, "AMD-Instinct-MI300X-OAM");
    } else {
      ++partitions;
      EXPECT_EQ(d.partition_profile, "CPX");
    }
  }
  EXPECT_EQ(parents, 8u);
  EXPECT_EQ(partitions, 63u);
  EXPECT_EQ(s->ray.resources.at("GPU"), 63);  // partitions are what gets scheduled
  // A partitioned GPU is not itself allocatable.
  std::string parent_id = s->devices[0].parent_id;
  EXPECT_FALSE(registry->PrepareAllocation({parent_id}).ok());
  absl::StatusOr<Allocation> eight = registry->PreferredAllocation({}, {}, 8);
  ASSERT_TRUE(eight.ok());
  std::set<std::string> from;
  for (size_t d : eight->devices) from.insert(s->devices[d].parent_id);
  EXPECT_EQ(from.size(), 1u);  // eight partitions of one GPU: linked on the package
}

// get_telemetry from amdgpu's sysfs, in the kernel's layout under the GPU's PCI device: busy
// percent, VRAM used and total, hwmon power (microwatts) and temperature (millidegrees; an
// MI300 without temp1 reads temp2), the RAS counters for ECC and xGMI errors and the bad
// pages; a GPU without those files has them explained, not invented.
TEST(RocmPlugin, TelemetryFromAmdgpuSysfs) {
  std::string sysfs = testing::MakeTempDir("amdgpu-sysfs");
  auto put = [&](const std::string& relative, const std::string& text) {
    std::string path = sysfs;
    size_t start = 0;
    while (true) {
      size_t slash = relative.find('/', start);
      if (slash == std::string::npos) break;
      path = sysfs + "/" + relative.substr(0, slash);
      mkdir(path.c_str(), 0755);
      start = slash + 1;
    }
    std::ofstream(sysfs + "/" + relative) << text;
  };
  for (std::string dir : {"bus", "bus/pci", "bus/pci/devices"})
    mkdir((sysfs + "/" + dir).c_str(), 0755);
  const std::string gpu = "bus/pci/devices/0000:63:00.0/";  // device 0
  put(gpu + "gpu_busy_percent", "37\n");
  put(gpu + "mem_info_vram_used", "17179869184\n");
  put(gpu + "mem_info_vram_total", "68702699520\n");
  put(gpu + "hwmon/hwmon4/power1_average", "243000000\n");
  put(gpu + "hwmon/hwmon4/temp2_input", "51000\n");
  put(gpu + "ras/umc_err_count", "ue: 0\nce: 5\n");
  put(gpu + "ras/xgmi_wafl_err_count", "ue: 0\nce: 2\n");
  put(gpu + "ras/gpu_vram_bad_pages", "0x00000001 : 0x00001000 : R\n0x00000002 : 0x00001000 : P\n");
  std::unique_ptr<Registry> registry = Rocm("topo-mi210-xgmi-pcie", sysfs);
  Telemetry t = registry->SampleTelemetry();
  ASSERT_EQ(t.plugins.size(), 1u);
  EXPECT_EQ(t.plugins[0].error, "");
  ASSERT_EQ(t.devices.size(), registry->snapshot()->devices.size());
  const DeviceSample& s = t.devices[0];
  EXPECT_EQ(s.index, 0u);
  EXPECT_EQ(s.known, RAYACCEL_SAMPLE_UTILIZATION | RAYACCEL_SAMPLE_MEMORY | RAYACCEL_SAMPLE_POWER |
                         RAYACCEL_SAMPLE_TEMPERATURE | RAYACCEL_SAMPLE_ECC |
                         RAYACCEL_SAMPLE_RETIRED_PAGES | RAYACCEL_SAMPLE_LINK_ERRORS);
  EXPECT_EQ(s.utilization_percent, 37u);
  EXPECT_EQ(s.memory_used_bytes, 17179869184u);
  EXPECT_EQ(s.memory_total_bytes, 68702699520u);
  EXPECT_EQ(s.power_mw, 243000u);
  EXPECT_EQ(s.temperature_c, 51);
  EXPECT_EQ(s.ecc_corrected, 5u);
  EXPECT_EQ(s.ecc_uncorrected, 0u);
  EXPECT_EQ(s.retired_pages, 1u);  // the pending one is not retired yet
  EXPECT_EQ(s.link_errors, 2u);
  // The others have no files: nothing known, and no field of device 0 is "unknown" either.
  EXPECT_EQ(t.devices[1].known, 0u);
  EXPECT_TRUE(t.plugins[0].unknown.empty());

  // A GPU whose busy percent is no percent is not believed.
  put(gpu + "gpu_busy_percent", "250\n");
  t = registry->SampleTelemetry();
  EXPECT_EQ(t.devices[0].known & RAYACCEL_SAMPLE_UTILIZATION, 0u);

  // No file anywhere: every field explained once.
  registry = Rocm("topo-mi210-xgmi-pcie");
  t = registry->SampleTelemetry();
  EXPECT_EQ(t.plugins[0].unknown.at(RAYACCEL_SAMPLE_UTILIZATION), "no gpu_busy_percent in sysfs");
  EXPECT_EQ(t.plugins[0].unknown.size(), 7u);
}

TEST(RocmPlugin, RasCountersGiveHealth) {
  std::string sysfs = testing::MakeTempDir("ras-sysfs");
  // As amdgpu lays them out: /sys/bus/pci/devices/<bdf>/ras/<block>_err_count.
  auto write = [&](const std::string& bdf, const std::string& block, const std::string& text) {
    std::string dir = sysfs;
    for (const std::string& part : {std::string("/bus"), std::string("/pci"),
                                    std::string("/devices"), "/" + bdf, std::string("/ras")}) {
      dir += part;
      mkdir(dir.c_str(), 0755);
    }
    std::ofstream(dir + "/" + block + "_err_count") << text;
  };
  write("0000:63:00.0", "umc", "ue: 2\nce: 7\n");  // device 0
  write("0000:63:00.0", "gfx", "ue: 0\nce: 0\n");
  write("0000:43:00.0", "umc", "ue: 0\nce: 3\n");  // device 1
  // The kernel's numa_node for a PCI device wins over KFD's CPU-node order; -1 is ignored.
  std::ofstream(sysfs + "/bus/pci/devices/0000:43:00.0/numa_node") << "1\n";
  std::ofstream(sysfs + "/bus/pci/devices/0000:63:00.0/numa_node") << "-1\n";
  std::unique_ptr<Registry> registry = Rocm("topo-mi210-xgmi-pcie", sysfs);
  std::shared_ptr<const NodeSnapshot> s = registry->snapshot();
  EXPECT_EQ(s->devices[0].health, Health::kUnhealthy);
  EXPECT_EQ(s->devices[0].health_reason, "uncorrectable RAS errors: umc 2");
  EXPECT_EQ(s->devices[1].health, Health::kHealthy);  // correctable errors only
  EXPECT_EQ(s->devices[1].numa_node, 1);
  EXPECT_EQ(s->devices[0].numa_node, 0);
  EXPECT_EQ(s->devices[2].health, Health::kUnknown);
  EXPECT_EQ(s->ray.resources.at("GPU"), 7);

  // A partitioned GPU's counters speak for every partition: the MI300X at 05:00.0 has eight.
  write("0000:05:00.0", "umc", "ue: 1\nce: 0\n");
  std::unique_ptr<Registry> cpx = Rocm("topo-mi300-cpx/topology", sysfs);
  std::shared_ptr<const NodeSnapshot> c = cpx->snapshot();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(c->devices[i].health, Health::kUnhealthy) << i;
  EXPECT_EQ(c->devices[8].health, Health::kUnknown);
  EXPECT_EQ(c->ray.resources.at("GPU"), 63 - 8);
}

TEST(RocmPlugin, NoDriverMeansZeroDevicesWithTheReason) {
  std::unique_ptr<Registry> registry = Rocm("does-not-exist");
  const PluginStatus& p = StatusOf(*registry->snapshot(), "rocm");
  EXPECT_EQ(p.state, PluginStatus::State::kActive);
  EXPECT_EQ(p.device_count, 0u);
  EXPECT_NE(p.message.find("0 devices: no KFD topology at"), std::string::npos) << p.message;
}

TEST(RocmPlugin, CliDiscoverAndTopoOnMi210) {
  std::vector<std::string> base = {
      RAYACCEL_CLI,
      "topo",
      "--no-host-topology",
      "--plugin",
      "rocm",
      "--config",
      "rocm.kfd_topology_dir=" + Fixture("rocm-kfd/topo-mi210-xgmi-pcie")};
  testing::CommandResult r = testing::Run(base, {{"RAYACCEL_PLUGIN_PATH", ""}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("GPU0  X     XGMI  XGMI  XGMI  PCIe  PCIe  PCIe  PCIe  -             0"),
            std::string::npos)
      << r.out;
  base[1] = "discover";
  r = testing::Run(base, {{"RAYACCEL_PLUGIN_PATH", ""}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("AMD-Instinct-MI210  AMD Instinct MI210  0000:63:00.0"), std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace rayaccel
