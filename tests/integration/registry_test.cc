// The registry through its public API, with the real sim plugin and real spec files.
#include "rayaccel/registry.h"

#include <cstdlib>
#include <fstream>
#include <thread>

#include "gtest/gtest.h"
#include "support/test_support.h"

namespace rayaccel {
namespace {

using testing::Example;
using testing::SimPlugin;
using testing::StatusOf;
using testing::TestPlugin;

std::unique_ptr<Registry> Make(std::vector<std::string> plugins, const std::string& spec) {
  RegistryOptions options;
  options.plugins = std::move(plugins);
  options.use_environment = false;
  options.host_topology = false;  // link counts below must not depend on this machine's PCI tree
  if (!spec.empty()) options.config["sim"]["spec"] = spec;
  absl::StatusOr<std::unique_ptr<Registry>> registry = Registry::Create(options);
  EXPECT_TRUE(registry.ok()) << registry.status();
  return registry.ok() ? *std::move(registry) : nullptr;
}

TEST(Registry, DgxH100) {
  std::unique_ptr<Registry> registry = Make({SimPlugin()}, Example("dgx-h100.json"));
  std::shared_ptr<const NodeSnapshot> snap = registry->snapshot();
  EXPECT_EQ(snap->generation, 1u);
  ASSERT_EQ(snap->devices.size(), 8u);
  EXPECT_EQ(snap->devices[0].accelerator_type, "H100");
  EXPECT_EQ(snap->devices[0].resource, "GPU");
  EXPECT_EQ(snap->devices[4].numa_node, 1);
  EXPECT_EQ(snap->links.size(), 28u);  // every pair, NV18
  for (const Link& l : snap->links) {
    EXPECT_EQ(l.type, LinkType::kNvlink);
    EXPECT_EQ(l.count, 18u);
  }
  EXPECT_EQ(snap->ray.resources,
            (std::map<std::string, double>{{"GPU", 8}, {"accelerator_type:H100", 1}}));
  EXPECT_EQ(snap->ray.labels.at("ray.io/accelerator-type"), "H100");
}

TEST(Registry, RescanSeesSpecChangesWithANewGeneration) {
  std::string dir = testing::MakeTempDir("rescan");
  std::string spec = dir + "/spec.json";
  auto write = [&](const char* health) {
    std::ofstream(spec)
        << R"({"devices": [{"uuid": "GPU-a", "name": "NVIDIA L4", "vendor": "nvidia"},
        {"uuid": "GPU-b", "name": "NVIDIA L4", "vendor": "nvidia", "health": ")"
        << health << R"(", "health_reason": "XID 79"}]})";
  };
  write("healthy");
  std::unique_ptr<Registry> registry = Make({SimPlugin()}, spec);
  EXPECT_EQ(registry->snapshot()->ray.resources.at("GPU"), 2);
  write("unhealthy");
  std::shared_ptr<const NodeSnapshot> before = registry->snapshot();
  std::shared_ptr<const NodeSnapshot> after = registry->Rescan();
  EXPECT_EQ(after->generation, before->generation + 1);
  EXPECT_EQ(after->ray.resources.at("GPU"), 1);
  EXPECT_EQ(after->devices[1].health, Health::kUnhealthy);
  EXPECT_EQ(after->devices[1].health_reason, "XID 79");
  EXPECT_EQ(before->ray.resources.at("GPU"), 2);  // snapshots are immutable values
  EXPECT_EQ(registry->snapshot(), after);

  // A spec broken on disk fails the plugin with the file and line, and a fix recovers it.
  std::ofstream(spec) << "{\"devices\": [\n  {\"uuid\": 1}]}";
  after = registry->Rescan();
  EXPECT_EQ(StatusOf(*after, "sim").state, PluginStatus::State::kFailed);
  EXPECT_NE(StatusOf(*after, "sim").message.find(spec + ":2:12: devices[0].uuid"),
            std::string::npos)
      << StatusOf(*after, "sim").message;
  EXPECT_TRUE(after->devices.empty());
  write("healthy");
  EXPECT_EQ(registry->Rescan()->ray.resources.at("GPU"), 2);
}

TEST(Registry, MalformedSpecAtStartFailsOnlyThatPlugin) {
  std::string dir = testing::MakeTempDir("badspec");
  std::string spec = dir + "/spec.json";
  std::ofstream(spec) << "{\"devices\": [}";
  std::unique_ptr<Registry> registry = Make({SimPlugin(), TestPlugin("testgpu")}, spec);
  std::shared_ptr<const NodeSnapshot> snap = registry->snapshot();
  EXPECT_EQ(StatusOf(*snap, "sim").state, PluginStatus::State::kFailed);
  EXPECT_NE(StatusOf(*snap, "sim").message.find(spec + ":1:14"), std::string::npos);
  EXPECT_EQ(StatusOf(*snap, "testgpu").state, PluginStatus::State::kActive);
  EXPECT_EQ(snap->ray.resources.at("GPU"), 2);
}

TEST(Registry, NoSpecMeansZeroDevicesNotAnError) {
  std::unique_ptr<Registry> registry = Make({SimPlugin()}, "");
  EXPECT_EQ(StatusOf(*registry->snapshot(), "sim").state, PluginStatus::State::kActive);
  EXPECT_EQ(StatusOf(*registry->snapshot(), "sim").message,
            "0 devices: no spec configured (set sim.spec or RAYACCEL_SIM_SPEC)");
  EXPECT_TRUE(registry->snapshot()->devices.empty());
  EXPECT_TRUE(registry->snapshot()->ray.resources.empty());
}

