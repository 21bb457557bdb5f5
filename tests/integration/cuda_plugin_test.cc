// The real CUDA plugin (.so) against a fake libnvidia-ml.so.1 built in the test tree, which
// answers NVML calls from JSON descriptions of real machine shapes
// (tests/fixtures/fake-nvml/). What each test expects is what nvidia-smi and
// `nvidia-smi topo -m` show on such a machine.
#include <chrono>
#include <cstdlib>

#include "gtest/gtest.h"
#include "rayaccel/registry.h"
#include "support/test_support.h"

namespace rayaccel {
namespace {

using testing::Fixture;
using testing::StatusOf;

std::string CudaPlugin() { return std::string(RAYACCEL_PLUGIN_DIR) + "/librayaccel-cuda.so"; }

std::unique_ptr<Registry> Cuda(const std::string& fixture,
                               const std::string& library = RAYACCEL_FAKE_NVML,
                               const std::string& by = "index") {
  setenv("FAKE_NVML_FIXTURE", Fixture("fake-nvml/" + fixture).c_str(), 1);
  RegistryOptions options;
  options.plugins = {CudaPlugin()};
  options.use_environment = false;
  options.host_topology = false;
  options.config["cuda"]["nvml_library"] = library;
  options.config["cuda"]["visible_devices_by"] = by;
  auto registry = Registry::Create(options);
  EXPECT_TRUE(registry.ok()) << registry.status();
  return *std::move(registry);
}

// The nvidia-smi topo -m cell for a pair: NV# when NVLinked, else the PCIe level.
std::string Cell(const NodeSnapshot& s, size_t a, size_t b) {
  std::string pcie;
  for (const Link& l : s.links) {
    if (l.a != std::min(a, b) || l.b != std::max(a, b)) continue;
    if (l.type == LinkType::kNvlink) return "NV" + std::to_string(l.count);
    pcie = PciePathName(l.pcie_path);
  }
  return pcie;
}

TEST(CudaPlugin, DgxH100ThroughNvswitch) {
  std::unique_ptr<Registry> registry = Cuda("dgx-h100.json");
  std::shared_ptr<const NodeSnapshot> s = registry->snapshot();
  const PluginStatus& p = StatusOf(*s, "cuda");
  EXPECT_EQ(p.state, PluginStatus::State::kActive) << p.message;
  ASSERT_EQ(s->devices.size(), 8u);
  const Device& d = s->devices[0];
  EXPECT_EQ(d.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(d.accelerator_type, "H100");    // Ray's rule, applied by the host
  EXPECT_EQ(d.pci_bus_id, "0000:18:00.0");  // NVML's 8-digit domain, normalised
  EXPECT_EQ(d.pci_device_id, 0x2330u);
  EXPECT_EQ(d.architecture, "hopper");
  EXPECT_EQ(d.memory_bytes, 85520809984u);
  EXPECT_EQ(d.driver_version, "550.54.15");
  EXPECT_EQ(s->devices[4].numa_node, 1);
  ASSERT_EQ(d.attributes.size(), 2u);
  EXPECT_EQ(d.attributes[0].name, "compute_capability");
  EXPECT_EQ(d.attributes[0].string_value, "9.0");
  // Every pair NV18 through the switches, as nvidia-smi topo -m shows on a DGX H100.
  for (size_t a = 0; a < 8; ++a) {
    for (size_t b = a + 1; b < 8; ++b) EXPECT_EQ(Cell(*s, a, b), "NV18") << a << "-" << b;
  }
  EXPECT_EQ(s->ray.resources,
            (std::map<std::string, double>{{"GPU", 8}, {"accelerator_type:H100", 1}}));
  EXPECT_EQ(s->ray.labels.count("ray.io/gpu-domain"), 0u);  // single node: no fabric clique
  auto env = registry->PrepareAllocationAt({0, 5}, s->generation);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->at("CUDA_VISIBLE_DEVICES"), "0,5");
  EXPECT_EQ(env->at("CUDA_DEVICE_ORDER"), "PCI_BUS_ID");
}

// get_telemetry through NVML: the fixture's values as they move (utilization walks up and
// wraps, the corrected ECC count only grows), remapped rows as retired pages on Hopper, the
// NVLink error counters; a workstation without ECC says why once; a lost GPU has no sample.
TEST(CudaPlugin, TelemetryFromNvml) {
  std::unique_ptr<Registry> registry = Cuda("dgx-h100.json");
  Telemetry t = registry->SampleTelemetry();
  ASSERT_EQ(t.plugins.size(), 1u);
  EXPECT_EQ(t.plugins[0].error, "");
  EXPECT_TRUE(t.plugins[0].unknown.empty());
  ASSERT_EQ(t.devices.size(), 8u);
  const DeviceSample& busy = t.devices[0];
  EXPECT_EQ(busy.device_id, "GPU-abc02330-1111-2222-3333-000000000000");
  EXPECT_EQ(busy.known, RAYACCEL_SAMPLE_UTILIZATION | RAYACCEL_SAMPLE_MEMORY |
                            RAYACCEL_SAMPLE_POWER | RAYACCEL_SAMPLE_TEMPERATURE |
                            RAYACCEL_SAMPLE_ECC | RAYACCEL_SAMPLE_RETIRED_PAGES |
                            RAYACCEL_SAMPLE_LINK_ERRORS);
  EXPECT_LE(busy.utilization_percent, 100u);
  EXPECT_EQ(busy.memory_total_bytes, 85520809984u);
  EXPECT_GE(busy.memory_used_bytes, 21474836480u);
  EXPECT_GE(busy.power_mw, 250000u);  // 250 W plus 2 W per percent busy
  EXPECT_GE(busy.temperature_c, 38);
  EXPECT_GE(busy.ecc_corrected, 2u);
  EXPECT_EQ(busy.retired_pages, 1u);  // one row remapped
  EXPECT_EQ(busy.link_errors, 3u);
  EXPECT_EQ(t.devices[2].utilization_percent % 3, 0u);  // an idle GPU, 3% a second since init

  registry.reset();  // NVML reads its fixture at the first nvmlInit_v2 of the process
  registry = Cuda("workstation-pcie.json");
  t = registry->SampleTelemetry();
  ASSERT_EQ(t.devices.size(), 4u);
  EXPECT_EQ(t.devices[0].known & (RAYACCEL_SAMPLE_ECC | RAYACCEL_SAMPLE_LINK_ERRORS), 0u);
  EXPECT_EQ(t.plugins[0].unknown.at(RAYACCEL_SAMPLE_ECC),
            "nvmlDeviceGetTotalEccErrors: Not Supported");
  EXPECT_EQ(t.plugins[0].unknown.at(RAYACCEL_SAMPLE_LINK_ERRORS),
            "NVLink error counters: Not Supported");

  registry.reset();
  registry = Cuda("gpu-lost.json");
  std::shared_ptr<const NodeSnapshot> snap = registry->snapshot();
  t = registry->SampleTelemetry();
  EXPECT_EQ(t.devices.size(), snap->devices.size() - 1);
  for (const DeviceSample& s : t.devices) {
    EXPECT_NE(s.device_id, "GPU-abc02330-1111-2222-3333-000000000002");  // the lost one
  }
}

TEST(CudaPlugin, Dgx1HybridCubeMesh) {
  std::shared_ptr<const NodeSnapshot> s = Cuda("dgx1-v100.json")->snapshot();
  ASSERT_EQ(s->devices.size(), 8u);
  EXPECT_EQ(s->devices[0].accelerator_type, "V100");
  // nvidia-smi topo -m on a DGX-1V: GPU0 row.
  EXPECT_EQ(Cell(*s, 0, 1), "NV1");
  EXPECT_EQ(Cell(*s, 0, 2), "NV1");
  EXPECT_EQ(Cell(*s, 0, 3), "NV2");
  EXPECT_EQ(Cell(*s, 0, 4), "NV2");
  EXPECT_EQ(Cell(*s, 0, 5), "SYS");
  EXPECT_EQ(Cell(*s, 6, 7), "NV2");
  EXPECT_EQ(Cell(*s, 2, 5), "SYS");
  // The allocator sees the same mesh: four GPUs means a fully linked quad.
  auto registry = Cuda("dgx1-v100.json");
  absl::StatusOr<Allocation> four = registry->PreferredAllocation({}, {}, 4);
  ASSERT_TRUE(four.ok());
  EXPECT_TRUE(four->devices == (std::vector<size_t>{0, 1, 2, 3}) ||
              four->devices == (std::vector<size_t>{4, 5, 6, 7}));
}

TEST(CudaPlugin, PcieWorkstation) {
  std::shared_ptr<const NodeSnapshot> s = Cuda("workstation-pcie.json")->snapshot();
  ASSERT_EQ(s->devices.size(), 4u);
  EXPECT_EQ(s->devices[0].accelerator_type, "RTX-A6000");
  EXPECT_EQ(Cell(*s, 0, 1), "PHB");
  EXPECT_EQ(Cell(*s, 0, 2), "SYS");
}

TEST(CudaPlugin, Gb200TrayPublishesItsNvlinkDomain) {
  std::unique_ptr<Registry> registry = Cuda("gb200-tray.json", RAYACCEL_FAKE_NVML, "uuid");
  std::shared_ptr<const NodeSnapshot> s = registry->snapshot();
  ASSERT_EQ(s->domains.size(), 1u);
  EXPECT_EQ(s->domains[0].kind, "nvlink");
  EXPECT_EQ(s->domains[0].id, "5f3c1a2e-8d4b-4e6f-9a7c-0b1d2e3f4a5b.7");
  EXPECT_EQ(s->ray.labels.at("ray.io/gpu-domain"), "5f3c1a2e-8d4b-4e6f-9a7c-0b1d2e3f4a5b.7");
  EXPECT_EQ(s->devices[0].accelerator_type, "GB200");
  auto env = registry->PrepareAllocation({s->devices[1].id});
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->at("CUDA_VISIBLE_DEVICES"), s->devices[1].id);  // by UUID when asked
}

// On Grace Blackwell the GPU's memory is a NUMA node of its own (nvmlDeviceGetNumaNodeId),
// which holds no CPUs; the node nearest the GPU, what placement needs, is its Grace's.
TEST(CudaPlugin, NumaNodeIsTheNearestNodeNotTheGpusOwnMemory) {
  std::shared_ptr<const NodeSnapshot> s = Cuda("gb200-tray.json")->snapshot();
  ASSERT_EQ(s->devices.size(), 4u);
  const int nearest[] = {0, 0, 1, 1};
  const int64_t own[] = {2, 10, 18, 26};
  for (size_t i = 0; i < 4; ++i) {
    const Device& d = s->devices[i];
    EXPECT_EQ(d.numa_node, nearest[i]) << i;
    const Attribute* a = nullptr;
    for (const Attribute& x : d.attributes) {
      if (x.name == "gpu_numa_node") a = &x;
    }
    ASSERT_NE(a, nullptr) << i;
    EXPECT_EQ(a->int_value, own[i]) << i;
  }
}

// What the plugin reported on a real NVIDIA H200 (a one-GPU virtual machine, driver
// 580.159.04; docs/hardware/nvidia-h200/), replayed: a fake NVML shaped after that GPU and
// the hwloc topology exported there give the same devices, resources and labels.
TEST(CudaPlugin, ReplaysTheRecordedH200) {
  setenv("FAKE_NVML_FIXTURE", Fixture("fake-nvml/h200-vm.json").c_str(), 1);
  RegistryOptions options;
  options.plugins = {CudaPlugin()};
  options.use_environment = false;
  options.hwloc_xml = Fixture("hwloc/h200-vm.xml");
  options.config["cuda"]["nvml_library"] = RAYACCEL_FAKE_NVML;
  auto registry = Registry::Create(options);
  ASSERT_TRUE(registry.ok()) << registry.status();
  std::shared_ptr<const NodeSnapshot> s = (*registry)->snapshot();
  ASSERT_EQ(s->devices.size(), 1u);
  const Device& d = s->devices[0];
  EXPECT_EQ(d.id, "GPU-220276d7-ff1e-03d6-1b59-79a30c60586e");
  EXPECT_EQ(d.name, "NVIDIA H200");
  EXPECT_EQ(d.accelerator_type, "H200");
  EXPECT_EQ(d.architecture, "hopper");
  EXPECT_EQ(d.memory_bytes, 150754820096u);
  EXPECT_EQ(d.pci_bus_id, "0000:00:06.0");
  EXPECT_EQ(d.pci_vendor_id, 0x10deu);
  EXPECT_EQ(d.pci_device_id, 0x2335u);
  EXPECT_EQ(d.numa_node, 0);
  EXPECT_EQ(d.driver_version, "580.159.04");
  EXPECT_EQ(d.cpuset, "0-15");
  EXPECT_EQ(d.nearest_nics, std::vector<std::string>{"eth0"});
  EXPECT_TRUE(s->links.empty());
  EXPECT_EQ(s->ray.resources,
            (std::map<std::string, double>{{"GPU", 1}, {"accelerator_type:H200", 1}}));
  EXPECT_EQ(s->ray.labels,
            (std::map<std::string, std::string>{{"ray.io/accelerator-type", "H200"},
                                                {"rayaccel.io/gpu-count", "1"},
                                                {"rayaccel.io/gpu-type", "H200"},
                                                {"rayaccel.io/gpu-vendor", "nvidia"}}));
}

TEST(CudaPlugin, AnOlderDriverWithoutFabricInfoStillWorks) {
  std::unique_ptr<Registry> registry = Cuda("gb200-tray.json", RAYACCEL_FAKE_NVML_OLD);
  std::shared_ptr<const NodeSnapshot> s = registry->snapshot();
  EXPECT_EQ(StatusOf(*s, "cuda").state, PluginStatus::State::kActive);
  EXPECT_EQ(s->devices.size(), 4u);
  EXPECT_TRUE(s->domains.empty());
  EXPECT_EQ(s->ray.labels.count("ray.io/gpu-domain"), 0u);
}

TEST(CudaPlugin, LostGpuStaysListedUnhealthy) {
  std::shared_ptr<const NodeSnapshot> s = Cuda("gpu-lost.json")->snapshot();
  ASSERT_EQ(s->devices.size(), 4u);
  EXPECT_EQ(s->devices[2].health, Health::kUnhealthy);
  EXPECT_NE(s->devices[2].health_reason.find("NVML_ERROR_GPU_IS_LOST"), std::string::npos);
  EXPECT_EQ(s->ray.resources.at("GPU"), 3);
}

TEST(CudaPlugin, AVanishedGpuIsNotSilentlyDropped) {
  std::unique_ptr<Registry> registry = Cuda("gpu-vanishes.json");
  std::shared_ptr<const NodeSnapshot> before = registry->snapshot();
  ASSERT_EQ(before->devices.size(), 4u);
  std::string last = before->devices[3].id;
  std::shared_ptr<const NodeSnapshot> after = registry->Rescan();  // NVML now lists three
  ASSERT_EQ(after->devices.size(), 4u);
  EXPECT_EQ(after->devices[3].id, last);
  EXPECT_EQ(after->devices[3].health, Health::kUnhealthy);
  EXPECT_EQ(after->devices[3].health_reason, "vanished: NVML no longer lists this GPU");
  EXPECT_EQ(after->ray.resources.at("GPU"), 3);
}

TEST(CudaPlugin, NoDriverOrNoLibraryMeansZeroDevicesWithTheReason) {
  std::unique_ptr<Registry> failing = Cuda("init-fails.json");
  const PluginStatus& init = StatusOf(*failing->snapshot(), "cuda");
  EXPECT_EQ(init.state, PluginStatus::State::kActive);
  EXPECT_EQ(init.message, "0 devices: nvmlInit_v2 failed: Driver Not Loaded (9)");

  std::unique_ptr<Registry> none = Cuda("dgx-h100.json", "/nonexistent/libnvidia-ml.so.1");
  const PluginStatus& lib = StatusOf(*none->snapshot(), "cuda");
  EXPECT_EQ(lib.state, PluginStatus::State::kActive);
  EXPECT_NE(lib.message.find("0 devices: cannot load /nonexistent/libnvidia-ml.so.1"),
            std::string::npos)
      << lib.message;
}

TEST(CudaPlugin, MigDevicesAreScheduledInsteadOfTheirGpu) {
  std::unique_ptr<Registry> registry = Cuda("mig-a100.json");
  std::shared_ptr<const NodeSnapshot> s = registry->snapshot();
  EXPECT_EQ(StatusOf(*s, "cuda").state, PluginStatus::State::kActive)
      << StatusOf(*s, "cuda").message;
  ASSERT_EQ(s->devices.size(), 4u);  // two GPUs, two MIG devices of GPU 0
  const Device& mig = s->devices[2];
  EXPECT_EQ(mig.parent_id, s->devices[0].id);
  EXPECT_EQ(mig.partition_profile, "3g.40gb");
  EXPECT_EQ(mig.name, "NVIDIA A100-SXM4-80GB MIG 3g.40gb");
  EXPECT_EQ(mig.accelerator_type, "A100");
  EXPECT_EQ(mig.memory_bytes, 42949672960u);
  // GPU 1 and the two MIG devices; GPU 0 itself is not schedulable while partitioned.
  EXPECT_EQ(s->ray.resources.at("GPU"), 3);
  auto env = registry->PrepareAllocation({mig.id});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->at("CUDA_VISIBLE_DEVICES"), mig.id);  // CUDA takes MIG devices by UUID

