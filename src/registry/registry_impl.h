// Registry::Impl: the registry's state, shared by the files that operate on it, one concern
// each:
//   lifecycle.cc  loading plugins (files, isolation, replay), starting, restarting and
//                 shutting them down, and their configuration
//   scan.cc       a scan: every plugin asked, the answers merged, enriched and mapped to Ray
//   watch.cc      health watches, subscriptions and WaitForNewer
//   leases.cc     ValidateQuantity, PreferredAllocation and PrepareAllocation
//   telemetry.cc  SampleTelemetry
//   capture.cc    Capture
// and registry.cc, the public Registry over it. Which lock guards what is said at each member;
// the blocking contract is rayaccel/registry.h's table.
#ifndef RAYACCEL_REGISTRY_REGISTRY_IMPL_H_
#define RAYACCEL_REGISTRY_REGISTRY_IMPL_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "loader/plugin_handle.h"
#include "rayaccel/registry.h"
#include "registry/config.h"
#include "topology/host_topology.h"

namespace rayaccel {

struct Registry::Impl : public std::enable_shared_from_this<Registry::Impl> {
  // A plugin slot: the loaded plugin (null when refused) and its status. Each slot has its own
  // lock, so a plugin stuck in a call holds up callers of that plugin only.
  struct Slot {
    // Set at load and never changed: how a snapshot's devices find their slot, and what a scan
    // says of a plugin still starting.
    std::string name;
    std::string path;
    bool loaded = false;              // opened (not refused): `plugin` is never null
    bool validates_quantity = false;  // it has a validate_quantity hook
    uint32_t capabilities = 0;        // the table's; 0 for a refused file
    // Set while the plugin's initialize and first discover run on a thread of their own
    // (StartPlugins); a scan reports it as starting rather than wait for it.
    std::atomic<bool> starting{false};
    std::mutex mu;  // one caller into the plugin at a time; guards everything below
    // Shared with the slot's health watch, which keeps a handle alive through a restart.
    std::shared_ptr<PluginHandle> plugin;
    PluginStatus status;  // static part: name, path, properties; state before any rescan
    PluginConfig file_config;
    // The plugin's newest good answer: a lease maps device ids to the plugin's indices in it.
    std::shared_ptr<const PluginReport> answer;
    // The first discover, asked by the starting thread, for the first scan to use.
    bool has_first_answer = false;
    std::shared_ptr<const PluginReport> first_answer;
    absl::Status first_status;
    // Isolated plugins: a process that died is started again after a backoff.
    bool restartable = false;  // opened once in a child process
    std::chrono::steady_clock::time_point next_restart;
    int restarts = 0;           // in all, for the status message
    int failures_in_a_row = 0;  // for the backoff; reset by a good scan
    std::string crash;          // the last cause
  };

  explicit Impl(RegistryOptions options) : options_(std::move(options)) {}

  void set_log_token(uint64_t token) { log_token_ = token; }

  RegistryStats stats() const {
    std::lock_guard<std::mutex> lock(stats_mu_);
    return stats_;
  }

  bool shut_down() const {
    std::lock_guard<std::mutex> lock(snapshot_mu_);
    return shut_down_;
  }

  std::shared_ptr<const NodeSnapshot> snapshot() const {
    std::lock_guard<std::mutex> lock(snapshot_mu_);
    return snapshot_;
  }

  void Publish(std::shared_ptr<const NodeSnapshot> snap) {
    {
      std::lock_guard<std::mutex> snap_lock(snapshot_mu_);
      snapshot_ = std::move(snap);
    }
    published_.notify_all();
  }

  // lifecycle.cc
  ~Impl();

  // Stops the watches and the subscription thread, wakes every WaitForNewer and returns once
  // none is left inside it; later calls answer from the last snapshot or fail Unavailable.
  void Shutdown();

  // A captured node's plugins, answering as they did (ReplayedPlugin); those the capture found
  // refused or failed stay so, with their message.
  absl::Status LoadReplay();

  absl::Status Load();

  // The node's own settings, configured as a plugin's are under the name "node" (--config
  // node.rack=R12, RAYACCEL_NODE_RACK, "node.rack = R12" in the config file): what no plugin
  // can know about the machine it runs on. A plugin named "node" keeps its own configuration.
  void LoadNodeConfig(const PluginConfig& file_config, const std::set<std::string>& plugins);

  // Runs each opened plugin's initialize and first discover on a thread of its own, so one
  // stuck there holds up no other, and waits until all have answered or the start deadline has
  // passed. A plugin still starting then joins a later snapshot: it rescans when it answers.
  // The threads hold the registry's state, so they may outlive the Registry.
  void StartPlugins();

  void StartOne(Slot* slot);

  absl::StatusOr<std::unique_ptr<PluginHandle>> OpenPlugin(const std::string& path) const;

  std::chrono::milliseconds Backoff(int failures) const;

  // An isolated plugin's process died during a call (the cause in `st`): fail it and schedule
  // a restart. Caller holds slot->mu.
  void MarkCrashed(Slot* slot, const absl::Status& st) const;

  // Starts a crashed isolated plugin again once its backoff has passed, with the same checks
  // as the first load. The dead handle stays until a new one works, so it is retried later.
  void Restart(Slot* slot);

  // What `name` is configured with: the config file, then the environment, then the options.
  std::map<std::string, std::string> ConfigOf(const std::string& name,
                                              const PluginConfig& file_config) const;

  void Initialize(Slot* slot, const PluginConfig& file_config);

  // scan.cc
  std::shared_ptr<const NodeSnapshot> Rescan();

  // A plugin's status as scan input (Rescan): every field, each with its size.
  static void AppendInputs(const PluginStatus& p, const std::string& zero_devices_reason,
                           std::string* out);

