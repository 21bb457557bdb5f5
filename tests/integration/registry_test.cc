// The registry through its public API, with the real sim plugin and real spec files.
#include "rayaccel/registry.h"

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <mutex>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
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

// A generation is a change: a rescan that finds the node as it was keeps the snapshot, its
// generation, and every lease made against it; waiters are not woken for nothing.
TEST(Registry, ANewGenerationOnlyForAChange) {
  std::unique_ptr<Registry> registry = Make({SimPlugin()}, Example("dgx-h100.json"));
  std::shared_ptr<const NodeSnapshot> first = registry->snapshot();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(registry->Rescan(), first);
  EXPECT_EQ(registry->snapshot()->generation, first->generation);
  EXPECT_TRUE(registry->PrepareAllocation({first->devices[2].id}, first->generation).ok());
  auto woken = std::chrono::steady_clock::now();
  registry->WaitForNewer(first->generation, std::chrono::milliseconds(100));
  EXPECT_GE(std::chrono::steady_clock::now() - woken, std::chrono::milliseconds(90));

  // With hwloc's view, loaded by the first scan that finds a PCI device, the second scan is
  // no change either.
  RegistryOptions options;
  options.plugins = {SimPlugin()};
  options.use_environment = false;
  options.config["sim"]["spec"] = testing::Fixture("specs/dgx2-v100.json");
  options.hwloc_xml = testing::Fixture("hwloc/nvidiaDGX2.xml");
  auto with_hwloc = Registry::Create(options);
  ASSERT_TRUE(with_hwloc.ok());
  const uint64_t generation = (*with_hwloc)->snapshot()->generation;
  EXPECT_NE((*with_hwloc)->snapshot()->host_topology.find("hwloc"), std::string::npos);
  EXPECT_EQ((*with_hwloc)->Rescan()->generation, generation);
  EXPECT_EQ((*with_hwloc)->Rescan()->generation, generation);
}

// A lease names devices: against an older snapshot it holds while those devices are still
// there and healthy (another device's change does not stale it); positions need the snapshot
// they came from.
TEST(Registry, AStaleLeaseIsJudgedByTheDevicesItNames) {
  std::string dir = testing::MakeTempDir("lease");
  std::string spec = dir + "/spec.json";
  auto write = [&](const char* health_b) {
    std::ofstream(spec) << R"({"visible_devices_env": "CUDA_VISIBLE_DEVICES", "devices": [
        {"uuid": "GPU-a", "name": "NVIDIA L4"},
        {"uuid": "GPU-b", "name": "NVIDIA L4", "health": ")"
                        << health_b << R"(", "health_reason": "XID 79"},
        {"uuid": "GPU-c", "name": "NVIDIA L4"}]})";
  };
  write("healthy");
  std::unique_ptr<Registry> registry = Make({SimPlugin()}, spec);
  const uint64_t old = registry->snapshot()->generation;
  write("unhealthy");
  ASSERT_GT(registry->Rescan()->generation, old);
  auto env = registry->PrepareAllocation({"GPU-a", "GPU-c"}, old);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->at("CUDA_VISIBLE_DEVICES"), "0,2");
  absl::StatusOr<std::map<std::string, std::string>> sick =
      registry->PrepareAllocation({"GPU-a", "GPU-b"}, old);
  EXPECT_EQ(sick.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(sick.status().message().find("GPU-b is unhealthy now"), std::string::npos)
      << sick.status();
  EXPECT_EQ(registry->PrepareAllocationAt({0, 2}, old).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(registry->PrepareAllocationAt({0, 2}, registry->snapshot()->generation).ok());
  EXPECT_EQ(registry->PrepareAllocation({"GPU-gone"}, old).status().code(),
            absl::StatusCode::kFailedPrecondition);  // named in an older snapshot: stale
  EXPECT_EQ(registry->PrepareAllocation({"GPU-gone"}).status().code(), absl::StatusCode::kNotFound);
}

// Ids and positions are different things: an id that reads like a number is an id.
TEST(Registry, IdsAreNeverTakenForPositions) {
  std::string dir = testing::MakeTempDir("numeric-ids");
  std::string spec = dir + "/spec.json";
  std::ofstream(spec) << R"({"visible_devices_env": "CUDA_VISIBLE_DEVICES",
      "devices": [{"uuid": "3", "name": "NVIDIA L4"},
      {"uuid": "2", "name": "NVIDIA L4"}, {"uuid": "1", "name": "NVIDIA L4"},
      {"uuid": "0", "name": "NVIDIA L4"}]})";
  std::unique_ptr<Registry> registry = Make({SimPlugin()}, spec);
  absl::StatusOr<Allocation> a = registry->PreferredAllocation({"0"}, {}, 1);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->devices.size(), 1u);
  EXPECT_EQ(a->device_ids[0], "0");
  EXPECT_EQ(a->devices[0], 3u);  // the device whose id is "0" sits at position 3
  auto env = registry->PrepareAllocation({"0"});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->at("CUDA_VISIBLE_DEVICES"), "3");
  auto at = registry->PrepareAllocationAt({0}, registry->snapshot()->generation);
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_EQ(at->at("CUDA_VISIBLE_DEVICES"), "0");
}