  // CUDA enumerates one MIG device per process: a MIG instance is leased alone, never with a
  // whole GPU or another instance, and a GPU in MIG mode is never leased whole.
  absl::StatusOr<Allocation> two = registry->PreferredAllocation({}, {}, 2);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_TRUE(two->devices.empty()) << "only GPU 1 may be in a set of more than one";
  absl::StatusOr<Allocation> with_mig = registry->PreferredAllocation({}, {mig.id}, 2);
  ASSERT_TRUE(with_mig.ok());
  EXPECT_NE(with_mig->reason.find("is leased alone"), std::string::npos) << with_mig->reason;
  absl::StatusOr<Allocation> one = registry->PreferredAllocation({}, {mig.id}, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->device_ids, std::vector<std::string>{mig.id});
  auto mixed = registry->PrepareAllocation({s->devices[1].id, mig.id});
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(mixed.status().message().find("CUDA enumerates one MIG device per process"),
            std::string::npos)
      << mixed.status();
  auto parent = registry->PrepareAllocation({s->devices[0].id});
  EXPECT_NE(parent.status().message().find("is in MIG mode"), std::string::npos) << parent.status();
}

// The CUDA plugin on `fixture` with its health watched, in this process or in a plugin host
// (without a memory limit: sanitizers' shadow memory does not fit one).
std::unique_ptr<Registry> WatchedCuda(const std::string& fixture,
                                      const std::string& library = RAYACCEL_FAKE_NVML,
                                      bool isolated = false) {
  setenv("FAKE_NVML_FIXTURE", Fixture("fake-nvml/" + fixture).c_str(), 1);
  RegistryOptions options;
  options.plugins = {CudaPlugin()};
  options.use_environment = false;
  options.host_topology = false;
  options.watch_health = true;
  options.config["cuda"]["nvml_library"] = library;
  if (isolated) {
    options.isolation = RegistryOptions::Isolation::kChildProcess;
    options.plugin_host = RAYACCEL_PLUGIN_HOST;
    options.plugin_memory_limit_bytes = 0;
  }
  auto registry = Registry::Create(options);
  EXPECT_TRUE(registry.ok()) << registry.status();
  return registry.ok() ? *std::move(registry) : nullptr;
}

