// rayaccel/registry.h: the C++ API of librayaccel, the library the raylet links.
//
// A Registry loads accelerator plugins (see plugin.h), validates everything they return,
// merges them into one immutable NodeSnapshot and maps it to Ray's resources and labels.
// A misbehaving plugin is refused or degraded with a reason; it never takes the others down.
//
//   rayaccel::RegistryOptions options;               // defaults: search the usual places
//   auto registry = rayaccel::Registry::Create(options);
//   if (!registry.ok()) ...;
//   std::shared_ptr<const rayaccel::NodeSnapshot> snap = (*registry)->snapshot();
//   for (const auto& [name, quantity] : snap->ray.resources) ...
//
// Thread-safety: all Registry methods may be called from any thread.
#ifndef RAYACCEL_REGISTRY_H_
#define RAYACCEL_REGISTRY_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

// clang-format off
#include "rayaccel/abseil_abi.h"  // first: a mismatch stops here, clearly
// clang-format on
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rayaccel/log_level.h"
#include "rayaccel/snapshot.h"  // the node's model: NodeSnapshot and what it holds

namespace rayaccel {

// Fields grouped by meaning, not packed: one is built per process.
struct RegistryOptions {  // NOLINT(clang-analyzer-optin.performance.Padding)
  // Folders to search for plugin files (librayaccel-<name>.so). Empty: RAYACCEL_PLUGIN_PATH
  // (colon-separated), then ../lib/rayaccel/plugins next to the running binary and next to
  // librayaccel itself.
  std::vector<std::string> search_path;
  // Load only these plugins: names ("sim") looked up on the search path, or file paths.
  // Empty: every plugin found on the search path.
  std::vector<std::string> plugins;
  // Per-plugin configuration handed to each plugin's initialize hook, from three sources,
  // highest precedence first:
  //   1. `config`, e.g. config["sim"]["spec"] = "examples/dgx-h100.json" (the CLI's --config);
  //   2. the environment, RAYACCEL_<PLUGIN>_<KEY> (RAYACCEL_SIM_SPEC), when use_environment;
  //   3. `config_file`, lines of "plugin.key = value" ('#' starts a comment).
  std::map<std::string, std::map<std::string, std::string>> config;
  // Configuration for the one plugin `plugins` names, whatever its table calls it (the CLI's
  // `--config KEY=VALUE` with one --plugin); beats `config`. Create() refuses it unless
  // `plugins` names exactly one plugin.
  std::map<std::string, std::string> sole_plugin_config;
  bool use_environment = true;
  std::string config_file;
  // Refuse plugin files and folders writable by others than their owner or root.
  bool check_permissions = true;
  // Enrich devices with hwloc's view of the host (NUMA node, CPUs, NICs, PCIe paths).
  bool host_topology = true;
  // An exported hwloc XML topology to use instead of this machine's (HWLOC_XMLFILE, hwloc's
  // own variable, does the same when this is empty).
  std::string hwloc_xml;

  // Where plugins run. In-process is fastest, but a segfault, abort or hang in vendor code
  // takes the host with it. In a child process each (rayaccel-plugin-host), such a fault
  // marks that plugin failed with the cause; it is restarted on a later Rescan, after
  // restart_backoff doubling up to a minute. The memory limit is RLIMIT_DATA (written memory,
  // not the address space that GPU runtimes reserve).
  enum class Isolation { kInProcess, kChildProcess };
  Isolation isolation = Isolation::kInProcess;
  std::string plugin_host;  // empty: rayaccel-plugin-host next to the running binary
  uint32_t call_timeout_ms = 10000;
  uint32_t restart_backoff_ms = 1000;
  // How long Create() waits for the plugins' initialize and first discover, which run on a
  // thread per plugin. 0: until every plugin has answered (isolated: each within
  // call_timeout_ms, all at once). Otherwise Create() returns by then; a plugin still starting
  // shows as failed with "starting: ..." and its devices join a later snapshot (a new
  // generation) when it answers. In-process, a plugin that never returns keeps its thread.
  uint32_t start_deadline_ms = 0;
  uint64_t plugin_memory_limit_bytes = uint64_t{4} << 30;  // per plugin process; 0: no limit
  // Every plugin host is started through this when set: call `spawn` once (it forks and execs
  // the host; it may run on any thread) and return what it returns, the host's pid, or -1.
  // For an embedder that tracks its children: a raylet in subreaper mode kills the children it
  // does not know (Ray's KnownChildrenTracker::addKnownChild takes exactly such a function).
  // Hosts are ordinary children: a process that ignores SIGCHLD or reaps every child still
  // gets the cause of a plugin's crash (the host notes its fatal signal). docs/embedding.md.
  std::function<pid_t(const std::function<pid_t()>& spawn)> spawn_child;