TEST(Registry, PluginsCannotClaimRaysOwnResourcesOrAbsurdBandwidth) {
  std::string dir = testing::MakeTempDir("reserved");
  std::string spec = dir + "/spec.json";
  std::ofstream(spec) << R"({"resource_name": "CPU", "devices": [{"uuid": "a", "name": "x"}]})";
  std::unique_ptr<Registry> cpu = Make({SimPlugin()}, spec);
  EXPECT_EQ(StatusOf(*cpu->snapshot(), "sim").state, PluginStatus::State::kFailed);
  EXPECT_NE(StatusOf(*cpu->snapshot(), "sim").message.find("one of Ray's own resources"),
            std::string::npos);
  EXPECT_EQ(cpu->snapshot()->ray.resources.count("CPU"), 0u);

  std::ofstream(spec) << R"({"devices": [{"uuid": "a", "name": "NVIDIA L4"},
      {"uuid": "b", "name": "NVIDIA L4"}],
      "links": [{"a": 0, "b": 1, "type": "nvlink", "bandwidth_mbps": 10000000000000000}]})";
  std::unique_ptr<Registry> fast = Make({SimPlugin()}, spec);
  const PluginStatus& status = StatusOf(*fast->snapshot(), "sim");
  EXPECT_EQ(status.state, PluginStatus::State::kDegraded);
  EXPECT_NE(status.message.find("MB/s is absurd"), std::string::npos) << status.message;
  EXPECT_TRUE(fast->snapshot()->links.empty());
  EXPECT_EQ(fast->snapshot()->devices.size(), 2u);
}

TEST(Registry, QuantityValidationComesFromThePlugin) {
  std::unique_ptr<Registry> registry = Make({SimPlugin()}, Example("tpu-v4-host.json"));
  EXPECT_TRUE(registry->ValidateQuantity("TPU", 4).ok());
  absl::Status st = registry->ValidateQuantity("TPU", 3);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("must be one of 1, 2, 4, 8; got 3"), absl::string_view::npos) << st;
  EXPECT_EQ(registry->ValidateQuantity("GPU", 1).code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(registry->ValidateQuantity("TPU", 0).ok());
}

TEST(Registry, PrepareAllocation) {
  std::unique_ptr<Registry> registry = Make({SimPlugin()}, Example("dgx-h100.json"));
  auto env = registry->PrepareAllocation({"0", "GPU-5d1c8c3e-6b0e-4a51-9f0e-0000000a0003"});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(*env, (std::map<std::string, std::string>{{"CUDA_VISIBLE_DEVICES", "0,3"}}));
  EXPECT_EQ(registry->PrepareAllocation({"9"}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(registry->PrepareAllocation({"1", "1"}).ok());
  EXPECT_FALSE(registry->PrepareAllocation({}).ok());

  // A plugin without the hook gets its visible-devices variable set to the indices.
  std::unique_ptr<Registry> plain = Make({TestPlugin("testgpu")}, "");
  env = plain->PrepareAllocation({"1"});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->at("CUDA_VISIBLE_DEVICES"), "1");
}

TEST(Registry, TwoPluginsClaimingGpuFirstWins) {
  std::unique_ptr<Registry> registry =
      Make({TestPlugin("testgpu"), SimPlugin()}, Example("dgx-h100.json"));
  std::shared_ptr<const NodeSnapshot> snap = registry->snapshot();
  EXPECT_EQ(snap->devices.size(), 10u);  // all listed
  EXPECT_EQ(snap->ray.resources.at("GPU"), 2);
  EXPECT_EQ(StatusOf(*snap, "sim").state, PluginStatus::State::kDegraded);
  EXPECT_NE(StatusOf(*snap, "sim").message.find("already provided by plugin testgpu"),
            std::string::npos);
}

// Readers, rescans and allocations from several threads at once (run under TSan by `make
// tsan`): every snapshot a reader sees is whole, and generations only grow.
TEST(Registry, ConcurrentReadersRescansAndAllocations) {
  std::unique_ptr<Registry> registry = Make({SimPlugin()}, Example("dgx-h100.json"));
  constexpr int kRounds = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) registry->Rescan();
    });
  }
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      uint64_t last = 0;
      for (int i = 0; i < kRounds; ++i) {
        std::shared_ptr<const NodeSnapshot> snap = registry->snapshot();
        EXPECT_GE(snap->generation, last);
        last = snap->generation;
        EXPECT_EQ(snap->devices.size(), 8u);
        EXPECT_EQ(snap->ray.resources.at("GPU"), 8);
        EXPECT_TRUE(registry->PrepareAllocation({"2"}).ok());
        EXPECT_TRUE(registry->ValidateQuantity("GPU", 2).ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(registry->snapshot()->generation, 1u + 2 * kRounds);
}

TEST(Registry, ConfigPrecedenceExplicitThenEnvironmentThenFile) {
  std::string dir = testing::MakeTempDir("precedence");
  std::string file = dir + "/rayaccel.conf";
  std::ofstream(file) << "sim.spec = " << Example("dgx1-v100.json") << "\n";
  RegistryOptions options;
  options.plugins = {SimPlugin()};
  options.config_file = file;
  auto type = [&] {
    auto registry = Registry::Create(options);
    EXPECT_TRUE(registry.ok()) << registry.status();
    return (*registry)->snapshot()->ray.labels.at("ray.io/accelerator-type");
  };
  EXPECT_EQ(type(), "V100");
  setenv("RAYACCEL_SIM_SPEC", Example("tpu-v4-host.json").c_str(), 1);
  EXPECT_EQ(type(), "TPU-V4");
  options.config["sim"]["spec"] = Example("dgx-h100.json");
  EXPECT_EQ(type(), "H100");
  unsetenv("RAYACCEL_SIM_SPEC");

  options.config_file = dir + "/missing.conf";
  EXPECT_FALSE(Registry::Create(options).ok());
}

}  // namespace
}  // namespace rayaccel