// The first snapshot that satisfies `done`, or the last one seen when none did in 10 s.
template <typename Done>
std::shared_ptr<const NodeSnapshot> WaitFor(const Registry& registry, Done done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::shared_ptr<const NodeSnapshot> s = registry.snapshot();
  while (!done(*s) && std::chrono::steady_clock::now() < deadline) {
    s = registry.WaitForNewer(s->generation, std::chrono::milliseconds(200));
  }
  return s;
}

TEST(CudaPlugin, XidEventsMakeANewSnapshotAtOnce) {
  std::unique_ptr<Registry> registry = WatchedCuda("xid-79.json");
  ASSERT_NE(registry, nullptr);
  std::shared_ptr<const NodeSnapshot> first = registry->snapshot();
  EXPECT_EQ(first->ray.resources.at("GPU"), 4);
  // XID 13 (an application fault) is ignored; XID 79 (fell off the bus) is not.
  std::shared_ptr<const NodeSnapshot> next =
      registry->WaitForNewer(first->generation, std::chrono::seconds(10));
  ASSERT_GT(next->generation, first->generation);
  EXPECT_EQ(next->devices[1].health, Health::kUnhealthy);
  EXPECT_EQ(next->devices[1].health_reason, "XID 79");
  EXPECT_EQ(next->devices[0].health, Health::kHealthy);
  EXPECT_EQ(next->ray.resources.at("GPU"), 3);
  // Nothing else happens: waiting again times out with the same snapshot.
  std::shared_ptr<const NodeSnapshot> quiet =
      registry->WaitForNewer(next->generation, std::chrono::milliseconds(300));
  EXPECT_EQ(quiet->generation, next->generation);
}

