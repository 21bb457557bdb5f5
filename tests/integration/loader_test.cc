// The loader against real .so files: one correct C plugin and one built per defect
// (tests/conformance/bad_plugins/test_plugin.c). Each defect gets a clear per-plugin status; the
// host and the other plugins carry on.
#include <sys/stat.h>

#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "loader/plugin_loader.h"
#include "rayaccel/registry.h"
#include "support/test_support.h"

namespace rayaccel {
namespace {

using testing::Example;
using testing::SimPlugin;
using testing::StatusOf;
using testing::TestPlugin;

std::shared_ptr<const NodeSnapshot> Load(const std::vector<std::string>& plugins,
                                         RegistryOptions options = {}) {
  options.plugins = plugins;
  options.use_environment = false;
  options.host_topology = false;
  absl::StatusOr<std::unique_ptr<Registry>> registry = Registry::Create(options);
  EXPECT_TRUE(registry.ok()) << registry.status();
  return registry.ok() ? (*registry)->snapshot() : std::make_shared<NodeSnapshot>();
}

// Loads one plugin file alone and returns its status.
PluginStatus LoadFile(const std::string& path) {
  std::shared_ptr<const NodeSnapshot> snap = Load({path});
  EXPECT_EQ(snap->plugins.size(), 1u);
  return snap->plugins.empty() ? PluginStatus() : snap->plugins[0];
}

TEST(Loader, CorrectCPluginLoads) {
  std::shared_ptr<const NodeSnapshot> snap = Load({TestPlugin("testgpu")});
  const PluginStatus& p = StatusOf(*snap, "testgpu");
  EXPECT_EQ(p.state, PluginStatus::State::kActive) << p.message;
  EXPECT_EQ(p.abi_version, "1.6");
  EXPECT_EQ(p.vendor, "nvidia");
  EXPECT_EQ(p.resource_name, "GPU");
  ASSERT_EQ(snap->devices.size(), 2u);
  EXPECT_EQ(snap->devices[0].accelerator_type, "A100");  // derived by the host from the name
  EXPECT_EQ(snap->devices[0].numa_node, 0);
  ASSERT_EQ(snap->links.size(), 1u);
  EXPECT_EQ(snap->links[0].type, LinkType::kNvlink);
  EXPECT_EQ(snap->links[0].count, 12u);
  EXPECT_EQ(snap->links[0].source, "plugin:testgpu");
  EXPECT_EQ(snap->plugin_labels.at("example.com/rack"), "r12");
  EXPECT_EQ(snap->ray.resources.at("GPU"), 2);
  EXPECT_EQ(snap->ray.resources.at("accelerator_type:A100"), 1);
}

struct Refusal {
  const char* plugin;
  PluginStatus::State state;
  const char* message;
};

void PrintTo(const Refusal& r, std::ostream* os) { *os << r.plugin; }

class BadPlugin : public ::testing::TestWithParam<Refusal> {};

TEST_P(BadPlugin, GetsAClearStatus) {
  const Refusal& r = GetParam();
  PluginStatus p = LoadFile(TestPlugin(r.plugin));
  EXPECT_EQ(PluginStateName(p.state), std::string(PluginStateName(r.state))) << p.message;
  EXPECT_NE(p.message.find(r.message), std::string::npos)
      << "message was: " << p.message << "\nexpected to contain: " << r.message;
}

using State = PluginStatus::State;
INSTANTIATE_TEST_SUITE_P(
    Zoo, BadPlugin,
    ::testing::Values(
        Refusal{"no-entry", State::kRefused, "no entry symbol 'rayaccel_plugin_entry'"},
        Refusal{"wrong-major", State::kRefused, "incompatible ABI: plugin speaks 2.0"},
        Refusal{"table-major", State::kRefused, "table says ABI major 2"},
        Refusal{"small-table", State::kRefused, "smaller than the smallest 1.0 table"},
        Refusal{"null-discover", State::kRefused, "NULL mandatory hook: discover"},
        Refusal{"cap-without-hook", State::kRefused,
                "wait_health_events (RAYACCEL_CAP_HEALTH_EVENTS claimed)"},
        Refusal{"transport-null-hooks", State::kRefused,
                "RAYACCEL_CAP_TRANSPORT claimed, but transport hooks left NULL: close_endpoint, "
                "register_memory"},
        Refusal{"init-fails", State::kFailed, "initialize failed: vendor driver 1.2.3 is too old"},
        Refusal{"discover-fails", State::kFailed, "discover failed: NVML_ERROR_GPU_IS_LOST"},
        Refusal{"control-chars", State::kFailed,
                "discover failed: line one\\nline two \\x1b[31mred\\u009b2J"},
        Refusal{"non-utf8-property", State::kFailed, "vendor is not UTF-8"},
        Refusal{"bad-resource-name", State::kFailed, "is not a Ray resource name"},
        Refusal{"absurd-count", State::kFailed, "more than 4096 devices reported"},
        Refusal{"duplicate-id", State::kDegraded, "device 1: duplicate id \"GPU-test-0\""},
        Refusal{"non-utf8-name", State::kDegraded, "device 1: name is not UTF-8"},
        Refusal{"pass-back-refusal", State::kDegraded,
                "device 1: pci_bus_id \"zz\" is not of the form dddd:bb:dd.f"},
        Refusal{"bad-label", State::kDegraded, "label key \"bad key with spaces\""},
        Refusal{"link-out-of-range", State::kDegraded,
                "link 0-7: endpoint is not a reported device"},
        Refusal{"tiny-device-struct", State::kDegraded,
                "smaller than the smallest 1.0 device_info"}),
    [](const ::testing::TestParamInfo<Refusal>& info) {
      std::string name = info.param.plugin;
      for (char& c : name) c = c == '-' ? '_' : c;
      return name;
    });

// Every plugin's RAYACCEL_<PLUGIN>_<KEY> configuration is taken before any plugin code runs:
// a plugin that rewrites the environment in its initialize cannot change what the next one
// is given.
TEST(Loader, APluginCannotRewriteAnothersConfiguration) {
  setenv("RAYACCEL_SIM_SPEC", Example("dgx-h100.json").c_str(), 1);
  RegistryOptions options;
  options.plugins = {TestPlugin("rewrites-environment"), SimPlugin()};
  options.use_environment = true;  // what Load() turns off
  options.host_topology = false;
  absl::StatusOr<std::unique_ptr<Registry>> registry = Registry::Create(options);
  ASSERT_TRUE(registry.ok()) << registry.status();
  std::shared_ptr<const NodeSnapshot> snap = (*registry)->snapshot();
  const char* now = std::getenv("RAYACCEL_SIM_SPEC");
  EXPECT_STREQ(now, "/nonexistent/spec.json") << "the plugin did rewrite it";
  EXPECT_NE(StatusOf(*snap, "sim").state, PluginStatus::State::kFailed)
      << StatusOf(*snap, "sim").message;
  EXPECT_EQ(StatusOf(*snap, "sim").device_count, 8u)
      << "sim got the spec set before any plugin ran";
  unsetenv("RAYACCEL_SIM_SPEC");
}

// A plugin's text cannot clear the operator's screen or forge log lines: control characters
// arrive escaped in the table, in JSON, and in the log.
TEST(Loader, PluginTextReachesTheTerminalEscaped) {
  for (const char* mode : {"none", "process"}) {
    testing::CommandResult r =
        testing::Run({RAYACCEL_CLI, "plugins", "--plugin", TestPlugin("control-chars"),
                      "--isolation", mode, "--log-level", "info"});
    EXPECT_EQ(r.exit_code, 0) << mode;
    for (const std::string* text : {&r.out, &r.err}) {
      EXPECT_EQ(text->find('\x1b'), std::string::npos) << mode << ": " << *text;
      EXPECT_EQ(text->find('\r'), std::string::npos) << mode << ": " << *text;
      EXPECT_EQ(text->find("\xc2\x9b"), std::string::npos) << mode << ": " << *text;
    }
    EXPECT_NE(r.out.find("line one\\nline two \\x1b[31mred"), std::string::npos) << r.out;
    if (std::string(mode) == "none") {
      EXPECT_NE(r.err.find("\\x1b[2J\\r[error] plugin sim failed: forged\\n"), std::string::npos)
          << r.err;
    }
  }
}

// A health watch that answers OK at once while nothing changes does not become a rescan
// storm, in either mode: a rescan that shows nothing new doubles a pause, up to a second.
TEST(Loader, ABusyHealthWatchIsNotARescanStorm) {
  for (auto mode :
       {RegistryOptions::Isolation::kInProcess, RegistryOptions::Isolation::kChildProcess}) {
    RegistryOptions options;
    options.plugins = {TestPlugin("busy-health")};
    options.use_environment = false;
    options.host_topology = false;
    options.watch_health = true;
    options.isolation = mode;
    options.plugin_host = RAYACCEL_PLUGIN_HOST;
    absl::StatusOr<std::unique_ptr<Registry>> registry = Registry::Create(options);
    ASSERT_TRUE(registry.ok()) << registry.status();
    uint64_t first = (*registry)->stats().scans;
    std::this_thread::sleep_for(std::chrono::seconds(2));
    uint64_t rescans = (*registry)->stats().scans - first;
    EXPECT_EQ((*registry)->stats().changes, 1u) << "the first scan only: nothing changed";
    EXPECT_GE(rescans, 1u) << "the watch runs";
    EXPECT_LE(rescans, 20u) << "10, 20, 40 ... 1000 ms apart: about 8 in two seconds";
    EXPECT_EQ(StatusOf(*(*registry)->snapshot(), "busy-health").state,
              PluginStatus::State::kActive);
  }
}

// A health wait that never returns holds up nothing: queries and leases go on, the plugin
// stays active, and the registry (the agent, on SIGTERM) still stops.
TEST(Loader, AHungHealthWaitHoldsUpNothingWhenIsolated) {
  RegistryOptions options;
  options.plugins = {TestPlugin("hung-health")};
  options.use_environment = false;
  options.host_topology = false;
  options.watch_health = true;
  options.isolation = RegistryOptions::Isolation::kChildProcess;
  options.plugin_host = RAYACCEL_PLUGIN_HOST;
  options.call_timeout_ms = 1000;  // a wait on the request channel would be killed at this
  absl::StatusOr<std::unique_ptr<Registry>> registry = Registry::Create(options);
  ASSERT_TRUE(registry.ok()) << registry.status();
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::shared_ptr<const NodeSnapshot> s = (*registry)->Rescan();
    EXPECT_EQ(StatusOf(*s, "hung-health").state, PluginStatus::State::kActive)
        << StatusOf(*s, "hung-health").message;
    EXPECT_EQ(s->devices.size(), 2u);
    auto env = (*registry)->PrepareAllocation({"GPU-test-0"});
    EXPECT_TRUE(env.ok()) << env.status();
  }
  registry->reset();  // returns: the host's stuck thread is left to the host's exit
}

// The permission check follows the plugin's RUNPATH: a folder the loader would take libraries
// from, writable by anyone, is as dangerous as the plugin file being so.
// A copy of its own ($ORIGIN/deps), so that no other test sees the folder while it is open.
TEST(Loader, ARunpathFolderWritableByOthersIsRefused) {
  const std::string copy = testing::MakeTempDir("runpath-loader");
  const std::string plugin = copy + "/librayaccel-origin-runpath.so";
  testing::CopyFile(TestPlugin("origin-runpath"), plugin);
  const std::string dir = copy + "/deps";
  EXPECT_TRUE(CheckPermissions(plugin).ok()) << "missing, in a folder only its owner writes";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(chmod(dir.c_str(), 0777), 0);
  absl::Status st = CheckPermissions(plugin);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(st.message().find("loads libraries from " + dir + " (its RUNPATH/RPATH)"),
            std::string::npos)
      << st;
  EXPECT_NE(st.message().find("writable by everyone"), std::string::npos) << st;
  std::shared_ptr<const NodeSnapshot> snap = Load({plugin, SimPlugin()}, {});
  EXPECT_EQ(StatusOf(*snap, "origin-runpath").state, PluginStatus::State::kRefused);
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
  EXPECT_TRUE(CheckPermissions(plugin).ok());
  rmdir(dir.c_str());
}

// prepare_allocation may shape a worker's environment only for its devices: LD_PRELOAD next
// to CUDA_VISIBLE_DEVICES refuses the allocation, in either mode.
TEST(Loader, AnAllocationEnvironmentStaysInItsFamily) {
  for (auto mode :
       {RegistryOptions::Isolation::kInProcess, RegistryOptions::Isolation::kChildProcess}) {
    RegistryOptions options;
    options.plugins = {TestPlugin("sets-ld-preload")};
    options.use_environment = false;
    options.host_topology = false;
    options.isolation = mode;
    options.plugin_host = RAYACCEL_PLUGIN_HOST;
    absl::StatusOr<std::unique_ptr<Registry>> registry = Registry::Create(options);
    ASSERT_TRUE(registry.ok()) << registry.status();
    auto env = (*registry)->PrepareAllocation({"GPU-test-0"});
    EXPECT_EQ(env.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_NE(env.status().message().find("set LD_PRELOAD for an allocation; only variables of "
                                          "its visible-devices family (CUDA_*)"),
              std::string::npos)
        << env.status();
  }
}

TEST(Loader, AnExceptionEscapingAHookFailsOnlyThatPlugin) {
  RegistryOptions options;
  options.config["sim"]["spec"] = Example("tpu-v4-host.json");
  std::shared_ptr<const NodeSnapshot> snap = Load({TestPlugin("throws"), SimPlugin()}, options);
  const PluginStatus& p = StatusOf(*snap, "throws");
  EXPECT_EQ(p.state, PluginStatus::State::kFailed);
  EXPECT_NE(p.message.find("a C++ exception escaped the plugin: vendor library exploded"),
            std::string::npos)
      << p.message;
  EXPECT_EQ(snap->ray.resources.at("TPU"), 4);
}

TEST(Loader, DegradedPluginsKeepTheirGoodAnswers) {
  std::shared_ptr<const NodeSnapshot> snap = Load({TestPlugin("duplicate-id")});
  EXPECT_EQ(snap->devices.size(), 1u);
  EXPECT_EQ(snap->ray.resources.at("GPU"), 1);

  snap = Load({TestPlugin("bad-label")});
  EXPECT_EQ(snap->plugin_labels.at("example.com/rack"), "r12");
  EXPECT_EQ(snap->plugin_labels.count("ray.io/node-id"), 0u);
  EXPECT_NE(StatusOf(*snap, "bad-label").message.find("reserved for keys Ray defines"),
            std::string::npos);

  snap = Load({TestPlugin("pass-back-refusal")});  // stopped at the refusal: not a failure
  EXPECT_EQ(snap->devices.size(), 1u);

  snap = Load({TestPlugin("link-out-of-range")});
  EXPECT_EQ(snap->devices.size(), 2u);
  EXPECT_TRUE(snap->links.empty());

  snap = Load({TestPlugin("absurd-count")});
  EXPECT_TRUE(snap->devices.empty());  // a plugin that floods is distrusted entirely
}

TEST(Loader, OldAndNewStructSizesWork) {
  // A plugin whose rayaccel_device_info ends after pci_bus_id: the host reads what is there
  // and treats the rest as absent (NUMA unknown, health unknown).
  std::shared_ptr<const NodeSnapshot> snap = Load({TestPlugin("old-device-struct")});
  const PluginStatus& old_status = StatusOf(*snap, "old-device-struct");
  EXPECT_EQ(old_status.state, PluginStatus::State::kActive) << old_status.message;
  ASSERT_EQ(snap->devices.size(), 1u);
  const Device& d = snap->devices[0];
  EXPECT_EQ(d.id, "GPU-old-0");
  EXPECT_EQ(d.memory_bytes, 42949672960u);
  EXPECT_EQ(d.pci_bus_id, "0000:07:00.0");  // NVML's 8-digit domain, normalised
  EXPECT_EQ(d.numa_node, -1);
  EXPECT_EQ(d.health, Health::kUnknown);
  EXPECT_TRUE(d.driver_version.empty());
  EXPECT_EQ(d.accelerator_type, "A100");

  // A newer plugin's larger struct: the host reads the fields it knows.
  snap = Load({TestPlugin("new-device-struct")});
  ASSERT_EQ(snap->devices.size(), 1u);
  EXPECT_EQ(snap->devices[0].numa_node, 1);
  EXPECT_EQ(snap->devices[0].accelerator_type, "H200");

  // A plugin built for ABI 1.7 steps down to the host's 1.6.
  snap = Load({TestPlugin("newer-minor")});
  EXPECT_EQ(StatusOf(*snap, "newer-minor").state, PluginStatus::State::kActive);
  EXPECT_EQ(StatusOf(*snap, "newer-minor").abi_version, "1.6");
}

TEST(Loader, EveryBadPluginTogetherLeavesTheGoodOneIntact) {
  std::vector<std::string> plugins;
  for (const char* name : {"no-entry", "wrong-major", "table-major", "small-table", "null-discover",
                           "cap-without-hook", "init-fails", "discover-fails", "non-utf8-property",
                           "bad-resource-name", "absurd-count"}) {
    plugins.push_back(TestPlugin(name));
  }
  plugins.push_back(SimPlugin());
  RegistryOptions options;
  options.config["sim"]["spec"] = Example("tpu-v4-host.json");
  std::shared_ptr<const NodeSnapshot> snap = Load(plugins, options);
  EXPECT_EQ(snap->plugins.size(), plugins.size());
  EXPECT_EQ(StatusOf(*snap, "sim").state, PluginStatus::State::kActive);
  EXPECT_EQ(snap->devices.size(), 4u);
  EXPECT_EQ(snap->ray.resources.at("TPU"), 4);
}

TEST(Loader, RefusesFilesOthersCanWrite) {
  std::string dir = testing::MakeTempDir("perm");
  std::string path = dir + "/librayaccel-testgpu.so";
  testing::CopyFile(TestPlugin("testgpu"), path);
  EXPECT_EQ(LoadFile(path).state, PluginStatus::State::kActive);

  chmod(path.c_str(), 0757);
  PluginStatus p = LoadFile(path);
  EXPECT_EQ(p.state, PluginStatus::State::kRefused);
  EXPECT_NE(p.message.find("writable by everyone"), std::string::npos) << p.message;

  chmod(path.c_str(), 0755);
  chmod(dir.c_str(), 0777);
  p = LoadFile(path);
  EXPECT_EQ(p.state, PluginStatus::State::kRefused);
  EXPECT_NE(p.message.find(dir), std::string::npos) << p.message;

  // The check can be turned off (e.g. for a read-only, verified image).
  RegistryOptions lax;
  lax.check_permissions = false;
  EXPECT_EQ(StatusOf(*Load({path}, lax), "testgpu").state, PluginStatus::State::kActive);
  chmod(dir.c_str(), 0755);
}

TEST(Loader, MissingAndDuplicatePlugins) {
  PluginStatus p = LoadFile("/nonexistent/librayaccel-nope.so");
  EXPECT_EQ(p.state, PluginStatus::State::kRefused);
  EXPECT_NE(p.message.find("/nonexistent/librayaccel-nope.so"), std::string::npos) << p.message;

  RegistryOptions options;
  options.search_path = {std::string(RAYACCEL_TEST_PLUGIN_DIR)};
  std::shared_ptr<const NodeSnapshot> snap = Load({"nope"}, options);
  ASSERT_EQ(snap->plugins.size(), 1u);
  EXPECT_NE(snap->plugins[0].message.find("no librayaccel-nope.so in"), std::string::npos);

  std::string dir = testing::MakeTempDir("dup");
  testing::CopyFile(TestPlugin("testgpu"), dir + "/librayaccel-copy.so");
  snap = Load({TestPlugin("testgpu"), dir + "/librayaccel-copy.so"});
  ASSERT_EQ(snap->plugins.size(), 2u);
  EXPECT_EQ(snap->plugins[1].state, PluginStatus::State::kRefused);
  EXPECT_NE(snap->plugins[1].message.find("already loaded"), std::string::npos);
  EXPECT_EQ(snap->devices.size(), 2u);
}

TEST(Loader, SearchPathFindsEveryPluginOnce) {
  RegistryOptions options;
  options.search_path = {std::string(RAYACCEL_PLUGIN_DIR), std::string(RAYACCEL_PLUGIN_DIR)};
  std::shared_ptr<const NodeSnapshot> snap = Load({}, options);
  // Every in-tree plugin but the simulator, in name order, once: simulated devices only when
  // asked for.
  ASSERT_EQ(snap->plugins.size(), 7u);
  EXPECT_EQ(snap->plugins[0].name, "ascend");
  EXPECT_EQ(snap->plugins[1].name, "cuda");
  EXPECT_EQ(snap->plugins[2].name, "gaudi");
  EXPECT_EQ(snap->plugins[3].name, "intel_gpu");
  EXPECT_EQ(snap->plugins[4].name, "neuron");
  EXPECT_EQ(snap->plugins[5].name, "rocm");
  EXPECT_EQ(snap->plugins[6].name, "tpu");
  options.config["sim"]["spec"] = testing::Example("dgx-h100.json");  // asked for: there
  snap = Load({}, options);
  ASSERT_EQ(snap->plugins.size(), 8u);
  EXPECT_EQ(snap->plugins[6].name, "sim");
}

}  // namespace
}  // namespace rayaccel
