// The conformance suite as vendors run it: the real binary on real plugin files. Each broken
// plugin of the zoo fails the check that names its defect, and the suite itself never crashes
// or hangs; the in-tree plugins reach their tiers.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <future>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rayaccel/plugin.h"
#include "rayaccel/registry.h"
#include "support/test_support.h"
#include "util/json.h"

namespace rayaccel {
namespace {

using testing::Fixture;
using testing::TestPlugin;

struct Report {
  int exit_code = -1;
  int tier = -1;
  std::map<std::string, std::pair<std::string, std::string>> checks;  // name -> status, message
};

Report Conform(const std::string& plugin, std::vector<std::string> extra = {},
               const std::map<std::string, std::string>& env = {}) {
  std::vector<std::string> args = {RAYACCEL_CONFORMANCE, "--json"};
  if (!plugin.empty()) args.push_back(plugin);
  args.insert(args.end(), extra.begin(), extra.end());
  testing::CommandResult r = testing::Run(args, env);
  Report report;
  report.exit_code = r.exit_code;
  json::ParseError error;
  std::optional<json::Value> doc = json::Parse(r.out, &error);
  EXPECT_TRUE(doc) << error.message << "\n" << r.out << "\n" << r.err;
  if (!doc) return report;
  report.tier = static_cast<int>(*doc->Find("tier")->as_int64());
  for (const json::Value& c : doc->Find("checks")->array()) {
    report.checks[c.Find("name")->string()] = {c.Find("status")->string(),
                                               c.Find("message")->string()};
  }
  return report;
}

TEST(Conformance, InTreePluginsReachTheirTiers) {
  std::string plugins = RAYACCEL_PLUGIN_DIR;
  // Every run at once, each in a process of its own: most of their time is waiting.
  auto run = [](std::string plugin, std::vector<std::string> extra,
                std::map<std::string, std::string> env = {}) {
    return std::async(std::launch::async, Conform, plugin, extra, env);
  };
  // Generous timeouts: under sanitizers the leak check's 40 cycles take a while.
  auto sim_run = run(
      plugins + "/librayaccel-sim.so",
      {"--config", "spec=" + testing::Example("dgx-h100.json"), "--tier", "2", "--timeout", "60"});
  auto rocm_run =
      run(plugins + "/librayaccel-rocm.so",
          {"--config", "rocm.kfd_topology_dir=" + Fixture("rocm-kfd/topo-mi300-cpx/topology"),
           "--tier", "2", "--timeout", "60"});
  auto c_run = run(TestPlugin("testgpu"), {"--timeout", "3"});
  auto t3_run = run(
      plugins + "/librayaccel-sim.so",
      {"--config", "spec=" + testing::Example("dgx-h100.json"), "--tier", "3", "--timeout", "60"});
  // The CUDA plugin's device memory on the fake NVML and the fake CUDA driver.
  auto cuda_run =
      run(plugins + "/librayaccel-cuda.so",
          {"--config", std::string("nvml_library=") + RAYACCEL_FAKE_NVML, "--config",
           std::string("cuda_library=") + RAYACCEL_FAKE_CUDA, "--tier", "3", "--timeout", "60"},
          {{"FAKE_NVML_FIXTURE", Fixture("fake-nvml/dgx-h100.json")}});
  // The ROCm plugin's, on a KFD capture and the fake HIP runtime.
  auto amd_run =
      run(plugins + "/librayaccel-rocm.so",
          {"--config", "kfd_topology_dir=" + Fixture("rocm-kfd/topo-mi210-xgmi-pcie"), "--config",
           std::string("hip_library=") + RAYACCEL_FAKE_HIP, "--tier", "3", "--timeout", "60"},
          {{"FAKE_HIP_FIXTURE", Fixture("fake-hip/mi210-xgmi-pcie.json")}});
  // A plugin without a transport stops at tier 2, and asking for tier 3 fails.
  auto no_transport_run = run(TestPlugin("testgpu"), {"--tier", "3", "--timeout", "3"});

  Report sim = sim_run.get();
  EXPECT_EQ(sim.exit_code, 0);
  EXPECT_EQ(sim.tier, 3);  // its UCX transport passes the round trip
  Report rocm = rocm_run.get();
  EXPECT_EQ(rocm.tier, 3);  // host memory over the same UCX helper
  EXPECT_EQ(rocm.checks["allocation.env_names_the_set"].first, "pass");
  Report c = c_run.get();
  EXPECT_EQ(c.tier, 2);  // plain C, no allocation hook: the host's default covers it
  // The sim plugin's UCX transport reaches tier 3: the round trip runs between two processes.
  Report t3 = t3_run.get();
  EXPECT_EQ(t3.exit_code, 0);
  EXPECT_EQ(t3.tier, 3);
  EXPECT_EQ(t3.checks["transport.round_trip"].first, "pass")
      << t3.checks["transport.round_trip"].second;
  // Sim devices have no memory: device_memory is skipped, with the reason.
  EXPECT_EQ(t3.checks["transport.device_memory"].first, "skip");
  EXPECT_NE(t3.checks["transport.device_memory"].second.find("no device memory"),
            std::string::npos);
  EXPECT_EQ(t3.checks["transport.device_two_process"].first, "skip");
  Report cuda = cuda_run.get();
  EXPECT_EQ(cuda.exit_code, 0);
  EXPECT_EQ(cuda.tier, 3);
  EXPECT_EQ(cuda.checks["transport.device_memory"].first, "pass")
      << cuda.checks["transport.device_memory"].second;
  // Between two processes of one host: whole allocations, so mapped and copied device to device.
  const auto& between = cuda.checks["transport.device_two_process"];
  EXPECT_EQ(between.first, "pass") << between.second;
  EXPECT_NE(between.second.find("device to device device-ipc"), std::string::npos)
      << between.second;
  EXPECT_NE(between.second.find("then STALE"), std::string::npos) << between.second;
  Report amd = amd_run.get();
  EXPECT_EQ(amd.tier, 3);
  EXPECT_EQ(amd.checks["transport.device_memory"].first, "pass")
      << amd.checks["transport.device_memory"].second;
  EXPECT_EQ(amd.checks["transport.device_two_process"].first, "pass")
      << amd.checks["transport.device_two_process"].second;
  Report no_transport = no_transport_run.get();
  EXPECT_EQ(no_transport.exit_code, 1);
}

// The suite runs on GoogleTest, but a test runner's GoogleTest environment (sharding, a filter,
// Bazel's filter and output) is not the suite's: every check runs, whatever it inherits.
TEST(Conformance, ATestRunnersShardingOrFilterRunsEveryCheck) {
  Report plain = Conform(TestPlugin("testgpu"), {"--timeout", "3"});
  ASSERT_GT(plain.checks.size(), 20u);
  Report inherited = Conform(TestPlugin("testgpu"), {"--timeout", "3"},
                             {{"GTEST_TOTAL_SHARDS", "2"},
                              {"GTEST_SHARD_INDEX", "1"},
                              {"GTEST_FILTER", "*abi*"},
                              {"GTEST_REPEAT", "2"},
                              {"TESTBRIDGE_TEST_ONLY", "*abi*"}});
  EXPECT_EQ(inherited.exit_code, plain.exit_code);
  EXPECT_EQ(inherited.tier, plain.tier);
  std::vector<std::string> a, b;
  for (const auto& [name, check] : plain.checks) a.push_back(name + " " + check.first);
  for (const auto& [name, check] : inherited.checks) b.push_back(name + " " + check.first);
  EXPECT_EQ(a, b);
}

// A captured node's plugin is checked through the replay plugin (docs/capture.md): the suite
// finds in the replay what it finds in the live plugin, without the plugin's vendor library.
TEST(Conformance, RunsAgainstACapturedPlugin) {
  const std::string dir = testing::MakeTempDir("conformance-replay");
  auto capture = [&](const std::string& file, std::vector<std::string> node,
                     const std::map<std::string, std::string>& env) {
    std::vector<std::string> args = {RAYACCEL_CLI, "capture", "--out", dir + "/" + file};
    args.insert(args.end(), node.begin(), node.end());
    std::map<std::string, std::string> all = env;
    all["RAYACCEL_PLUGIN_PATH"] = "";
    testing::CommandResult r = testing::Run(args, all);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  };
  const std::string plugins = RAYACCEL_PLUGIN_DIR;
  capture("h100.json",
          {"--plugin", "sim", "--config", "sim.spec=" + testing::Example("dgx-h100.json")}, {});
  Report sim = Conform("", {"--replay", dir + "/h100.json", "--tier", "2", "--timeout", "60"});
  EXPECT_EQ(sim.exit_code, 0);
  EXPECT_EQ(sim.tier, 2);  // no transport and no health events in a capture
  EXPECT_EQ(sim.checks["discovery.answers_valid"].second, "8 devices");
  EXPECT_EQ(sim.checks["topology.valid"].first, "pass");
  EXPECT_EQ(sim.checks["transport.round_trip"].first, "skip");

  // The live CUDA plugin and its replay fail the same check with the same words.
  const std::map<std::string, std::string> mig = {
      {"FAKE_NVML_FIXTURE", Fixture("fake-nvml/mig-a100.json")}};
  const std::string nvml = std::string("cuda.nvml_library=") + RAYACCEL_FAKE_NVML;
  capture("mig.json", {"--plugin", plugins + "/librayaccel-cuda.so", "--config", nvml}, mig);
  Report replayed = Conform("", {"--replay", dir + "/mig.json", "--timeout", "60"});
  std::vector<std::string> args = {
      RAYACCEL_CONFORMANCE, "--json", plugins + "/librayaccel-cuda.so", "--config", nvml,
      "--timeout",          "60"};
  testing::CommandResult live_run = testing::Run(args, mig);
  json::ParseError error;
  std::optional<json::Value> live = json::Parse(live_run.out, &error);
  ASSERT_TRUE(live) << live_run.err;
  for (const json::Value& c : live->Find("checks")->array()) {
    const std::string name = c.Find("name")->string();
    if (c.Find("status")->string() == "fail") {
      EXPECT_EQ(replayed.checks[name].first, "fail") << name;
      EXPECT_EQ(replayed.checks[name].second, c.Find("message")->string()) << name;
    } else {
      EXPECT_NE(replayed.checks[name].first, "fail")
          << name << ": " << replayed.checks[name].second;
    }
  }

  // A bundle with several plugins needs the one named; a wrong name or file says so.
  capture("two.json",
          {"--plugin", "sim", "--config", "sim.spec=" + testing::Example("dgx-h100.json"),
           "--plugin", plugins + "/librayaccel-cuda.so", "--config", nvml},
          mig);
  Report ambiguous = Conform("", {"--replay", dir + "/two.json"});
  EXPECT_EQ(ambiguous.checks["lifecycle.initializes"].first, "fail");
  EXPECT_NE(ambiguous.checks["lifecycle.initializes"].second.find("set plugin"), std::string::npos)
      << ambiguous.checks["lifecycle.initializes"].second;
  Report named =
      Conform("", {"--replay", dir + "/two.json", "--config", "plugin=sim", "--tier", "2"});
  EXPECT_EQ(named.tier, 2);
  Report missing = Conform("", {"--replay", dir + "/two.json", "--config", "plugin=tpu"});
  EXPECT_NE(missing.checks["lifecycle.initializes"].second.find("no plugin \"tpu\""),
            std::string::npos);
  EXPECT_EQ(testing::Run({RAYACCEL_CONFORMANCE, "--replay", dir + "/absent.json"}).exit_code, 2);
}

// The committed bundles (tests/fuzz/corpus/capture_bundle: the fake-NVML nodes, the KFD
// captures, Gaudi, TPU, the recorded H200) are a library of nodes the suite runs against,
// as a vendor's CI would keep its customers' nodes.
TEST(Conformance, EveryCommittedBundleReplaysToTier2) {
  const std::string dir = std::string(RAYACCEL_SOURCE_DIR) + "/tests/fuzz/corpus/capture_bundle";
  int checked = 0;
  for (const char* name : {"cuda-dgx-h100", "cuda-gb200-tray", "h200-vm-fixture",
                           "rocm-mi210-xgmi-pcie", "gaudi-hls2", "tpu-v5e-8"}) {
    SCOPED_TRACE(name);
    Report r = Conform("", {"--replay", dir + "/" + name + ".json", "--tier", "2"});
    EXPECT_EQ(r.tier, 2);
    for (const auto& [check, outcome] : r.checks) {
      EXPECT_NE(outcome.first, "fail") << check << ": " << outcome.second;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 6);
}

struct Expectation {
  const char* plugin;
  const char* check;
  const char* message;
};

class Zoo : public ::testing::TestWithParam<Expectation> {};

TEST_P(Zoo, FailsTheRightCheck) {
  const Expectation& e = GetParam();
#if defined(__SANITIZE_ADDRESS__)
  if (std::string(e.plugin) == "leak") GTEST_SKIP() << "ASan's allocator is invisible to mallinfo2";
#endif
  // --tier 2 so that failing any check fails the run; a short timeout for the hanging one.
  std::vector<std::string> args = {"--tier", "2", "--timeout",
                                   std::string(e.plugin) == "hang" ? "1" : "3"};
  if (std::string(e.plugin) == "keeps-config") args.insert(args.end(), {"--config", "name=H100"});
  Report r = Conform(TestPlugin(e.plugin), args);
  EXPECT_EQ(r.exit_code, 1) << "the suite must survive and report";
  ASSERT_EQ(r.checks.count(e.check), 1u);
  EXPECT_EQ(r.checks[e.check].first, "fail");
  EXPECT_NE(r.checks[e.check].second.find(e.message), std::string::npos)
      << e.check << ": " << r.checks[e.check].second;
}

void PrintTo(const Expectation& e, std::ostream* os) { *os << e.plugin; }

INSTANTIATE_TEST_SUITE_P(
    BadPlugins, Zoo,
    ::testing::Values(
        Expectation{"no-entry", "abi.exports_only_entry", "rayaccel_plugin_entry is not exported"},
        Expectation{"wrong-major", "abi.negotiation",
                    "answer a 1.0 host with ABI 1.0 and a table (major 1, the same as the "
                    "host's); it chose 2.0"},
        Expectation{"small-table", "abi.table", "smaller than the smallest 1.0 table"},
        Expectation{"null-discover", "abi.table", "NULL mandatory hook: discover"},
        Expectation{"own-minor", "abi.negotiation",
                    "answer a 1.0 host with ABI 1.0: chosen_abi_minor = "
                    "rayaccel_choose_minor(host_abi_minor, yours), not your own minor; it chose "
                    "1."},
        Expectation{"device-size-pointer", "discovery.answers_valid",
                    "device: set rayaccel_device_info.struct_size to "
                    "sizeof(rayaccel_device_info) (208 bytes): it is 8, the size of a pointer "
                    "(sizeof(&info)?), so no device was read (16 times); attributes for devices "
                    "refused above (16 times)"},
        Expectation{"table-size-to-discover", "abi.table",
                    "set the table's struct_size to sizeof(rayaccel_plugin_api) ("},
        Expectation{"bad-resource-name", "identity.resource_name",
                    "resource_name \"GPU, CPU\" is not a Ray resource name"},
        Expectation{"duplicate-id", "discovery.answers_valid", "duplicate id"},
        Expectation{"bad-label", "labels.valid", "bad key with spaces"},
        Expectation{"link-out-of-range", "topology.valid", "endpoint is not a reported device"},
        Expectation{"non-utf8-name", "discovery.answers_valid", "name is not UTF-8"},
        Expectation{"segfault", "discovery.answers_valid", "crashed with signal 11"},
        Expectation{"abort", "discovery.answers_valid", "crashed with signal 6"},
        Expectation{"sigkill", "discovery.answers_valid", "was killed with SIGKILL, not by"},
        Expectation{"hang", "discovery.answers_valid", "hung: no answer within 1 s"},
        Expectation{"throws", "discovery.answers_valid", "a C++ exception escaped a hook"},
        Expectation{"leak", "process.no_leak", "heap grew by"},
        Expectation{"double-free", "lifecycle.repeated", "crashed with signal 6"},
        Expectation{"stdout", "process.quiet_stdout", "bytes to stdout"},
        Expectation{"sets-ld-preload", "allocation.env_names_the_set",
                    "prepare_allocation set LD_PRELOAD"},
        Expectation{"hung-health", "health.wait_bounded", "hung: no answer within 3 s"},
        Expectation{"keeps-config", "lifecycle.config_copied",
                    "copy the configuration in initialize"},
        Expectation{"busy-health", "health.wait_bounded", "returned OK 5 times in a row within"},
        Expectation{"changes-state", "process.state_untouched", "the working directory (/"},
        Expectation{"control-chars", "process.clean_text", "1 log line(s) with control characters"},
        Expectation{"daemonizes", "process.nothing_left_behind",
                    "stop and wait for every process the plugin starts before shutdown returns: "
                    "1 outlived it"},
        Expectation{"spawns-helper", "process.nothing_left_behind", "1 outlived it"},
        Expectation{"signals-group-quietly", "process.group_unsignalled",
                    "signal only processes the plugin started, by their pid: it sent signal 15"},
        Expectation{"logs-after-shutdown", "lifecycle.quiet_after_shutdown",
                    "stop every thread that calls the host before shutdown returns"}),
    [](const ::testing::TestParamInfo<Expectation>& info) {
      std::string name = info.param.plugin;
      for (char& ch : name) ch = ch == '-' ? '_' : ch;
      return name;
    });

// The suite and the registry judge with the same code, so they cannot disagree: every plugin
// of the zoo the registry refuses (refused, failed or degraded) fails some check of the suite,
// and every check the suite fails is one the registry refuses the plugin for, unless it
// judges behaviour that one scan of a registry cannot see (listed here, with why).
TEST(Conformance, AgreesWithTheRegistryOnEveryZooPlugin) {
  const std::map<std::string, std::string> kBeyondOneScan = {
      {"abi.exports_only_entry", "extra symbols do not stop a dlopen with RTLD_LOCAL"},
      {"abi.negotiation", "the registry is one host version; the suite plays several"},
      {"lifecycle.repeated", "the registry initializes once"},
      {"lifecycle.two_instances", "the registry loads one instance"},
      {"lifecycle.shutdown_without_initialize", "the registry never does that"},
      {"lifecycle.config_copied", "needs the host's copies overwritten under the plugin"},
      {"lifecycle.quiet_after_shutdown", "what happens after shutdown; the host copes"},
      {"process.nothing_left_behind", "after shutdown; the host kills what it can find"},
      {"process.group_unsignalled", "the isolated host has a group of its own and survives"},
      {"lifecycle.failures_explained", "a request, not a scan"},
      {"discovery.none_explained", "a silent plugin's empty message is the registry's answer"},
      {"telemetry.valid", "telemetry is sampled on request, not in a scan"},
      {"discovery.ids_stable", "needs two scans"},
      {"process.quiet_stdout", "isolation keeps stdout away from the host"},
      {"process.clean_text", "the registry escapes what it shows"},
      {"process.state_untouched", "isolation keeps the host's process state"},
      {"process.no_leak", "needs many cycles"},
      {"health.wait_bounded", "the health watch, not a scan"},
      {"allocation.quantity_consistent", "a request, not a scan"},
      {"allocation.env_names_the_set", "a request, not a scan"},
      {"concurrency.thread_safe", "needs concurrent calls"},
      {"transport.round_trip", "the transport, not a scan"},
  };
  std::vector<std::string> plugins;
  if (DIR* dir = opendir(RAYACCEL_TEST_PLUGIN_DIR)) {
    while (dirent* e = readdir(dir)) {
      std::string file = e->d_name;
      if (file.size() > 3 && file.compare(file.size() - 3, 3, ".so") == 0) {
        plugins.push_back(std::string(RAYACCEL_TEST_PLUGIN_DIR) + "/" + file);
      }
    }
    closedir(dir);
  }
  std::sort(plugins.begin(), plugins.end());
  ASSERT_GT(plugins.size(), 40u);
  // The suite's runs, four at a time: most of their time is waiting out a broken plugin's
  // timeouts and a moment after each shutdown, not work.
  std::vector<Report> suites(plugins.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> runners;
  for (int t = 0; t < 4; ++t) {
    runners.emplace_back([&] {
      for (size_t i = next++; i < plugins.size(); i = next++) {
        suites[i] = Conform(plugins[i], {"--tier", "2", "--timeout", "2"});
      }
    });
  }
  // What the registry makes of each, meanwhile (no assertion here: the runners must be joined).
  struct Verdict {
    bool refuses = false;
    std::string state, message;
  };
  std::vector<Verdict> registry_says;
  for (const std::string& plugin : plugins) {
    RegistryOptions options;
    options.plugins = {plugin};
    options.use_environment = false;
    options.host_topology = false;
    options.isolation = RegistryOptions::Isolation::kChildProcess;
    options.plugin_host = RAYACCEL_PLUGIN_HOST;
    options.call_timeout_ms = 2000;
    auto registry = Registry::Create(options);
    if (!registry.ok()) {
      ADD_FAILURE() << plugin << ": " << registry.status();
      registry_says.push_back({});
      continue;
    }
    const PluginStatus status = (*registry)->snapshot()->plugins.at(0);
    registry->reset();
    registry_says.push_back({status.state != PluginStatus::State::kActive,
                             PluginStateName(status.state), status.message});
  }
  for (std::thread& t : runners) t.join();

  for (size_t i = 0; i < plugins.size(); ++i) {
    SCOPED_TRACE(plugins[i]);
    const Report& suite = suites[i];
    const Verdict& registry = registry_says[i];
    std::vector<std::string> failed;
    for (const auto& [name, check] : suite.checks) {
      if (check.first == "fail") failed.push_back(name + ": " + check.second);
    }
    if (registry.refuses) {
      EXPECT_FALSE(failed.empty()) << "the registry says " << registry.state << " ("
                                   << registry.message << "), the suite passes it";
      continue;
    }
    for (const auto& [name, check] : suite.checks) {
      if (check.first != "fail" || kBeyondOneScan.count(name) > 0) continue;
      // A helper process left behind is the plugin's manners, whichever check saw it.
      if (check.second.rfind("left a process running", 0) == 0) continue;
      ADD_FAILURE() << "the suite fails " << name << " (" << check.second
                    << "), the registry takes the plugin as active";
    }
  }
}

// A plugin whose RUNPATH ($ORIGIN/deps) names a folder anyone can write: whoever writes there
// runs code in the host, so the registry refuses it, and so does the suite, with the fix.
TEST(Conformance, AFolderTheLoaderSearchesThatAnyoneCanWriteFails) {
  const std::string dir = testing::MakeTempDir("runpath");
  const std::string plugin = dir + "/librayaccel-origin-runpath.so";
  testing::CopyFile(TestPlugin("origin-runpath"), plugin);
  ASSERT_EQ(mkdir((dir + "/deps").c_str(), 0755), 0);
  ASSERT_EQ(chmod((dir + "/deps").c_str(), 0777), 0);
  Report bad = Conform(plugin, {"--timeout", "20"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_EQ(bad.checks["abi.files_trusted"].first, "fail");
  const std::string& why = bad.checks["abi.files_trusted"].second;
  EXPECT_EQ(why.rfind("make every folder the plugin and its libraries load from writable only "
                      "by its owner (chmod go-w)",
                      0),
            0u)
      << why;
  EXPECT_NE(why.find("loads libraries from " + dir + "/deps (its RUNPATH/RPATH)"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("writable by everyone"), std::string::npos) << why;
  RegistryOptions options;
  options.plugins = {plugin};
  options.use_environment = false;
  options.host_topology = false;
  auto registry = Registry::Create(options);
  ASSERT_TRUE(registry.ok()) << registry.status();
  EXPECT_EQ((*registry)->snapshot()->plugins.at(0).state, PluginStatus::State::kRefused);

  ASSERT_EQ(chmod((dir + "/deps").c_str(), 0755), 0);
  Report fixed = Conform(plugin, {"--timeout", "20"});
  EXPECT_EQ(fixed.checks["abi.files_trusted"].first, "pass")
      << fixed.checks["abi.files_trusted"].second;
  EXPECT_EQ(fixed.exit_code, 0);
}

// A plugin built with today's header and a transport that negotiates ABI 1.0: the fix is its
// negotiation, and the suite names it (not "rebuild it").
// A plugin with no device says why (the sink's explain_no_devices, a "0 devices:" log line for
// older hosts), and one that finds some is not judged on it.
TEST(Conformance, NoDeviceNeedsAReason) {
  Report told = Conform(TestPlugin("finds-nothing"), {"--tier", "1"});
  EXPECT_EQ(told.checks["discovery.none_explained"].first, "pass");
  EXPECT_NE(
      told.checks["discovery.none_explained"].second.find("explain_no_devices: no /dev/acme* node"),
      std::string::npos);
  Report silent = Conform(TestPlugin("finds-nothing-silently"), {"--tier", "1"});
  EXPECT_EQ(silent.exit_code, 1);
  EXPECT_EQ(silent.checks["discovery.none_explained"].first, "fail");
  EXPECT_NE(silent.checks["discovery.none_explained"].second.find("explain_no_devices"),
            std::string::npos);
  Report sim = Conform(testing::SimPlugin(), {"--tier", "1"});
  EXPECT_EQ(sim.checks["discovery.none_explained"].first, "pass");  // no spec: none, and why
  EXPECT_NE(sim.checks["discovery.none_explained"].second.find("no spec configured"),
            std::string::npos);
}

TEST(Conformance, ATransportBehindATooLowNegotiationNamesTheNegotiation) {
  Report r = Conform(RAYACCEL_MINOR_ZERO_SIM_PLUGIN, {"--tier", "3", "--timeout", "20"});
  EXPECT_EQ(r.exit_code, 1);
  const std::string& why = r.checks["transport.round_trip"].second;
  EXPECT_EQ(r.checks["transport.round_trip"].first, "fail") << why;
  EXPECT_NE(why.find(absl::StrCat("negotiated ABI 1.0 although its table says it was built for 1.",
                                  RAYACCEL_ABI_VERSION_MINOR,
                                  ", so the host does not use its transport: set "
                                  "chosen_abi_minor = rayaccel_choose_minor(host_abi_minor, ")),
            std::string::npos)
      << why;
}

// The performance gate (tier 4): figures recorded from the sim plugin pass the sim plugin and
// fail the same plugin slowed down (20 ms per discover and transfer), naming each regression;
// the tolerance (10x here) leaves room for a shared machine's noise.
TEST(Conformance, ThePerformanceGateFailsARegressionAndPassesTheSamePlugin) {
  const std::string dir = testing::MakeTempDir("perf-gate");
  const std::string spec = "spec=" + testing::Example("dgx-h100.json");
  const std::string baseline = dir + "/baseline.json";
  testing::CommandResult first =
      testing::Run({RAYACCEL_CONFORMANCE, testing::SimPlugin(), "--config", spec, "--perf",
                    "--tier", "4", "--json", "--timeout", "20"});
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  std::ofstream(baseline) << first.out;
  json::ParseError error;
  std::optional<json::Value> doc = json::Parse(first.out, &error);
  ASSERT_TRUE(doc) << error.message;
  EXPECT_EQ(doc->Find("tier_name")->string(), "measured");
  std::set<std::string> figures;
  for (const json::Value& c : doc->Find("checks")->array()) {
    if (const json::Value* f = c.Find("figures")) {
      for (const auto& [name, value] : f->members()) {
        EXPECT_GT(value.number(), 0) << name;
        figures.insert(name);
      }
    }
  }
  EXPECT_EQ(figures,
            (std::set<std::string>{"discovery.cold_start_ms", "discovery.rescan_us",
                                   "allocation.prepare_us", "transport.read_8b_latency_us",
                                   "transport.read_64kib_gbps", "transport.read_1mib_gbps",
                                   "transport.write_1mib_gbps", "transport.batch_64x4kib_gbps"}));

  // What a vendor's CI runs on each driver update: the figures alone, against the last good.
  Report same = Conform(testing::SimPlugin(),
                        {"--config", spec, "--perf", "--only", "perf", "--baseline", baseline,
                         "--tolerance", "10", "--timeout", "60", "--junit", dir + "/same.xml"});
  EXPECT_EQ(same.exit_code, 0);
  for (const char* check : {"perf.discovery", "perf.allocation", "perf.transport"}) {
    EXPECT_EQ(same.checks[check].first, "pass") << check << ": " << same.checks[check].second;
  }
  std::ifstream junit(dir + "/same.xml");
  std::stringstream xml;
  xml << junit.rdbuf();
  EXPECT_NE(xml.str().find("<property name=\"transport.read_1mib_gbps\" value=\""),
            std::string::npos)
      << xml.str();

  EXPECT_EQ(same.checks.size(), 3u) << "--only perf";
  Report slow =
      Conform(RAYACCEL_SLOW_SIM_PLUGIN, {"--config", spec, "--perf", "--only", "perf", "--baseline",
                                         baseline, "--tolerance", "10", "--timeout", "60"});
  EXPECT_EQ(slow.exit_code, 1);
  EXPECT_EQ(slow.checks["perf.discovery"].first, "fail");
  EXPECT_NE(slow.checks["perf.discovery"].second.find("discovery.rescan_us is "), std::string::npos)
      << slow.checks["perf.discovery"].second;
  EXPECT_NE(slow.checks["perf.discovery"].second.find("past the 10x tolerated"), std::string::npos);
  EXPECT_EQ(slow.checks["perf.allocation"].first, "pass") << "not slowed down";
  EXPECT_EQ(slow.checks["perf.transport"].first, "fail");
  EXPECT_NE(slow.checks["perf.transport"].second.find("transport.read_8b_latency_us is "),
            std::string::npos)
      << slow.checks["perf.transport"].second;

  // A baseline that is not a report, or figures without --perf, are usage errors.
  auto usage = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {RAYACCEL_CONFORMANCE, testing::SimPlugin()};
    args.insert(args.end(), extra.begin(), extra.end());
    return testing::Run(args);
  };
  EXPECT_EQ(usage({"--baseline", baseline}).exit_code, 2) << "--baseline without --perf";
  EXPECT_EQ(usage({"--perf", "--baseline", dir + "/missing.json"}).exit_code, 2);
  std::ofstream(dir + "/empty.json") << "{\"checks\": []}";
  testing::CommandResult empty = usage({"--perf", "--baseline", dir + "/empty.json"});
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_NE(empty.err.find("no figures"), std::string::npos) << empty.err;
  EXPECT_EQ(usage({"--perf", "--tolerance", "0.5"}).exit_code, 2);
}

// A slow but working plugin (100 ms to initialize) is not "hung": the leak check's 43 cycles
// each get the timeout, not all of them together.
TEST(Conformance, ASlowButWorkingPluginIsNotHung) {
  Report r = Conform(TestPlugin("slow-init"), {"--tier", "1", "--timeout", "1"});
  ASSERT_EQ(r.checks.count("process.no_leak"), 1u);
  EXPECT_EQ(r.checks["process.no_leak"].first, "pass") << r.checks["process.no_leak"].second;
  EXPECT_EQ(r.exit_code, 0);
}

TEST(Conformance, JunitReport) {
  std::string dir = testing::MakeTempDir("junit");
  std::string file = dir + "/report.xml";
  testing::CommandResult r =
      testing::Run({RAYACCEL_CONFORMANCE, TestPlugin("stdout"), "--junit", file, "--timeout", "3"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("Tier reached: 0 (none)"), std::string::npos) << r.out;
  std::ifstream in(file);
  std::stringstream xml;
  xml << in.rdbuf();
  EXPECT_NE(xml.str().find("<testsuites"), std::string::npos);
  EXPECT_NE(xml.str().find("quiet_stdout"), std::string::npos);
  EXPECT_NE(xml.str().find("<failure"), std::string::npos);
}

TEST(Conformance, TheRayaccelCommandRunsTheSuite) {
  testing::CommandResult r = testing::Run(
      {RAYACCEL_CLI, "conformance", std::string(RAYACCEL_PLUGIN_DIR) + "/librayaccel-sim.so",
       "--config", "spec=" + testing::Example("tpu-v4-host.json"), "--tier", "2"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("Tier reached: 3 (transport)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("accepts 1,2,4,8"), std::string::npos) << r.out;
}

TEST(Conformance, UsageErrors) {
  EXPECT_EQ(testing::Run({RAYACCEL_CONFORMANCE}).exit_code, 2);
  EXPECT_EQ(testing::Run({RAYACCEL_CONFORMANCE, "x.so", "--tier", "7"}).exit_code, 2);
  testing::CommandResult r = testing::Run({RAYACCEL_CONFORMANCE, "/no/such/plugin.so"});
  EXPECT_EQ(r.exit_code, 2);  // a missing file is the caller's mistake, not the plugin's
  EXPECT_NE(r.err.find("/no/such/plugin.so: No such file or directory"), std::string::npos)
      << r.err;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"x.so", "--tier=7"}, "--tier is 1, 2, 3, 4 or 5"},
      {{"x.so", "--tier=0"}, "--tier is 1, 2, 3, 4 or 5"},
      {{"x.so", "--tier"}, "--tier is 1, 2, 3, 4 or 5"},
      {{"x.so", "--report"}, "--report needs a folder"},
      {{"x.so", "--ray-python"}, "--ray-python needs a Python with Ray"},
      {{"x.so", "--timeout", "soon"}, "--timeout needs seconds"},
      {{"x.so", "--config", "noequals"}, "--config needs KEY=VALUE"},
      {{"x.so", "--only="}, "--only needs check name prefixes"},
      {{"x.so", "--bogus"}, "unknown option --bogus"},
      {{"x.so", "y.so"}, "one plugin at a time"},
  };
  for (const auto& [extra, message] : cases) {
    std::vector<std::string> args = {RAYACCEL_CONFORMANCE};
    args.insert(args.end(), extra.begin(), extra.end());
    testing::CommandResult bad = testing::Run(args);
    EXPECT_EQ(bad.exit_code, 2) << ::testing::PrintToString(extra);
    EXPECT_EQ(bad.err.rfind("rayaccel-conformance: " + message, 0), 0u) << bad.err;
  }
  testing::CommandResult help = testing::Run({RAYACCEL_CONFORMANCE, "--tier", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_EQ(help.out.rfind("usage: rayaccel-conformance", 0), 0u) << help.out;
  // Every option the usage names is explained on a line of its own.
  const std::string usage = help.out.substr(0, help.out.find("\n\n"));
  std::regex option("--[a-z-]+");
  int explained = 0;
  for (auto it = std::sregex_iterator(usage.begin(), usage.end(), option);
       it != std::sregex_iterator(); ++it) {
    EXPECT_NE(help.out.find("\n  " + it->str()), std::string::npos)
        << it->str() << " is not explained in --help";
    ++explained;
  }
  EXPECT_GE(explained, 14);
}

// A plugin that does not load is reported once, with its reason, and nothing else runs.
TEST(Conformance, APluginThatDoesNotLoadIsReportedOnce) {
  Report r = Conform(TestPlugin("init-fails"), {"--timeout", "3"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.tier, 0);
  EXPECT_EQ(r.checks["lifecycle.initializes"].first, "fail");
  EXPECT_EQ(r.checks["lifecycle.initializes"].second,
            "initialize failed: vendor driver 1.2.3 is too old");
  EXPECT_EQ(r.checks.count("discovery.answers_valid"), 0u);
  int failed = 0;
  for (const auto& [name, check] : r.checks) failed += check.first == "fail";
  EXPECT_EQ(failed, 1);
  testing::CommandResult text =
      testing::Run({RAYACCEL_CONFORMANCE, TestPlugin("init-fails"), "--timeout", "3"});
  EXPECT_NE(text.out.find("further checks not run: the plugin does not load"), std::string::npos)
      << text.out;
}

// A vendor's CI on a machine without the device: zero devices is then the expectation, and
// tier 1 a pass; devices where none are expected fail.
TEST(Conformance, ExpectNoDevices) {
  const std::string cuda = std::string(RAYACCEL_PLUGIN_DIR) + "/librayaccel-cuda.so";
  const std::vector<std::string> no_driver = {"--config", "nvml_library=/no/libnvidia-ml.so.1",
                                              "--timeout", "10"};
  std::vector<std::string> args = no_driver;
  args.push_back("--expect-no-devices");
  Report r = Conform(cuda, args);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.tier, 1);
  testing::CommandResult text =
      testing::Run({RAYACCEL_CONFORMANCE, cuda, "--config", "nvml_library=/no/libnvidia-ml.so.1",
                    "--expect-no-devices"});
  EXPECT_NE(text.out.find("no devices here, as expected"), std::string::npos) << text.out;
  // Without the flag the suite says why tier 1 is the ceiling.
  text =
      testing::Run({RAYACCEL_CONFORMANCE, cuda, "--config", "nvml_library=/no/libnvidia-ml.so.1"});
  EXPECT_NE(text.out.find("the plugin found no devices here"), std::string::npos) << text.out;

  Report sim = Conform(std::string(RAYACCEL_PLUGIN_DIR) + "/librayaccel-sim.so",
                       {"--config", "spec=" + testing::Example("dgx-h100.json"),
                        "--expect-no-devices", "--timeout", "10"});
  EXPECT_EQ(sim.exit_code, 1);
  EXPECT_NE(sim.checks["discovery.answers_valid"].second.find(
                "8 devices found, and --expect-no-devices says this machine has none"),
            std::string::npos);
}

// A resource Ray already gives another vendor's devices: the registry and the suite both warn,
// with the same words, and neither refuses (Ray allows it; its own code would misread them).
TEST(Conformance, AResourceOfAnotherVendorIsWarnedAboutByRegistryAndSuite) {
  const std::string spec = "spec=" + Fixture("specs/npu-acme.json");
  Report r = Conform(std::string(RAYACCEL_PLUGIN_DIR) + "/librayaccel-sim.so",
                     {"--config", spec, "--timeout", "10"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.checks["identity.resource_name"].first, "warn");
  const std::string warning = r.checks["identity.resource_name"].second;
  EXPECT_NE(warning.find("\"NPU\" is Ray's resource for Huawei Ascend NPUs"), std::string::npos)
      << warning;
  testing::CommandResult plugins = testing::Run(
      {RAYACCEL_CLI, "plugins", "--json", "--plugin", "sim", "--config", "sim." + spec});
  EXPECT_EQ(plugins.exit_code, 0);
  EXPECT_NE(plugins.out.find("\"status\": \"active\""), std::string::npos) << plugins.out;
  EXPECT_NE(plugins.out.find(json::Quote(warning)), std::string::npos) << plugins.out;
  // The owner's own plugin is not warned about.
  Report tpu =
      Conform(std::string(RAYACCEL_PLUGIN_DIR) + "/librayaccel-sim.so",
              {"--config", "spec=" + testing::Example("tpu-v4-host.json"), "--timeout", "10"});
  EXPECT_EQ(tpu.checks["identity.resource_name"].first, "pass");
}

// The JUnit report names the plugin file, not paths of the machine the suite was built on.
TEST(Conformance, JunitCarriesNoBuildPaths) {
  std::string file = testing::MakeTempDir("junit-paths") + "/report.xml";
  testing::Run({RAYACCEL_CONFORMANCE, TestPlugin("testgpu"), "--junit", file, "--timeout", "3"});
  std::ifstream in(file);
  std::stringstream xml;
  xml << in.rdbuf();
  EXPECT_NE(xml.str().find("file=\"librayaccel-testgpu.so\""), std::string::npos) << xml.str();
  EXPECT_EQ(xml.str().find(RAYACCEL_SOURCE_DIR), std::string::npos) << xml.str();
}

}  // namespace
}  // namespace rayaccel