// The library logs through the embedder's callback at its level: never stdout, never spdlog's
// default logger (the embedder's own), plugin lines included.
TEST(Registry, LogsGoWhereTheEmbedderSays) {
  std::ostringstream theirs_saw;
  auto theirs = std::make_shared<spdlog::logger>(
      "embedder", std::make_shared<spdlog::sinks::ostream_sink_mt>(theirs_saw));
  theirs->set_level(spdlog::level::trace);
  std::shared_ptr<spdlog::logger> before = spdlog::default_logger();
  spdlog::set_default_logger(theirs);
  fflush(stdout);
  int saved_stdout = dup(1);
  FILE* captured = tmpfile();
  dup2(fileno(captured), 1);

  std::vector<std::pair<LogLevel, std::string>> lines;
  std::mutex mu;
  RegistryOptions options;
  options.plugins = {SimPlugin(), "/nonexistent/librayaccel-gone.so"};
  options.use_environment = false;
  options.host_topology = false;
  options.log_level = LogLevel::kInfo;
  options.log_callback = [&](LogLevel level, const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    lines.emplace_back(level, line);
  };
  auto registry = Registry::Create(options);
  ASSERT_TRUE(registry.ok());
  registry->reset();

  fflush(stdout);
  dup2(saved_stdout, 1);
  close(saved_stdout);
  EXPECT_EQ(ftell(captured), 0) << "the library wrote to stdout";
  fclose(captured);
  spdlog::set_default_logger(before);
  EXPECT_EQ(theirs_saw.str(), "") << "the library logged through the default logger";
  bool plugin_line = false, refusal = false;
  for (const auto& [level, line] : lines) {
    plugin_line |= level == LogLevel::kInfo &&
                   line.find("[plugin sim] 0 devices: no spec configured") != std::string::npos;
    refusal |= level == LogLevel::kWarning && line.find("librayaccel-gone.so") != std::string::npos;
  }
  EXPECT_TRUE(plugin_line);
  EXPECT_TRUE(refusal);

  // A quieter level: the info lines stop.
  lines.clear();
  options.log_level = LogLevel::kError;
  ASSERT_TRUE(Registry::Create(options).ok());
  for (const auto& [level, line] : lines) EXPECT_GE(level, LogLevel::kError) << line;
}