  AllocationObjective allocation_objective = AllocationObjective::kWholePartition;

  // Replay a captured node instead of loading plugins: its plugins answer as they did, through
  // the same checks, and hwloc reads the captured topology. Plugin options are then unused.
  std::shared_ptr<const CapturedNode> replay;

  // Where librayaccel's log lines go (its own and the plugins', which arrive through the host
  // API): `log_callback` with each line and its level (empty: stderr), at `log_level` and
  // above. Never stdout, and never spdlog's default logger, which stays the embedder's. The
  // library has one logger per process: Create() applies these, the newest registry alive
  // decides, and when it goes the one before it decides again (or stderr), so a callback is
  // never called after its registry is gone. It may run on any thread, one
  // line at a time; it must not call back into the registry.
  LogLevel log_level = LogLevel::kWarning;
  std::function<void(LogLevel level, const std::string& line)> log_callback;

  // Watch the health of plugins that offer RAYACCEL_CAP_HEALTH_EVENTS from a thread each
  // (isolated ones through their host): a reported change triggers a rescan, so a new snapshot
  // follows at once; so does an isolated plugin's death during the watch.
  bool watch_health = false;
};

// What a registry has done since it was created, for metrics.
struct RegistryStats {
  uint64_t scans = 0;            // scans that asked the plugins (the first included)
  uint64_t changes = 0;          // scans that found a change: new generations
  uint64_t health_events = 0;    // health-watch wake-ups that led to a scan
  uint64_t plugin_restarts = 0;  // isolated plugins started again after a crash
  double scan_seconds = 0;       // the time those scans took, in all
};

// Threads and blocking. Every method may be called from any thread. Each plugin has its own
// lock: a call into one plugin waits only for other calls into that plugin, never for another
// plugin. How long a call can block, at worst, when a plugin does not answer: isolated, a
// plugin call ends after call_timeout_ms (the host is then killed and the call fails);
// in-process, nothing can end it, which is what isolation is for.
//
//   snapshot(), stats(), Subscribe()        never block on plugins (a short lock)
//   PreferredAllocation()                   calls no plugin unless the family's plugin has a
//                                           validate_quantity hook: then one call into it
//   ValidateQuantity(), PrepareAllocation*() one call into the one plugin the devices belong to
//   Rescan(), Capture()                     a call into every plugin, one plugin after another,
//                                           after any scan in progress (one scan at a time)
//   Create()                                loads the plugins one after another (isolated:
//                                           each host's start within call_timeout_ms), then
//                                           waits for their initialize and first discover,
//                                           all at once, up to start_deadline_ms
//   WaitForNewer()                          until its timeout, a newer snapshot or Shutdown
//   Shutdown(), ~Registry(), ~Subscription  for a subscriber's callback in progress and any
//                                           health watch's call in progress (isolated: up to
//                                           200 ms); not for a plugin still starting
class Registry {
  class Impl;

 public:
  // Loads the plugins and takes the first snapshot (blocking: above). Fails only for errors of
  // rayaccel itself (a named plugin file that does not exist is a plugin status, not a failure).
  static absl::StatusOr<std::unique_ptr<Registry>> Create(RegistryOptions options);
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The current snapshot; never null.
  std::shared_ptr<const NodeSnapshot> snapshot() const;

  // Asks every loaded plugin again and publishes a new snapshot (generation + 1).
  std::shared_ptr<const NodeSnapshot> Rescan();