  // hwloc's view costs milliseconds to load (a full I/O discovery), so it is loaded on the
  // first scan that finds a PCI device, once: the PCI tree does not change under us.
  void LoadHostTopologyIfNeeded(const NodeSnapshot& snap);

  // Adds one plugin's report to the snapshot; refusals become notes in `status`.
  void Merge(const PluginReport& report, absl::flat_hash_set<std::string>* ids, NodeSnapshot* snap,
             PluginStatus* status);

  // Ray's type string for a device that reported none; derived once per distinct device kind
  // (the derivation matches name patterns, and a node has few kinds).
  const std::string& AcceleratorTypeOf(const std::string& vendor, const Device& d);

  // watch.cc
  uint64_t Subscribe(std::function<void(std::shared_ptr<const NodeSnapshot>)> callback);

  // Waits for a callback in progress unless called from it (the notifier thread).
  void Unsubscribe(uint64_t id);

  // One thread per plugin that offers health events; a change triggers a rescan. An isolated
  // plugin is watched through its host; after a crash the watch waits for the restart.
  void StartWatching();

  void StopWatching();

  std::shared_ptr<const NodeSnapshot> WaitForNewer(uint64_t generation,
                                                   std::chrono::milliseconds timeout) const;

  // The subscription thread: each subscriber sees every newer snapshot it has not seen, in
  // order of generations, one callback at a time; snapshots published while a callback runs
  // are coalesced into the newest.
  void Notify();

  // leases.cc
  absl::Status ValidateQuantity(const std::string& resource, uint32_t quantity) const;
  Telemetry SampleTelemetry() const;

  absl::StatusOr<Allocation> PreferredAllocation(const std::vector<std::string>& available_in,
                                                 const std::vector<std::string>& must_in,
                                                 size_t size, std::string resource) const;

  // By ids: against an older generation the lease holds while the devices it names are still
  // there and not unhealthy (a change elsewhere on the node does not stale it).
  absl::StatusOr<std::map<std::string, std::string>> PrepareAllocation(
      const std::vector<std::string>& ids, uint64_t generation) const;

  // By positions, which mean something only in the snapshot they were read from.
  absl::StatusOr<std::map<std::string, std::string>> PrepareAllocationAt(
      const std::vector<size_t>& positions, uint64_t generation) const;

  // `positions` are valid and distinct in `snap`. The plugin is asked under its own lock about
  // its indices in its newest answer, which a scan in progress may have taken after `snap`.
  absl::StatusOr<std::map<std::string, std::string>> Prepare(
      const NodeSnapshot& snap, const std::vector<size_t>& positions) const;

  // Device ids to snapshot positions; each at most once.
  static absl::StatusOr<std::vector<size_t>> Resolve(const NodeSnapshot& snap,
                                                     const std::vector<std::string>& ids);

  // The plugin that gives `resource` to Ray (NodeSnapshot::resource_owners), else the first
  // active one that names it.
  Slot* SlotForResource(const std::string& resource, const NodeSnapshot& snap) const;

  // The loaded plugin of this name; takes no lock (names are fixed at load).
  Slot* SlotNamed(const std::string& name) const;

  // capture.cc
  absl::StatusOr<CapturedNode> Capture() const;

  // The state.
  struct Subscriber {
    std::function<void(std::shared_ptr<const NodeSnapshot>)> callback;
    uint64_t delivered = 0;  // the generation it last saw
  };

  RegistryOptions options_;
  std::vector<std::string> environment_;  // RAYACCEL_* as it was before any plugin ran
  std::string rack_;                      // node.rack, checked
  // One scan at a time (Rescan, Capture); it guards what a scan builds from: the five below and
  // last_inputs_. Lease calls take only the lock of the plugin they ask (Slot::mu), so a
  // plugin stuck in a scan holds up no lease on another plugin.
  mutable std::mutex scan_mu_;
  std::unique_ptr<HostTopology> host_;
  bool host_attempted_ = false;
  std::string host_description_;
  absl::flat_hash_map<std::string, std::string> accelerator_types_;
  uint64_t generation_ = 0;
  // Fixed after Load (each slot guards itself); const calls may mark a crash in one.
  std::vector<std::unique_ptr<Slot>> slots_;
  mutable std::mutex start_mu_;  // the three below: plugins still starting (StartPlugins)
  std::condition_variable started_;
  int starting_ = 0;
  bool start_waited_ = false;  // Create has stopped waiting: a plugin starting late rescans
  mutable std::mutex stats_mu_;
  RegistryStats stats_;     // guarded by stats_mu_
  uint64_t log_token_ = 0;  // this registry's log sink (RegistryOptions::log_callback)
  mutable std::mutex snapshot_mu_;
  mutable std::condition_variable published_;  // a new snapshot_, shutdown, a waiter leaving
  bool shut_down_ = false;                     // guarded by snapshot_mu_, like the four below
  mutable int waiters_ = 0;                    // threads inside WaitForNewer
  std::map<uint64_t, std::shared_ptr<Subscriber>> subscribers_;
  uint64_t last_subscription_ = 0;
  uint64_t delivering_ = 0;  // the subscription whose callback runs now, 0 none
  std::thread notifier_;
  std::thread::id notifier_id_;  // guarded by snapshot_mu_; set once, with notifier_
  std::shared_ptr<const NodeSnapshot> snapshot_;
  std::string last_inputs_;  // what snapshot_ was built from (Rescan); guarded by scan_mu_
  std::atomic<bool> stopping_{false};
  std::atomic<bool> closing_{false};  // Shutdown has begun
  std::vector<std::thread> watchers_;
};

}  // namespace rayaccel

#endif  // RAYACCEL_REGISTRY_REGISTRY_IMPL_H_