// The same through the plugin host: the health watch crosses the process boundary.
TEST(CudaPlugin, XidEventsReachAnIsolatedRegistryToo) {
  std::unique_ptr<Registry> registry = WatchedCuda("xid-79.json", RAYACCEL_FAKE_NVML, true);
  ASSERT_NE(registry, nullptr);
  EXPECT_EQ(registry->snapshot()->ray.resources.at("GPU"), 4);
  std::shared_ptr<const NodeSnapshot> s =
      WaitFor(*registry, [](const NodeSnapshot& n) { return n.ray.resources.at("GPU") != 4; });
  EXPECT_EQ(s->ray.resources.at("GPU"), 3);
  EXPECT_EQ(s->devices[1].health_reason, "XID 79");
  EXPECT_EQ(StatusOf(*s, "cuda").state, PluginStatus::State::kActive);
}

// gpu-reset.json: GPU 1 raises XID 94 and the driver asks for a reset, GPU 2 falls off the bus
// (XID 79), GPU 3 starts with the driver asking to drain P2P traffic. Then the resets are done:
// at 700 ms the driver's action for GPU 1 goes back to none (with XID 154), at 1000 ms
// GPU 2 reads again and the drain request on GPU 3 is gone (no event: a probe must see them).
// GPU 0 raises XID 94 too, but at 600 ms, as its reset completes, XID 48 arrives: a new fault,
// which that reset does not clear.
TEST(CudaPlugin, GpusAreHealthyAgainAfterAReset) {
  std::unique_ptr<Registry> registry = WatchedCuda("gpu-reset.json");
  ASSERT_NE(registry, nullptr);
  std::shared_ptr<const NodeSnapshot> first = registry->snapshot();
  ASSERT_EQ(first->devices.size(), 4u);
  // A recovery action pending at start is seen without any event (a fault from before).
  EXPECT_EQ(first->devices[3].health, Health::kUnhealthy);
  EXPECT_EQ(first->devices[3].health_reason, "the driver asks to drain peer-to-peer traffic");
  EXPECT_EQ(first->ray.resources.at("GPU"), 3);

  std::shared_ptr<const NodeSnapshot> broken = WaitFor(*registry, [](const NodeSnapshot& s) {
    return s.devices[1].health_reason == "XID 94; the driver asks for a GPU reset" &&
           s.devices[2].health == Health::kUnhealthy;
  });
  EXPECT_EQ(broken->devices[1].health_reason, "XID 94; the driver asks for a GPU reset");
  EXPECT_NE(broken->devices[2].health_reason.find("GPU_IS_LOST"), std::string::npos)
      << broken->devices[2].health_reason;

  std::shared_ptr<const NodeSnapshot> healed = WaitFor(*registry, [](const NodeSnapshot& s) {
    return s.devices[1].health == Health::kHealthy && s.devices[2].health == Health::kHealthy &&
           s.devices[3].health == Health::kHealthy;
  });
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_EQ(healed->devices[i].health, Health::kHealthy)
        << i << ": " << healed->devices[i].health_reason;
  }
  EXPECT_EQ(healed->devices[2].name, "NVIDIA H100 80GB HBM3");  // read again, not a placeholder
  EXPECT_EQ(healed->devices[0].health, Health::kUnhealthy);
  EXPECT_EQ(healed->devices[0].health_reason, "XID 48");
  EXPECT_EQ(healed->ray.resources.at("GPU"), 3);
  EXPECT_GT(healed->generation, broken->generation);
}