  // Waits until a snapshot newer than `generation` is published (a rescan that found a change,
  // or a health change when watch_health is on), `timeout` passes, or Shutdown; returns the
  // current snapshot either way.
  std::shared_ptr<const NodeSnapshot> WaitForNewer(uint64_t generation,
                                                   std::chrono::milliseconds timeout) const;

  // Calls `on_snapshot` with the current snapshot and then with each newer one, on a thread of
  // the registry's: one call at a time, in order of generations; snapshots published during a
  // call are coalesced into the newest. The callback may call the registry (a lease, a rescan);
  // an exception it throws is logged. Delivery ends when the handle is destroyed (waiting for a
  // call in progress, unless destroyed from within the callback) or at Shutdown.
  class Subscription {
   public:
    ~Subscription();
    Subscription(const Subscription&) = delete;
    Subscription& operator=(const Subscription&) = delete;

   private:
    friend class Registry;
    Subscription() = default;
    std::weak_ptr<Impl> impl_;
    uint64_t id_ = 0;
  };
  std::unique_ptr<Subscription> Subscribe(
      std::function<void(std::shared_ptr<const NodeSnapshot>)> on_snapshot);

  RegistryStats stats() const;

  // Stops health watches and subscriptions, wakes every WaitForNewer and returns once no thread
  // is left inside one. Afterwards snapshot() and WaitForNewer answer with the last snapshot and
  // Rescan does nothing. The destructor calls it: destroying a Registry while other threads
  // wait in WaitForNewer is safe (starting a call on a destroyed one is not).
  void Shutdown();

  // Whether `quantity` devices of `resource` may be requested together (plugin hook).
  absl::Status ValidateQuantity(const std::string& resource, uint32_t quantity) const;

  // What each device is doing now: every plugin with get_telemetry (ABI 1.6) asked once, one
  // after another, an isolated one within its call timeout. A plugin whose call fails, times
  // out or crashes has the reason in `plugins` and no samples; the others are unaffected.
  // Samples are of the devices of the current snapshot (by id); calls no other hook.
  Telemetry SampleTelemetry() const;

  // The best `size` devices of one family for a request (docs/topology.md): from
  // `available_ids` (device ids; empty: every healthy, schedulable device of `resource`),
  // always including `must_include_ids`. `resource` empty: the family of the given devices,
  // else the first family. An impossible request is an Allocation with no devices and the
  // reason; malformed input (unknown device, mixed families) is an error. Calls no plugin
  // unless the family's plugin has a validate_quantity hook.
  absl::StatusOr<Allocation> PreferredAllocation(const std::vector<std::string>& available_ids,
                                                 const std::vector<std::string>& must_include_ids,
                                                 size_t size,
                                                 const std::string& resource = "") const;

  // The environment a worker needs to use exactly these devices, named by id. All devices must
  // come from one plugin. With `generation` set to an older snapshot than the current one, the
  // lease holds while the devices it names are still there and not unhealthy (a change
  // elsewhere on the node does not stale it); otherwise FailedPrecondition says which device
  // changed. The plugin is asked about its devices as it last reported them.
  absl::StatusOr<std::map<std::string, std::string>> PrepareAllocation(
      const std::vector<std::string>& device_ids, uint64_t generation = 0) const;
  // The same for devices named by their positions in NodeSnapshot::devices, which mean
  // something only in the snapshot they were read from: FailedPrecondition unless `generation`
  // is the current one.
  absl::StatusOr<std::map<std::string, std::string>> PrepareAllocationAt(
      const std::vector<size_t>& positions, uint64_t generation) const;

  // Asks every plugin again and records its answers, the allocation environments for each
  // device alone, pairs (up to 16 devices), all and all but partition parents, validate_quantity
  // for 1..N (up to 64), and hwloc's view: what RegistryOptions::replay needs to give the same
  // snapshot elsewhere.
  absl::StatusOr<CapturedNode> Capture() const;

 private:
  explicit Registry(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;  // shared with subscriptions, which may outlive the registry
};

}  // namespace rayaccel

#endif  // RAYACCEL_REGISTRY_H_
