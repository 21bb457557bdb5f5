// The registry with each plugin in a child process (rayaccel-plugin-host): vendor faults that
// would take an in-process host down cost only the faulty plugin, with the cause, and a
// crashed plugin comes back after its backoff.
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rayaccel/registry.h"
#include "support/test_support.h"

namespace rayaccel {
namespace {

using testing::Example;
using testing::SimPlugin;
using testing::StatusOf;
using testing::TestPlugin;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // sanitizers reserve terabytes of address space
#else
constexpr bool kSanitized = false;
#endif

RegistryOptions Isolated(std::vector<std::string> plugins) {
  RegistryOptions options;
  options.plugins = std::move(plugins);
  options.use_environment = false;
  options.host_topology = false;
  options.isolation = RegistryOptions::Isolation::kChildProcess;
  options.plugin_host = RAYACCEL_PLUGIN_HOST;
  options.call_timeout_ms = 1000;
  options.restart_backoff_ms = 0;
  options.plugin_memory_limit_bytes = kSanitized ? 0 : uint64_t{1} << 30;
  options.config["sim"]["spec"] = Example("tpu-v4-host.json");
  return options;
}

std::unique_ptr<Registry> Make(const RegistryOptions& options) {
  auto registry = Registry::Create(options);
  EXPECT_TRUE(registry.ok()) << registry.status();
  return *std::move(registry);
}

TEST(Isolation, SameAnswersAsInProcess) {
  RegistryOptions isolated = Isolated({SimPlugin()});
  isolated.config["sim"]["spec"] = Example("dgx1-v100.json");
  RegistryOptions local = isolated;
  local.isolation = RegistryOptions::Isolation::kInProcess;
  std::unique_ptr<Registry> a = Make(isolated);
  std::unique_ptr<Registry> b = Make(local);
  std::shared_ptr<const NodeSnapshot> sa = a->snapshot(), sb = b->snapshot();
  EXPECT_EQ(StatusOf(*sa, "sim").state, PluginStatus::State::kActive);
  EXPECT_EQ(StatusOf(*sa, "sim").abi_version, "1.6");
  ASSERT_EQ(sa->devices.size(), sb->devices.size());
  for (size_t i = 0; i < sa->devices.size(); ++i) {
    EXPECT_EQ(sa->devices[i].id, sb->devices[i].id);
    EXPECT_EQ(sa->devices[i].pci_bus_id, sb->devices[i].pci_bus_id);
    EXPECT_EQ(sa->devices[i].numa_node, sb->devices[i].numa_node);
  }
  EXPECT_EQ(sa->links.size(), sb->links.size());
  EXPECT_EQ(sa->ray.resources, sb->ray.resources);
  EXPECT_EQ(sa->ray.labels, sb->ray.labels);
  auto env = a->PrepareAllocationAt({1, 2}, sa->generation);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->at("CUDA_VISIBLE_DEVICES"), "1,2");
  EXPECT_EQ(a->Rescan()->generation, 1u);  // nothing changed
}

// Everything a registry made of its plugins, as text, for comparing the two modes.
std::string Describe(const NodeSnapshot& s) {
  std::string out;
  for (const PluginStatus& p : s.plugins) {
    absl::StrAppend(&out, "plugin ", p.name, " ", PluginStateName(p.state), " abi ", p.abi_version,
                    " ", p.vendor, "/", p.resource_name, " devices ", p.device_count, ": ",
                    p.message, "\n");
  }
  for (const Device& d : s.devices) {
    absl::StrAppend(&out, "device ", d.index, " ", d.id, " ", d.name, " ", d.pci_bus_id, " numa ",
                    d.numa_node, " health ", HealthName(d.health), " ", d.health_reason,
                    " attributes ", d.attributes.size(), "\n");
  }
  absl::StrAppend(&out, s.links.size(), " links, ", s.domains.size(), " domains\n");
  for (const Link& l : s.links) {
    if (&l - s.links.data() < 64) absl::StrAppend(&out, l.a, "-", l.b, " ", l.source, "\n");
  }
  for (const auto& [k, v] : s.plugin_labels) absl::StrAppend(&out, "label ", k, "=", v, "\n");
  for (const auto& [k, v] : s.ray.resources) absl::StrAppend(&out, "ray ", k, "=", v, "\n");
  for (const auto& [k, v] : s.ray.labels) absl::StrAppend(&out, "ray ", k, "=", v, "\n");
  return out;
}

// The plugin host runs the registry's own checks, so a plugin's answer, refusals and
// messages are the same in both modes, for every plugin of the zoo that the test process
// itself survives in-process (the crashing ones are IsolatedFault's).
TEST(Isolation, EveryZooPluginAnswersAsInProcess) {
  for (const char* name : {"testgpu",
                           "init-fails",
                           "discover-fails",
                           "duplicate-id",
                           "non-utf8-name",
                           "pass-back-refusal",
                           "stdout",
                           "non-utf8-property",
                           "bad-resource-name",
                           "bad-label",
                           "link-out-of-range",
                           "absurd-count",
                           "tiny-device-struct",
                           "old-device-struct",
                           "new-device-struct",
                           "control-chars",
                           "null-strings",
                           "long-string",
                           "many-links",
                           "cap-without-hook",
                           "transport-null-hooks",
                           "null-discover",
                           "small-table"}) {
    SCOPED_TRACE(name);
    RegistryOptions isolated = Isolated({TestPlugin(name), SimPlugin()});
    isolated.call_timeout_ms = 10000;
    RegistryOptions local = isolated;
    local.isolation = RegistryOptions::Isolation::kInProcess;
    std::unique_ptr<Registry> a = Make(isolated);
    std::unique_ptr<Registry> b = Make(local);
    std::string in_process = Describe(*b->snapshot());
    EXPECT_EQ(Describe(*a->snapshot()), in_process);
    // And again on a rescan, where the host may answer "unchanged".
    EXPECT_EQ(Describe(*a->Rescan()), Describe(*b->Rescan()));
    EXPECT_EQ(Describe(*a->Rescan()), in_process);
  }
}

// What used to differ: a legal plugin too large for the old 16 MiB frame, strings with a
// size and no pointer, and a size far past the bytes behind it.
TEST(Isolation, LargeAndLyingAnswersMatchInProcess) {
  RegistryOptions options = Isolated({TestPlugin("many-links")});
  options.call_timeout_ms = 10000;
  std::shared_ptr<const NodeSnapshot> many = Make(options)->snapshot();
  EXPECT_EQ(StatusOf(*many, "many-links").state, PluginStatus::State::kActive)
      << StatusOf(*many, "many-links").message;
  EXPECT_EQ(many->devices.size(), 512u);
  EXPECT_EQ(many->links.size(), 130816u);

  std::shared_ptr<const NodeSnapshot> nulls =
      Make(Isolated({TestPlugin("null-strings")}))->snapshot();
  const PluginStatus& n = StatusOf(*nulls, "null-strings");
  EXPECT_EQ(nulls->devices.size(), 2u);
  EXPECT_NE(n.message.find("device 1: id has a size but a NULL pointer"), std::string::npos)
      << n.message;
  EXPECT_NE(n.message.find("label value has a size but a NULL pointer"), std::string::npos)
      << n.message;
  EXPECT_EQ(nulls->plugin_labels.count("example.com/null-value"), 0u);

  std::shared_ptr<const NodeSnapshot> lying =
      Make(Isolated({TestPlugin("long-string")}))->snapshot();
  const PluginStatus& l = StatusOf(*lying, "long-string");
  EXPECT_EQ(l.state, PluginStatus::State::kDegraded) << l.message;
  EXPECT_EQ(lying->devices.size(), 1u);
  EXPECT_NE(l.message.find("name is 1073741824 bytes long"), std::string::npos) << l.message;
}

// A flood ends at the limit as in-process does (the sink says RESOURCE_EXHAUSTED to the
// plugin in the host too), not at the call timeout (which would read "no answer within").
TEST(Isolation, AFloodIsRefusedAtTheLimitNotTheTimeout) {
  RegistryOptions options = Isolated({TestPlugin("absurd-count")});
  options.call_timeout_ms = 10000;
  std::shared_ptr<const NodeSnapshot> s = Make(options)->snapshot();
  const PluginStatus& p = StatusOf(*s, "absurd-count");
  EXPECT_EQ(p.state, PluginStatus::State::kFailed);
  EXPECT_NE(p.message.find("more than 4096 devices"), std::string::npos) << p.message;
  EXPECT_EQ(p.message.find("no answer within"), std::string::npos) << p.message;
}

// A host that hangs in initialize is killed at the call timeout and waits out its backoff
// like any crash: the first scan does not start it again at once (and wait a second timeout).
TEST(Isolation, AHungInitializeIsNotRetriedInTheSameScan) {
  RegistryOptions options = Isolated({TestPlugin("init-hangs"), SimPlugin()});
  options.restart_backoff_ms = 60000;
  std::shared_ptr<const NodeSnapshot> s = Make(options)->snapshot();
  const PluginStatus& p = StatusOf(*s, "init-hangs");
  EXPECT_EQ(p.state, PluginStatus::State::kFailed);
  EXPECT_NE(p.message.find("no answer within 1000 ms during initialize"), std::string::npos)
      << p.message;
  EXPECT_NE(p.message.find("restart in 60000 ms"), std::string::npos) << p.message;
  EXPECT_EQ(p.message.find("restart 1 failed"), std::string::npos) << p.message;
  EXPECT_EQ(s->ray.resources.at("TPU"), 4);
}

struct Fault {
  const char* plugin;
  const char* cause;
};

class IsolatedFault : public ::testing::TestWithParam<Fault> {};

TEST_P(IsolatedFault, CostsOnlyThatPlugin) {
  const Fault& f = GetParam();
  if (std::string(f.plugin) == "memory-hog" && kSanitized) GTEST_SKIP() << "no RLIMIT_AS here";
  RegistryOptions options = Isolated({TestPlugin(f.plugin), SimPlugin()});
  if (std::string(f.plugin) == "memory-hog") {
    options.plugin_memory_limit_bytes = 256 << 20;  // runs out fast, and far below the box
    options.call_timeout_ms = 10000;
  }
  std::unique_ptr<Registry> registry = Make(options);
  std::shared_ptr<const NodeSnapshot> s = registry->snapshot();
  const PluginStatus& bad = StatusOf(*s, f.plugin);
  EXPECT_EQ(bad.state, PluginStatus::State::kFailed);
  EXPECT_NE(bad.message.find(f.cause), std::string::npos) << bad.message;
  EXPECT_EQ(StatusOf(*s, "sim").state, PluginStatus::State::kActive);
  EXPECT_EQ(s->ray.resources.at("TPU"), 4);
  EXPECT_TRUE(registry->ValidateQuantity("TPU", 4).ok());
}

void PrintTo(const Fault& f, std::ostream* os) { *os << f.plugin; }

INSTANTIATE_TEST_SUITE_P(
    Zoo, IsolatedFault,
    ::testing::Values(
        Fault{"segfault", "the plugin crashed with signal 11 (Segmentation fault) during discover"},
        Fault{"abort", "crashed with signal 6 (Aborted) during discover"},
        Fault{"hang", "no answer within 1000 ms during discover; the plugin host was killed"},
        Fault{"throws", "a C++ exception escaped the plugin: vendor library exploded"},
        Fault{"memory-hog", "crashed with signal 6 (Aborted) during discover"},
        Fault{"sigkill",
              "the plugin host was killed with SIGKILL during discover (not by "
              "rayaccel: the kernel's out-of-memory killer sends this)"}),
    [](const ::testing::TestParamInfo<Fault>& info) {
      std::string name = info.param.plugin;
      for (char& c : name) c = c == '-' ? '_' : c;
      return name;
    });

// A raylet creates things on threads that come and go: plugin hosts outlive the thread that
// created the registry (PR_SET_PDEATHSIG would follow that thread), and go when the process
// does.
TEST(Isolation, HostsOutliveTheThreadThatCreatedTheRegistry) {
  std::unique_ptr<Registry> registry;
  std::thread([&] { registry = Make(Isolated({SimPlugin()})); }).join();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the old death signal's window
  std::shared_ptr<const NodeSnapshot> s = registry->Rescan();
  EXPECT_EQ(StatusOf(*s, "sim").state, PluginStatus::State::kActive) << StatusOf(*s, "sim").message;
  EXPECT_TRUE(registry->ValidateQuantity("TPU", 4).ok());
  EXPECT_TRUE(registry->PrepareAllocation({s->devices[0].id}).ok());
}

// The registry's process dies without a word (SIGKILL): its plugin hosts notice their socket
// closing and exit, even with a plugin call in progress.
TEST(Isolation, HostsEndWithTheRegistrysProcess) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto registry = Registry::Create(Isolated({TestPlugin("hang"), SimPlugin()}));
    (void)write(ready[1], "x", 1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char x;
  ASSERT_EQ(read(ready[0], &x, 1), 1);
  close(ready[0]);
  // Its plugin hosts: the children of `child` (in groups of their own).
  std::vector<pid_t> hosts;
  DIR* proc = opendir("/proc");
  ASSERT_NE(proc, nullptr);
  while (dirent* e = readdir(proc)) {
    const std::string entry = e->d_name;
    pid_t pid = std::atoi(entry.c_str());
    if (pid <= 0) continue;
    std::ifstream stat("/proc/" + entry + "/stat");
    std::string line;
    std::getline(stat, line);
    size_t close_paren = line.rfind(')');
    if (close_paren == std::string::npos) continue;
    std::istringstream rest(line.substr(close_paren + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == child) hosts.push_back(pid);
  }
  closedir(proc);
  EXPECT_GE(hosts.size(), 1u);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  for (pid_t host : hosts) {
    bool gone = false;
    for (int i = 0; i < 500 && !gone; ++i) {  // up to 5 s
      gone = kill(host, 0) != 0;
      if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(gone) << "plugin host " << host << " outlived its registry";
  }
}

// A process that ignores SIGCHLD (the raylet does by default), or reaps every child it has
// with waitpid(-1) (the raylet's subreaper mode), still learns how a plugin died: the host's
// exit status is gone, but it noted the fatal signal itself.
TEST(Isolation, CrashCausesSurviveTheHostsOwnChildHandling) {
  for (bool ignore_sigchld : {true, false}) {
    SCOPED_TRACE(ignore_sigchld ? "SIGCHLD ignored" : "a waitpid(-1) loop");
    struct sigaction old {};
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    if (ignore_sigchld) ASSERT_EQ(sigaction(SIGCHLD, &ignore, &old), 0);
    std::atomic<bool> stop{false};
    std::thread reaper([&] {
      while (!stop && !ignore_sigchld) {
        waitpid(-1, nullptr, WNOHANG);
        std::this_thread::yield();
      }
    });
    {
      std::unique_ptr<Registry> registry =
          Make(Isolated({TestPlugin("segfault"), TestPlugin("abort"), SimPlugin()}));
      for (int scan = 0; scan < 3; ++scan) {
        std::shared_ptr<const NodeSnapshot> s = registry->Rescan();
        EXPECT_NE(StatusOf(*s, "segfault").message.find("signal 11 (Segmentation fault)"),
                  std::string::npos)
            << StatusOf(*s, "segfault").message;
        EXPECT_NE(StatusOf(*s, "abort").message.find("signal 6 (Aborted)"), std::string::npos)
            << StatusOf(*s, "abort").message;
        EXPECT_EQ(StatusOf(*s, "sim").state, PluginStatus::State::kActive)
            << StatusOf(*s, "sim").message;
      }
    }
    stop = true;
    reaper.join();
    if (ignore_sigchld) sigaction(SIGCHLD, &old, nullptr);
  }
}

// An embedder that tracks its children (Ray's KnownChildrenTracker, whose subreaper mode kills
// children it does not know) starts every plugin host through RegistryOptions::spawn_child.
TEST(Isolation, TheEmbedderSeesEveryPluginHostStart) {
  std::vector<pid_t> started;
  RegistryOptions options = Isolated({TestPlugin("crash-once"), SimPlugin()});
  options.spawn_child = [&](const std::function<pid_t()>& spawn) {
    pid_t pid = spawn();
    started.push_back(pid);
    return pid;
  };
  std::unique_ptr<Registry> registry = Make(options);
  EXPECT_EQ(started.size(), 2u);
  std::shared_ptr<const NodeSnapshot> s = registry->Rescan();  // crash-once comes back
  EXPECT_EQ(started.size(), 3u);
  for (pid_t pid : started) EXPECT_GT(pid, 0);
  EXPECT_EQ(kill(started[1], 0), 0) << "the sim plugin's host, still running";
}

// A plugin that signals its process group reaches only its own plugin host, or its own
// conformance check: both run in groups of their own. (setsid keeps this test's own group out
// of reach should that ever break.)
TEST(Isolation, APluginSignallingItsGroupCostsOnlyItself) {
  testing::CommandResult r = testing::Run(
      {"/usr/bin/setsid", "-w", RAYACCEL_CLI, "plugins", "--isolation", "process", "--plugin",
       testing::TestPlugin("kills-group"), "--plugin", testing::SimPlugin(), "--config",
       "sim.spec=" + testing::Example("dgx-h100.json")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto line_of = [&](const std::string& name) {
    size_t at = r.out.find("\n" + name + " ");
    return at == std::string::npos ? std::string()
                                   : r.out.substr(at + 1, r.out.find('\n', at + 1) - at - 1);
  };
  EXPECT_NE(line_of("sim").find("active  1.6  8"), std::string::npos) << r.out;
  EXPECT_NE(line_of("kills-group").find("crashed with signal 15 (Terminated) during discover"),
            std::string::npos)
      << r.out;

  testing::CommandResult suite =
      testing::Run({"/usr/bin/setsid", "-w", RAYACCEL_CONFORMANCE,
                    testing::TestPlugin("kills-group"), "--timeout", "5"});
  EXPECT_EQ(suite.exit_code, 1) << suite.err;  // it fails its checks, and the suite reports
  EXPECT_NE(suite.out.find("Tier reached"), std::string::npos) << suite.out;
  EXPECT_NE(suite.out.find("discovery.answers_valid"), std::string::npos) << suite.out;
}

// A helper a plugin leaves running keeps the check's output open: the suite says so, names
// no hang, and kills it with the check's group.
TEST(Isolation, AHelperLeftRunningIsNamedNotHung) {
  testing::CommandResult suite =
      testing::Run({"/usr/bin/setsid", "-w", RAYACCEL_CONFORMANCE,
                    testing::TestPlugin("spawns-helper"), "--timeout", "20"});
  EXPECT_EQ(suite.exit_code, 1) << suite.err;
  EXPECT_NE(suite.out.find("left a process running that holds the check's stdout or stderr"),
            std::string::npos)
      << suite.out;
  EXPECT_EQ(suite.out.find("hung:"), std::string::npos) << suite.out;
}

TEST(Isolation, ACrashedPluginIsRestarted) {
  std::string dir = testing::MakeTempDir("crash-once");
  RegistryOptions options = Isolated({TestPlugin("crash-once")});
  options.config["crash-once"]["marker"] = dir + "/crashed";
  std::unique_ptr<Registry> registry = Make(options);
  const PluginStatus& first = StatusOf(*registry->snapshot(), "crash-once");
  EXPECT_EQ(first.state, PluginStatus::State::kFailed);
  EXPECT_NE(first.message.find("crashed with signal 11"), std::string::npos) << first.message;
  EXPECT_NE(first.message.find("restart in 0 ms"), std::string::npos) << first.message;

  std::shared_ptr<const NodeSnapshot> again = registry->Rescan();
  const PluginStatus& second = StatusOf(*again, "crash-once");
  EXPECT_EQ(second.state, PluginStatus::State::kActive) << second.message;
  EXPECT_NE(second.message.find("restarted 1 time after: the plugin crashed with signal 11"),
            std::string::npos)
      << second.message;
  EXPECT_EQ(again->ray.resources.at("GPU"), 2);
}

// A plugin stuck in initialize does not hold Create() past the start deadline: the other
// plugins' devices are there at once, the stuck one shows as starting, and when its call times
// out a new snapshot says so.
TEST(Isolation, CreateReturnsByTheStartDeadline) {
  RegistryOptions options = Isolated({TestPlugin("init-hangs"), SimPlugin()});
  options.config["sim"]["spec"] = Example("dgx-h100.json");
  options.call_timeout_ms = 8000;
  options.restart_backoff_ms = 60000;
  options.start_deadline_ms = 2000;
  std::unique_ptr<Registry> registry = Make(options);
  std::shared_ptr<const NodeSnapshot> first = registry->snapshot();
  ASSERT_EQ(first->ray.resources.count("GPU"), 1u) << "sim did not start within 2 s";
  EXPECT_EQ(first->ray.resources.at("GPU"), 8);
  const PluginStatus& starting = StatusOf(*first, "init-hangs");
  EXPECT_EQ(starting.state, PluginStatus::State::kFailed);
  EXPECT_NE(starting.message.find("starting: initialize or the first discover did not return "
                                  "within the start deadline (2000 ms)"),
            std::string::npos)
      << starting.message;

  std::shared_ptr<const NodeSnapshot> later =
      registry->WaitForNewer(first->generation, std::chrono::seconds(30));
  ASSERT_GT(later->generation, first->generation);
  const PluginStatus& timed_out = StatusOf(*later, "init-hangs");
  EXPECT_EQ(timed_out.state, PluginStatus::State::kFailed);
  EXPECT_EQ(timed_out.message.find("starting:"), std::string::npos) << timed_out.message;
  EXPECT_NE(timed_out.message.find("restart in 60000 ms"), std::string::npos) << timed_out.message;
  EXPECT_EQ(later->ray.resources.count("GPU"), 1u);
}

// Without a deadline, Create() waits for every plugin, all at once.
TEST(Isolation, CreateWaitsForEveryPluginWithoutADeadline) {
  RegistryOptions options = Isolated({TestPlugin("slow-init"), SimPlugin()});
  options.config["sim"]["spec"] = Example("dgx-h100.json");
  std::unique_ptr<Registry> registry = Make(options);
  std::shared_ptr<const NodeSnapshot> snap = registry->snapshot();
  EXPECT_EQ(StatusOf(*snap, "slow-init").state, PluginStatus::State::kActive)
      << StatusOf(*snap, "slow-init").message;
  EXPECT_EQ(snap->generation, 1u);
}

// A plugin whose process dies during its health watch is published once, as failed with the
// cause and its restart time, like a crash during a scan; the restart waits out the backoff.
TEST(Isolation, ACrashDuringTheHealthWatchIsOneGenerationWithItsCause) {
  RegistryOptions options = Isolated({TestPlugin("health-crashes")});
  options.watch_health = true;
  options.restart_backoff_ms = 60000;
  std::unique_ptr<Registry> registry = Make(options);
  std::shared_ptr<const NodeSnapshot> first = registry->snapshot();
  ASSERT_EQ(StatusOf(*first, "health-crashes").state, PluginStatus::State::kActive);
  std::shared_ptr<const NodeSnapshot> crashed =
      registry->WaitForNewer(first->generation, std::chrono::seconds(20));
  ASSERT_EQ(crashed->generation, first->generation + 1);
  const PluginStatus& status = StatusOf(*crashed, "health-crashes");
  EXPECT_EQ(status.state, PluginStatus::State::kFailed);
  EXPECT_NE(status.message.find("crashed with signal 11"), std::string::npos) << status.message;
  EXPECT_NE(status.message.find("restart in 60000 ms"), std::string::npos) << status.message;
  // No second generation for the same crash.
  std::shared_ptr<const NodeSnapshot> after =
      registry->WaitForNewer(crashed->generation, std::chrono::milliseconds(1500));
  EXPECT_EQ(after->generation, crashed->generation) << StatusOf(*after, "health-crashes").message;
}

TEST(Isolation, BackoffHoldsTheRestart) {
  RegistryOptions options = Isolated({TestPlugin("segfault")});
  options.restart_backoff_ms = 60000;
  std::unique_ptr<Registry> registry = Make(options);
  std::shared_ptr<const NodeSnapshot> s = registry->Rescan();  // too early to restart
  EXPECT_NE(StatusOf(*s, "segfault").message.find("restart in 60000 ms"), std::string::npos)
      << StatusOf(*s, "segfault").message;
}

TEST(Isolation, MissingHostBinaryIsAPluginError) {
  RegistryOptions options = Isolated({SimPlugin()});
  options.plugin_host = "/nonexistent/rayaccel-plugin-host";
  std::unique_ptr<Registry> registry = Make(options);
  const PluginStatus& p = StatusOf(*registry->snapshot(), "sim");
  EXPECT_EQ(p.state, PluginStatus::State::kRefused);
  EXPECT_NE(p.message.find("cannot run /nonexistent/rayaccel-plugin-host"), std::string::npos)
      << p.message;
}

// The registry starts its children (plugin hosts, the hwloc XML check) with posix_spawn, which
// runs no pthread_atfork handlers: in a raylet or a Python process full of threads, fork()
// runs every library's, and gRPC's may abort the whole process. Here a handler that aborts
// stands for them.
TEST(Isolation, StartingChildrenRunsNoForkHandlers) {
  EXPECT_EXIT(
      {
        pthread_atfork(
            +[] { std::abort(); }, nullptr, nullptr);
        RegistryOptions options = Isolated({SimPlugin()});
        options.config["sim"]["spec"] = Example("dgx-h100.json");
        options.host_topology = true;
        options.hwloc_xml = testing::Fixture("hwloc/nvidiaDGX2.xml");
        auto registry = Registry::Create(options);
        if (!registry.ok()) std::_Exit(2);
        std::shared_ptr<const NodeSnapshot> snap = (*registry)->snapshot();
        std::fprintf(stderr, "%s\n", snap->host_topology.c_str());
        std::_Exit(StatusOf(*snap, "sim").state == PluginStatus::State::kActive ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "hwloc, XML .*nvidiaDGX2.xml");
}

TEST(Isolation, CliFlag) {
  if (kSanitized) GTEST_SKIP() << "the CLI's 4 GiB RLIMIT_AS leaves sanitizers no shadow memory";
  testing::CommandResult r =
      testing::Run({RAYACCEL_CLI, "resources", "--json", "--isolation", "process",
                    "--no-host-topology", "--plugin", TestPlugin("segfault"), "--plugin", "sim",
                    "--config", "sim.spec=" + Example("dgx-h100.json")},
                   {{"RAYACCEL_PLUGIN_PATH", ""}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "{\"GPU\": 8, \"accelerator_type:H100\": 1}\n");
}

}  // namespace
}  // namespace rayaccel