// A driver before r570 cannot say a GPU was reset: the XID stays until the agent restarts
// (as with NVIDIA's device plugin), while the GPU that fell off the bus and reads again recovers.
TEST(CudaPlugin, WithoutRecoveryActionsAnXidStaysUntilRestart) {
  std::unique_ptr<Registry> registry = WatchedCuda("gpu-reset.json", RAYACCEL_FAKE_NVML_OLD);
  ASSERT_NE(registry, nullptr);
  EXPECT_EQ(registry->snapshot()->ray.resources.at("GPU"), 4);  // the drain request is unseen
  std::shared_ptr<const NodeSnapshot> broken = WaitFor(*registry, [](const NodeSnapshot& s) {
    return s.devices[1].health == Health::kUnhealthy && s.devices[2].health == Health::kUnhealthy;
  });
  EXPECT_EQ(broken->devices[1].health_reason, "XID 94");
  std::shared_ptr<const NodeSnapshot> after = WaitFor(
      *registry, [](const NodeSnapshot& s) { return s.devices[2].health == Health::kHealthy; });
  EXPECT_EQ(after->devices[2].health, Health::kHealthy);
  EXPECT_EQ(after->devices[1].health, Health::kUnhealthy);
  EXPECT_EQ(after->devices[1].health_reason, "XID 94");
  EXPECT_EQ(after->devices[0].health_reason, "XID 48");  // the newer fault replaces the older
  EXPECT_EQ(after->ray.resources.at("GPU"), 2);
}