// Shutdown wakes every waiter, and destroying the registry while threads wait in WaitForNewer
// is safe (run under ASan by `make asan`).
TEST(Registry, DestroyingWithWaitersIsSafe) {
  std::unique_ptr<Registry> registry = Make({SimPlugin()}, Example("dgx-h100.json"));
  const uint64_t generation = registry->snapshot()->generation;
  std::atomic<int> returned{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 4; ++i) {
    waiters.emplace_back([&, r = registry.get()] {
      std::shared_ptr<const NodeSnapshot> s = r->WaitForNewer(generation, std::chrono::hours(1));
      EXPECT_EQ(s->generation, generation);  // woken by the shutdown, not a change
      ++returned;
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // all four inside the wait
  auto started = std::chrono::steady_clock::now();
  registry.reset();  // returns once all four have left WaitForNewer
  for (std::thread& t : waiters) t.join();
  EXPECT_EQ(returned, 4);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
}

// Subscribers get the current snapshot, then each change, on the registry's thread; they may
// call the registry from the callback, and stop getting calls when the handle goes.
TEST(Registry, SubscribersSeeEachChange) {
  std::string dir = testing::MakeTempDir("subscribe");
  std::string spec = dir + "/spec.json";
  auto write = [&](int n) {
    std::ofstream out(spec);
    out << R"({"devices": [)";
    for (int i = 0; i < n; ++i) {
      out << (i ? "," : "") << R"({"uuid": "GPU-)" << i << R"(", "name": "NVIDIA L4"})";
    }
    out << "]}";
  };
  write(1);
  std::unique_ptr<Registry> registry = Make({SimPlugin()}, spec);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<size_t> seen;
  std::unique_ptr<Registry::Subscription> sub =
      registry->Subscribe([&](std::shared_ptr<const NodeSnapshot> s) {
        // A lease from inside the callback: the registry holds no lock while calling.
        EXPECT_TRUE(registry->PrepareAllocation({s->devices[0].id}).ok());
        std::lock_guard<std::mutex> lock(mu);
        seen.push_back(s->devices.size());
        cv.notify_all();
      });
  auto wait_for = [&](size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(5), [&] { return seen.size() >= n; });
  };
  ASSERT_TRUE(wait_for(1));
  write(2);
  registry->Rescan();
  registry->Rescan();  // nothing new: no call
  ASSERT_TRUE(wait_for(2));
  sub.reset();
  write(3);
  registry->Rescan();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(seen, (std::vector<size_t>{1, 2}));
}

// A subscription may end from within its own callback, and may outlive the registry.
TEST(Registry, SubscriptionsEndFromAnywhere) {
  std::unique_ptr<Registry> registry = Make({SimPlugin()}, Example("dgx-h100.json"));
  std::unique_ptr<Registry::Subscription> self;
  std::atomic<int> calls{0};
  std::mutex mu;
  {
    std::lock_guard<std::mutex> lock(mu);
    self = registry->Subscribe([&](std::shared_ptr<const NodeSnapshot>) {
      std::lock_guard<std::mutex> lock(mu);
      ++calls;
      self.reset();
    });
  }
  for (int i = 0; i < 100 && calls == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(calls, 1);
  // A later subscriber gets its first snapshot too, though nothing changes.
  std::atomic<int> later{0};
  std::unique_ptr<Registry::Subscription> outliving =
      registry->Subscribe([&](std::shared_ptr<const NodeSnapshot>) { ++later; });
  for (int i = 0; i < 500 && later == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(later, 1);
  registry.reset();
  outliving.reset();  // after the registry: nothing to do, and no crash

  // A callback may let go of the registry itself.
  std::unique_ptr<Registry> doomed = Make({SimPlugin()}, Example("dgx-h100.json"));
  std::atomic<bool> released{false};
  std::unique_ptr<Registry::Subscription> last =
      doomed->Subscribe([&](std::shared_ptr<const NodeSnapshot>) {
        doomed.reset();
        released = true;
      });
  for (int i = 0; i < 500 && !released; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(released);
  last.reset();
  // Subscribing after Shutdown delivers nothing, and ending that subscription does not wait.
  std::unique_ptr<Registry> stopped = Make({SimPlugin()}, Example("dgx-h100.json"));
  stopped->Shutdown();
  auto none = stopped->Subscribe([](std::shared_ptr<const NodeSnapshot>) { FAIL(); });
  none.reset();
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

// Why a plugin found nothing, through the sink (1.6) and not a log line: its message, in
// process and isolated alike, escaped as the log is.
TEST(Registry, APluginSaysWhyItFoundNothingThroughTheSink) {
  for (auto isolation :
       {RegistryOptions::Isolation::kInProcess, RegistryOptions::Isolation::kChildProcess}) {
    RegistryOptions options;
    options.plugins = {TestPlugin("finds-nothing"), TestPlugin("finds-nothing-silently")};
    options.use_environment = false;
    options.host_topology = false;
    options.isolation = isolation;
    options.plugin_host = RAYACCEL_PLUGIN_HOST;
    absl::StatusOr<std::unique_ptr<Registry>> registry = Registry::Create(options);
    ASSERT_TRUE(registry.ok()) << registry.status();
    std::shared_ptr<const NodeSnapshot> snap = (*registry)->snapshot();
    const PluginStatus& told = StatusOf(*snap, "finds-nothing");
    EXPECT_EQ(told.state, PluginStatus::State::kActive);
    EXPECT_EQ(told.message, "0 devices: no /dev/acme* node \\x1b[2J(driver not loaded)");
    EXPECT_EQ(StatusOf(*snap, "finds-nothing-silently").message, "");
    // A rescan keeps it (and adds nothing else).
    EXPECT_EQ(StatusOf(*(*registry)->Rescan(), "finds-nothing").message, told.message);
  }
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
  const uint64_t generation = registry->snapshot()->generation;
  auto env = registry->PrepareAllocation(
      {registry->snapshot()->devices[0].id, "GPU-5d1c8c3e-6b0e-4a51-9f0e-0000000a0003"});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(*env, (std::map<std::string, std::string>{{"CUDA_VISIBLE_DEVICES", "0,3"}}));
  EXPECT_EQ(registry->PrepareAllocation({"9"}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(registry
                   ->PrepareAllocation({"GPU-5d1c8c3e-6b0e-4a51-9f0e-0000000a0003",
                                        "GPU-5d1c8c3e-6b0e-4a51-9f0e-0000000a0003"})
                   .ok());
  EXPECT_FALSE(registry->PrepareAllocation({}).ok());
  EXPECT_EQ(registry->PrepareAllocationAt({0, 3}, generation)->at("CUDA_VISIBLE_DEVICES"), "0,3");
  EXPECT_EQ(registry->PrepareAllocationAt({9}, generation).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(registry->PrepareAllocationAt({1, 1}, generation).ok());

  // A plugin without the hook gets its visible-devices variable set to the indices.
  std::unique_ptr<Registry> plain = Make({TestPlugin("testgpu")}, "");
  env = plain->PrepareAllocationAt({1}, plain->snapshot()->generation);
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
        EXPECT_TRUE(registry->PrepareAllocation({snap->devices[2].id}).ok());
        EXPECT_TRUE(registry->ValidateQuantity("GPU", 2).ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(registry->snapshot()->generation, 1u);  // nothing changed
}

// Each plugin has its own lock: while a scan is stuck in one plugin's discover (in-process,
// where nothing can end it), leases on another plugin's devices go ahead.
TEST(Registry, APluginStuckInAScanHoldsUpNoLeaseOnAnother) {
  std::string dir = testing::MakeTempDir("stuck-scan");
  const std::string marker = dir + "/hold";
  RegistryOptions options;
  options.plugins = {TestPlugin("hangs-while-marker"), SimPlugin()};
  options.use_environment = false;
  options.host_topology = false;
  options.config["sim"]["spec"] = Example("tpu-v4-host.json");
  options.config["hangs-while-marker"]["marker"] = marker;
  absl::StatusOr<std::unique_ptr<Registry>> created = Registry::Create(options);
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<Registry> registry = *std::move(created);
  std::shared_ptr<const NodeSnapshot> snap = registry->snapshot();
  ASSERT_EQ(snap->ray.resources.at("TPU"), 4);
  ASSERT_EQ(snap->ray.resources.at("GPU"), 2);

  std::ofstream(marker) << "hold\n";
  std::thread scan([&] { registry->Rescan(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the scan is in the plugin
  // The lease path on the sim plugin's TPUs, on a thread so that a regression fails the test
  // rather than hanging it.
  std::promise<bool> done;
  std::thread lease([&] {
    absl::StatusOr<Allocation> a = registry->PreferredAllocation({}, {}, 2, "TPU");
    bool ok = a.ok() && a->device_ids.size() == 2;
    ok = ok && registry->ValidateQuantity("TPU", 2).ok();
    ok = ok && registry->PrepareAllocation(a->device_ids, a->generation).ok();
    // The stuck plugin's own family: it has no validate_quantity hook, so choosing calls it not.
    absl::StatusOr<Allocation> gpu = registry->PreferredAllocation({}, {}, 1, "GPU");
    ok = ok && gpu.ok() && gpu->device_ids.size() == 1;
    ok = ok && registry->snapshot()->generation == snap->generation;
    done.set_value(ok);
  });
  std::future<bool> leased = done.get_future();
  const bool in_time = leased.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  EXPECT_TRUE(in_time) << "a lease on the sim plugin waited for the stuck plugin";
  std::remove(marker.c_str());  // lets the stuck discover return
  scan.join();
  lease.join();
  EXPECT_TRUE(leased.get());
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

namespace rayaccel {
namespace {

// get_telemetry (1.6) through the registry: every device of a plugin with the hook, named by
// the snapshot's ids, in process and isolated alike; a plugin without the hook is not asked.
TEST(Telemetry, SamplesEveryDeviceInProcessAndIsolated) {
  for (auto isolation :
       {RegistryOptions::Isolation::kInProcess, RegistryOptions::Isolation::kChildProcess}) {
    RegistryOptions options;
    options.plugins = {testing::SimPlugin(), testing::TestPlugin("testgpu")};
    options.config["sim"]["spec"] = testing::Example("dgx-h100.json");
    options.use_environment = false;
    options.host_topology = false;
    options.isolation = isolation;
    options.plugin_host = RAYACCEL_PLUGIN_HOST;
    absl::StatusOr<std::unique_ptr<Registry>> registry = Registry::Create(options);
    ASSERT_TRUE(registry.ok()) << registry.status();
    std::shared_ptr<const NodeSnapshot> snap = (*registry)->snapshot();
    Telemetry t = (*registry)->SampleTelemetry();
    ASSERT_EQ(t.plugins.size(), 1u);
    EXPECT_EQ(t.plugins[0].plugin, "sim");
    EXPECT_EQ(t.plugins[0].error, "");
    EXPECT_EQ(t.plugins[0].unknown.at(RAYACCEL_SAMPLE_LINK_ERRORS),
              "a sim spec has no link error counters");
    ASSERT_EQ(t.devices.size(), 8u);
    for (size_t i = 0; i < t.devices.size(); ++i) {
      const DeviceSample& s = t.devices[i];
      const Device& d = snap->devices[i];
      EXPECT_EQ(s.device_id, d.id);
      EXPECT_EQ(s.plugin, "sim");
      EXPECT_NE(s.known & RAYACCEL_SAMPLE_UTILIZATION, 0u);
      EXPECT_LE(s.utilization_percent, 100u);
      EXPECT_EQ(s.memory_total_bytes, d.memory_bytes);
      EXPECT_LE(s.memory_used_bytes, s.memory_total_bytes);
      EXPECT_EQ(s.known & RAYACCEL_SAMPLE_LINK_ERRORS, 0u);
    }
    EXPECT_GT(t.unix_ms, 0);
  }
}

// A plugin that lies in its samples loses those samples, with the reason; one whose driver
// read hangs is timed out and killed (isolated); neither costs the others theirs.
TEST(Telemetry, ALyingOrHungPluginCostsOnlyItself) {
  RegistryOptions options;
  options.plugins = {testing::SimPlugin(), testing::TestPlugin("telemetry-lies"),
                     testing::TestPlugin("telemetry-hangs")};
  options.config["sim"]["spec"] = testing::Example("dgx-h100.json");
  options.use_environment = false;
  options.host_topology = false;
  options.isolation = RegistryOptions::Isolation::kChildProcess;
  options.plugin_host = RAYACCEL_PLUGIN_HOST;
  options.call_timeout_ms = 1000;
  absl::StatusOr<std::unique_ptr<Registry>> registry = Registry::Create(options);
  ASSERT_TRUE(registry.ok()) << registry.status();
  Telemetry t = (*registry)->SampleTelemetry();
  std::map<std::string, const PluginTelemetry*> by_name;
  for (const PluginTelemetry& p : t.plugins) by_name[p.plugin] = &p;
  ASSERT_EQ(by_name.size(), 3u);
  EXPECT_EQ(by_name["sim"]->error, "");
  const PluginTelemetry& lies = *by_name["telemetry-lies"];
  EXPECT_EQ(lies.error, "");
  ASSERT_EQ(lies.problems.size(), 3u);
  EXPECT_NE(lies.problems[0].find("utilization 140% is over 100"), std::string::npos);
  EXPECT_NE(lies.problems[1].find("not a device of the last discover"), std::string::npos);
  EXPECT_NE(lies.problems[2].find("a second one"), std::string::npos);
  const PluginTelemetry& hangs = *by_name["telemetry-hangs"];
  EXPECT_NE(hangs.error, "");
  EXPECT_LT(hangs.seconds, 5.0);
  std::map<std::string, int> samples;
  for (const DeviceSample& s : t.devices) ++samples[s.plugin];
  EXPECT_EQ(samples["sim"], 8);
  EXPECT_EQ(samples["telemetry-lies"], 1);  // device 0, once
  EXPECT_EQ(samples.count("telemetry-hangs"), 0u);
}

}  // namespace
}  // namespace rayaccel