TEST(CudaPlugin, TopoPrintsWhatNvidiaSmiTopoShows) {
  testing::CommandResult r = testing::Run(
      {RAYACCEL_CLI, "topo", "--plugin", CudaPlugin(), "--no-host-topology", "--config",
       std::string("cuda.nvml_library=") + RAYACCEL_FAKE_NVML},
      {{"FAKE_NVML_FIXTURE", Fixture("fake-nvml/dgx1-v100.json")}, {"RAYACCEL_PLUGIN_PATH", ""}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The first rows of `nvidia-smi topo -m` on a DGX-1 with V100s.
  EXPECT_NE(r.out.find("GPU0  X     NV1   NV1   NV2   NV2   SYS   SYS   SYS"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("GPU1  NV1   X     NV2   NV1   SYS   NV2   SYS   SYS"), std::string::npos);
}

// Tier 2 on the fake NVML, and tier 3: its transport moves host memory over UCX.
TEST(CudaPlugin, ReachesTierThree) {
  testing::CommandResult r = testing::Run(
      {RAYACCEL_CONFORMANCE, CudaPlugin(), "--config",
       std::string("nvml_library=") + RAYACCEL_FAKE_NVML, "--tier", "2", "--timeout", "60"},
      {{"FAKE_NVML_FIXTURE", Fixture("fake-nvml/dgx-h100.json")}});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("Tier reached: 3 (transport)"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace rayaccel
