#include "rayaccel/registry.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "isolation/remote_plugin.h"
#include "isolation/report_codec.h"
#include "ray/accelerator_type.h"
#include "ray/ray_mapping.h"
#include "registry/collector.h"
#include "registry/config.h"
#include "registry/plugin_loader.h"
#include "registry/replayed_plugin.h"
#include "registry/validate.h"
#include "spdlog/spdlog.h"
#include "topology/allocation.h"
#include "topology/enrich.h"
#include "topology/host_topology.h"
#include "util/log.h"

namespace rayaccel {

const char* HealthName(Health health) {
  switch (health) {
    case Health::kHealthy:
      return "healthy";
    case Health::kUnhealthy:
      return "unhealthy";
    default:
      return "unknown";
  }
}

const char* LinkTypeName(LinkType type) {
  switch (type) {
    case LinkType::kPcie:
      return "pcie";
    case LinkType::kNvlink:
      return "nvlink";
    case LinkType::kXgmi:
      return "xgmi";
    case LinkType::kIci:
      return "ici";
    case LinkType::kScaleOut:
      return "scale-out";
    default:
      return "other";
  }
}

const char* PciePathName(PciePath path) {
  static constexpr const char* kNames[] = {"", "PIX", "PXB", "PHB", "NODE", "SYS"};
  int i = static_cast<int>(path);
  return i >= 0 && i <= 5 ? kNames[i] : "";
}

const char* PluginStateName(PluginStatus::State state) {
  switch (state) {
    case PluginStatus::State::kActive:
      return "active";
    case PluginStatus::State::kDegraded:
      return "degraded";
    case PluginStatus::State::kFailed:
      return "failed";
    default:
      return "refused";
  }
}

namespace {

// The configuration name of the node's own settings (node.rack).
constexpr char kNodeConfig[] = "node";

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

// Whether `plugin`'s devices read the same in both snapshots (ids, health and reasons): what
// a health event is about.
bool SameDevices(const NodeSnapshot& a, const NodeSnapshot& b, const std::string& plugin) {
  auto view = [&](const NodeSnapshot& s) {
    std::vector<std::tuple<std::string, Health, std::string>> out;
    for (const Device& d : s.devices) {
      if (d.plugin == plugin) out.emplace_back(d.id, d.health, d.health_reason);
    }
    return out;
  };
  return view(a) == view(b);
}

void AppendMessage(std::string* message, const std::string& text) {
  if (text.empty()) return;
  if (!message->empty()) message->append("; ");
  message->append(text);
}

}  // namespace

class Registry::Impl : public std::enable_shared_from_this<Registry::Impl> {
 public:
  explicit Impl(RegistryOptions options) : options_(std::move(options)) {}
  ~Impl() {
    Shutdown();
    slots_.clear();  // plugins may log while they shut down
    RestoreLogSink(log_token_);
  }
  void set_log_token(uint64_t token) { log_token_ = token; }

  // Stops the watches and the subscription thread, wakes every WaitForNewer and returns once
  // none is left inside it; later calls answer from the last snapshot or fail Unavailable.
  void Shutdown() {
    {
      std::lock_guard<std::mutex> lock(snapshot_mu_);
      if (shut_down_) return;
      shut_down_ = true;
    }
    closing_ = true;
    published_.notify_all();
    StopWatching();
    if (notifier_.joinable()) {
      // The last handle on the registry may be let go from a subscriber's own callback.
      if (std::this_thread::get_id() == notifier_id_) {
        notifier_.detach();
      } else {
        notifier_.join();
      }
    }
    {
      std::unique_lock<std::mutex> lock(snapshot_mu_);
      published_.wait(lock, [&] { return waiters_ == 0; });
    }
    // The plugins go now, and the log callback with them, whatever thread may still hold this
    // state: a plugin still starting (its thread ends when its call returns; in-process, a
    // call that never returns keeps that one plugin).
    for (const std::unique_ptr<Slot>& slot : slots_) {
      if (slot->starting) continue;
      std::lock_guard<std::mutex> lock(slot->mu);
      slot->plugin.reset();
      slot->answer = nullptr;
      slot->first_answer = nullptr;
    }
    RestoreLogSink(log_token_);
  }

  RegistryStats stats() const {
    std::lock_guard<std::mutex> lock(stats_mu_);
    return stats_;
  }

  bool shut_down() const {
    std::lock_guard<std::mutex> lock(snapshot_mu_);
    return shut_down_;
  }

  uint64_t Subscribe(std::function<void(std::shared_ptr<const NodeSnapshot>)> callback) {
    std::lock_guard<std::mutex> lock(snapshot_mu_);
    if (shut_down_) return 0;
    const uint64_t id = ++last_subscription_;
    subscribers_.emplace(id, std::make_shared<Subscriber>(Subscriber{std::move(callback)}));
    if (!notifier_.joinable()) {
      // The thread holds the registry's state alive: a callback may let go of the registry,
      // and the state then ends with this thread, not under the callback's feet.
      notifier_ = std::thread([self = shared_from_this()] { self->Notify(); });
      notifier_id_ = notifier_.get_id();
    }
    published_.notify_all();  // the new subscriber's first snapshot
    return id;
  }

  // Waits for a callback in progress unless called from it (the notifier thread).
  void Unsubscribe(uint64_t id) {
    if (id == 0) return;  // subscribed after Shutdown: never delivered
    std::unique_lock<std::mutex> lock(snapshot_mu_);
    subscribers_.erase(id);
    if (std::this_thread::get_id() == notifier_id_) return;
    published_.wait(lock, [&] { return delivering_ != id; });
  }

  // One thread per plugin that offers health events; a change triggers a rescan. An isolated
  // plugin is watched through its host; after a crash the watch waits for the restart.
  void StartWatching() {
    if (!options_.watch_health) return;
    for (const std::unique_ptr<Slot>& s : slots_) {
      Slot* slot = s.get();
      if ((slot->capabilities & RAYACCEL_CAP_HEALTH_EVENTS) == 0) continue;
      std::string name = slot->name;
      watchers_.emplace_back([this, slot, name] {
        auto sleep = [this](std::chrono::milliseconds d) {
          for (auto waited = std::chrono::milliseconds(0); waited < d && !stopping_;
               waited += std::chrono::milliseconds(10)) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
        };
        // A watch that fails, or "changes" nothing a snapshot shows, would drive a rescan
        // storm: each such answer doubles a pause before the next wait (10 ms up to 1 s); a
        // real change clears it. Real changes are coalesced: at
        // most one health rescan per kMinInterval, later events join the next one.
        constexpr std::chrono::milliseconds kMinInterval{5};
        std::chrono::milliseconds backoff{0};
        auto back_off = [&] {
          backoff = std::min(std::chrono::milliseconds(1000),
                             std::max(std::chrono::milliseconds(10), 2 * backoff));
          sleep(backoff);
        };
        while (!stopping_) {
          if (slot->starting) {  // no health wait before initialize has returned
            sleep(std::chrono::milliseconds(50));
            continue;
          }
          std::shared_ptr<PluginHandle> plugin;
          {
            std::lock_guard<std::mutex> lock(slot->mu);
            // Failed to start in-process: nothing to watch, ever.
            if (slot->status.state == PluginStatus::State::kFailed && !slot->restartable) break;
            plugin = slot->plugin;
          }
          if (plugin == nullptr || !plugin->alive()) {
            sleep(std::chrono::milliseconds(1000));  // the next rescan restarts it
            continue;
          }
          try {
            PluginReport report;
            absl::Status st = plugin->WaitHealthEvents(200, &report);
            if (stopping_) break;
            if (!plugin->alive()) {
              // The plugin's process died while waiting: publish that (the rescan marks it
              // failed); a later rescan restarts it after its backoff.
              Log().warn("plugin {}: died during its health watch: {}", name,
                         EscapeControl(st.message()));
              {
                // Recorded as a crash during a scan is, with its cause and backoff, once: a
                // scan that saw the death first has marked it already.
                std::lock_guard<std::mutex> lock(slot->mu);
                if (slot->plugin == plugin && slot->status.state != PluginStatus::State::kFailed) {
                  MarkCrashed(slot, st);
                }
              }
              Rescan();
            } else if (st.ok()) {
              Log().info("plugin {}: health changed; rescanning", name);
              {
                std::lock_guard<std::mutex> lock(stats_mu_);
                ++stats_.health_events;
              }
              auto started = std::chrono::steady_clock::now();
              std::shared_ptr<const NodeSnapshot> before = snapshot();
              std::shared_ptr<const NodeSnapshot> after = Rescan();
              if (SameDevices(*before, *after, name)) {
                Log().debug("plugin {}: reported a change, but nothing changed", name);
                back_off();
              } else {
                backoff = std::chrono::milliseconds(0);
                sleep(std::chrono::duration_cast<std::chrono::milliseconds>(
                    kMinInterval - (std::chrono::steady_clock::now() - started)));
              }
            } else if (st.code() == absl::StatusCode::kUnimplemented) {
              Log().info("plugin {}: no health events: {}", name, EscapeControl(st.message()));
              break;
            } else if (st.code() != absl::StatusCode::kDeadlineExceeded) {
              // A transient failure: try again after the backoff, not stop watching for good.
              if (backoff.count() == 0) {
                Log().warn("plugin {}: health watch: {}", name, EscapeControl(st.message()));
              }
              back_off();
            }
          } catch (const std::exception& e) {
            Log().error("plugin {}: health watch: {}", name, e.what());
            back_off();
          }
        }
      });
    }
  }

  void StopWatching() {
    stopping_ = true;
    for (std::thread& t : watchers_) t.join();
    watchers_.clear();
  }

  std::shared_ptr<const NodeSnapshot> WaitForNewer(uint64_t generation,
                                                   std::chrono::milliseconds timeout) const {
    std::unique_lock<std::mutex> lock(snapshot_mu_);
    ++waiters_;
    published_.wait_for(lock, timeout,
                        [&] { return shut_down_ || snapshot_->generation > generation; });
    std::shared_ptr<const NodeSnapshot> snap = snapshot_;
    // The last thing done with this object: Shutdown (and so the destructor) waits for it.
    if (--waiters_ == 0 && shut_down_) published_.notify_all();
    return snap;
  }

 private:
  struct Subscriber {
    std::function<void(std::shared_ptr<const NodeSnapshot>)> callback;
    uint64_t delivered = 0;  // the generation it last saw
  };

  // The subscription thread: each subscriber sees every newer snapshot it has not seen, in
  // order of generations, one callback at a time; snapshots published while a callback runs
  // are coalesced into the newest.
  void Notify() {
    std::unique_lock<std::mutex> lock(snapshot_mu_);
    while (!shut_down_) {
      std::shared_ptr<const NodeSnapshot> snap = snapshot_;
      bool delivered_any = false;
      for (auto& [id, subscriber] : subscribers_) {
        if (subscriber->delivered >= snap->generation) continue;
        subscriber->delivered = snap->generation;
        delivering_ = id;
        std::shared_ptr<Subscriber> keep = subscriber;
        lock.unlock();
        try {
          keep->callback(snap);
        } catch (const std::exception& e) {
          Log().error("snapshot subscriber threw: {}", e.what());
        } catch (...) {
          Log().error("snapshot subscriber threw");
        }
        lock.lock();
        delivering_ = 0;
        published_.notify_all();  // an Unsubscribe may be waiting for this callback
        delivered_any = true;
        break;  // the map may have changed while unlocked: look again
      }
      if (!delivered_any) {
        published_.wait(lock, [&] {
          if (shut_down_) return true;
          for (const auto& [id, subscriber] : subscribers_) {
            if (subscriber->delivered < snapshot_->generation) return true;
          }
          return false;
        });
      }
    }
  }

 public:
  // A captured node's plugins, answering as they did (ReplayedPlugin); those the capture found
  // refused or failed stay so, with their message.
  absl::Status LoadReplay() {
    std::set<std::string> names;
    for (const CapturedPlugin& captured : options_.replay->plugins) {
      auto slot = std::make_unique<Slot>();
      slot->status = captured.status;
      for (std::string* text : {&slot->status.message, &slot->status.name, &slot->status.path,
                                &slot->status.abi_version}) {
        if (!CheckText(*text, "").ok()) *text = "(not valid text in the bundle)";
      }
      slot->name = slot->status.name;
      slot->path = slot->status.path;
      if (!names.insert(captured.status.name).second) {
        slot->status.state = PluginStatus::State::kRefused;
        slot->status.message = "a plugin of this name is already replayed";
      } else if (captured.status.state == PluginStatus::State::kActive ||
                 captured.status.state == PluginStatus::State::kDegraded) {
        slot->plugin = std::make_shared<ReplayedPlugin>(captured);
        slot->capabilities = slot->plugin->capabilities();
        slot->validates_quantity = true;
        slot->loaded = true;
        slot->status.state = PluginStatus::State::kActive;  // the scan judges the answer again
        slot->status.message.clear();
        slot->status.device_count = 0;
        Initialize(slot.get(), {});  // its properties pass the same checks as a live plugin's
      }
      slots_.push_back(std::move(slot));
    }
    host_description_ = options_.replay->host_topology;  // hwloc's part follows on first scan
    return absl::OkStatus();
  }

  absl::Status Load() {
    if (options_.replay != nullptr) return LoadReplay();
    if (options_.use_environment) environment_ = RayaccelEnvironment();  // before plugin code
    PluginConfig file_config;
    if (!options_.config_file.empty()) {
      absl::StatusOr<PluginConfig> parsed = ReadConfigFile(options_.config_file);
      if (!parsed.ok()) return parsed.status();
      file_config = *std::move(parsed);
    }
    std::vector<std::string> search =
        options_.search_path.empty() ? DefaultSearchPath() : options_.search_path;
    std::set<std::string> names;
    for (const PluginFile& file : FindPluginFiles(search, options_.plugins)) {
      // Simulated devices only when asked for: the sim plugin named, or configured explicitly
      // (options or config file). Found by the search alone (a stray RAYACCEL_SIM_SPEC on a
      // real node) it stays out.
      if (options_.plugins.empty() && file.name == "sim" && options_.config.count("sim") == 0 &&
          file_config.count("sim") == 0) {
        if (EnvironmentConfig("sim", environment_).count("spec") > 0) {
          Log().warn(
              "RAYACCEL_SIM_SPEC is set, but simulated devices load only when asked for "
              "(--plugin sim, or --config sim.spec=...): ignored");
        }
        continue;
      }
      auto slot = std::make_unique<Slot>();
      slot->status.name = file.name;
      slot->status.path = file.path;
      auto refuse = [&](const std::string& why) {
        slot->status.state = PluginStatus::State::kRefused;
        slot->status.message = why;
        Log().warn("plugin {} refused: {}", file.path.empty() ? file.name : file.path, why);
      };
      if (file.path.empty()) {
        refuse(absl::StrCat("not found: no ", PluginFileName(file.name), " in ",
                            search.empty() ? "(empty search path)" : absl::StrJoin(search, ":")));
      } else if (absl::Status perm =
                     options_.check_permissions ? CheckPermissions(file.path) : absl::OkStatus();
                 !perm.ok()) {
        refuse(std::string(perm.message()));
      } else if (absl::StatusOr<std::unique_ptr<PluginHandle>> opened = OpenPlugin(file.path);
                 !opened.ok()) {
        refuse(std::string(opened.status().message()));
      } else if (!names.insert((*opened)->name()).second) {
        refuse(absl::StrCat("a plugin named \"", (*opened)->name(), "\" is already loaded"));
      } else {
        slot->plugin = *std::move(opened);
        slot->restartable = options_.isolation == RegistryOptions::Isolation::kChildProcess;
        slot->status.name = slot->plugin->name();
        slot->status.abi_version = slot->plugin->abi_version();
        slot->status.capabilities = slot->plugin->capabilities();
        slot->capabilities = slot->status.capabilities;
        slot->validates_quantity = slot->plugin->has_validate_quantity();
        slot->loaded = true;
        slot->starting = true;  // initialize and the first discover follow (StartPlugins)
      }
      slot->name = slot->status.name;
      slot->path = slot->status.path;
      slot->file_config = file_config;
      slots_.push_back(std::move(slot));
    }
    host_description_ = options_.host_topology ? "not needed: no PCI devices" : "disabled";
    LoadNodeConfig(file_config, names);
    for (const auto& [plugin, unused] : options_.config) {
      if (names.count(plugin) == 0 && plugin != kNodeConfig) {
        Log().warn("configuration for plugin \"{}\", which is not loaded", plugin);
      }
    }
    return absl::OkStatus();
  }

  // The node's own settings, configured as a plugin's are under the name "node" (--config
  // node.rack=R12, RAYACCEL_NODE_RACK, "node.rack = R12" in the config file): what no plugin
  // can know about the machine it runs on. A plugin named "node" keeps its own configuration.
  void LoadNodeConfig(const PluginConfig& file_config, const std::set<std::string>& plugins) {
    if (plugins.count(kNodeConfig) > 0) return;
    for (const auto& [key, value] : ConfigOf(kNodeConfig, file_config)) {
      if (key != "rack") {
        Log().warn("node.{}: not a node setting (node.rack is); ignored", key);
      } else if (absl::Status st = CheckLabelValue(value); !st.ok()) {
        Log().warn("node.rack \"{}\" is not a label value ({}); rayaccel.io/rack not set", value,
                   std::string(st.message()));
      } else {
        rack_ = value;
      }
    }
  }

  // Runs each opened plugin's initialize and first discover on a thread of its own, so one
  // stuck there holds up no other, and waits until all have answered or the start deadline has
  // passed. A plugin still starting then joins a later snapshot: it rescans when it answers.
  // The threads hold the registry's state, so they may outlive the Registry.
  void StartPlugins() {
    std::vector<std::thread> threads;
    std::unique_lock<std::mutex> lock(start_mu_);
    for (const std::unique_ptr<Slot>& s : slots_) {
      if (!s->starting) continue;
      ++starting_;
      threads.emplace_back([self = shared_from_this(), slot = s.get()] { self->StartOne(slot); });
    }
    auto all_started = [&] { return starting_ == 0; };
    if (options_.start_deadline_ms == 0) {
      started_.wait(lock, all_started);
    } else {
      started_.wait_for(lock, std::chrono::milliseconds(options_.start_deadline_ms), all_started);
    }
    start_waited_ = true;
    const bool all = starting_ == 0;
    lock.unlock();
    for (std::thread& t : threads) {
      // All answered: none outlives Create. Otherwise those still starting go on alone.
      if (all) {
        t.join();
      } else {
        t.detach();
      }
    }
  }

  void StartOne(Slot* slot) {
    {
      std::lock_guard<std::mutex> lock(slot->mu);
      Initialize(slot, slot->file_config);
      if (!slot->plugin->alive()) {
        // A host that died or hung in initialize waits out its backoff like any crash: the
        // first scan must not start it again at once (and wait the whole timeout again).
        MarkCrashed(slot, absl::UnavailableError(slot->status.message));
      } else if (slot->status.state != PluginStatus::State::kFailed) {
        std::shared_ptr<const PluginReport> report;
        slot->first_status = slot->plugin->QueryShared(&report);
        slot->first_answer = std::move(report);
        slot->has_first_answer = true;
      }
      slot->starting = false;
    }
    bool late = false;
    {
      std::lock_guard<std::mutex> lock(start_mu_);
      late = start_waited_;
      --starting_;
    }
    started_.notify_all();
    if (late) Rescan();  // does nothing after Shutdown
  }

  std::shared_ptr<const NodeSnapshot> snapshot() const {
    std::lock_guard<std::mutex> lock(snapshot_mu_);
    return snapshot_;
  }

  std::shared_ptr<const NodeSnapshot> Rescan() {
    if (shut_down()) return snapshot();
    std::lock_guard<std::mutex> scan_lock(scan_mu_);
    const auto started = std::chrono::steady_clock::now();
    // Each plugin's answer, and everything else the snapshot is a function of, as bytes: when
    // they equal the last scan's (what an agent sees almost every time), the last snapshot
    // stands, generation and all: merging, enrichment and mapping are skipped, nobody is
    // woken, and leases on it stay valid. A new generation means something changed.
    struct Answer {
      PluginStatus status;
      std::shared_ptr<const PluginReport> report;  // to merge; none when the plugin failed
      std::string zero_devices_reason;
    };
    std::vector<Answer> answers;
    std::string inputs;
    for (const std::unique_ptr<Slot>& s : slots_) {
      Slot& slot = *s;
      if (closing_) return snapshot();  // Shutdown has begun: no restart, no new snapshot
      if (slot.starting) {
        // Not waited for: it joins a later snapshot when it answers (StartOne rescans).
        PluginStatus status;
        status.name = slot.name;
        status.path = slot.path;
        status.capabilities = slot.capabilities;
        status.state = PluginStatus::State::kFailed;
        status.message = absl::StrCat(
            "starting: initialize or the first discover did not return within the start "
            "deadline (",
            options_.start_deadline_ms, " ms); its devices join when it answers");
        answers.push_back({status, nullptr, ""});
        continue;
      }
      std::lock_guard<std::mutex> lock(slot.mu);
      PluginStatus status = slot.status;
      // The first discover, asked while starting, is judged here like any other answer.
      const bool first = slot.has_first_answer;
      if (first && (slot.plugin == nullptr || !slot.plugin->alive())) {
        // Its host died in the first discover or since; once recorded (a health watch may have
        // recorded it already), with the cause when there is one.
        slot.has_first_answer = false;
        slot.first_answer = nullptr;
        if (slot.status.state != PluginStatus::State::kFailed) {
          MarkCrashed(&slot,
                      slot.first_status.ok()
                          ? absl::UnavailableError("the plugin host ended after its first discover")
                          : slot.first_status);
        }
        slot.answer = nullptr;
        answers.push_back({slot.status, nullptr, ""});
        continue;
      }
      if (!first && slot.restartable && (slot.plugin == nullptr || !slot.plugin->alive())) {
        Restart(&slot);
        status = slot.status;
      }
      if (!first && (slot.plugin == nullptr || !slot.plugin->alive() ||
                     status.state == PluginStatus::State::kFailed)) {
        slot.answer = nullptr;
        answers.push_back({status, nullptr, ""});
        continue;
      }
      std::shared_ptr<const PluginReport> report;
      absl::Status st;
      if (first) {
        slot.has_first_answer = false;
        report = std::move(slot.first_answer);
        st = std::move(slot.first_status);
      } else {
        st = slot.plugin->QueryShared(&report);
      }
      if (!slot.plugin->alive()) {
        // Isolation did its job: the plugin's process is gone, the cause is in `st`.
        MarkCrashed(&slot, st);
        slot.answer = nullptr;
        answers.push_back({slot.status, nullptr, ""});
        continue;
      }
      slot.failures_in_a_row = 0;
      slot.answer = st.ok() && report != nullptr && !report->over_limit ? report : nullptr;
      if (!st.ok() || report == nullptr || report->over_limit) {
        status.state = PluginStatus::State::kFailed;
        status.message = !st.ok() || report == nullptr
                             ? std::string(st.message())
                             : absl::StrCat("answers refused as absurd: ",
                                            absl::StrJoin(report->problems, "; "));
        Log().warn("plugin {} failed: {}", status.name, status.message);
        answers.push_back({status, nullptr, ""});
        continue;
      }
      slot.plugin->AppendAnswerKey(*report, &inputs);
      answers.push_back({status, std::move(report), slot.plugin->zero_devices_reason()});
    }
    for (const Answer& a : answers) AppendInputs(a.status, a.zero_devices_reason, &inputs);
    const size_t answers_size = inputs.size();
    inputs.append(host_description_);

    auto snap = std::make_shared<NodeSnapshot>();
    std::shared_ptr<const NodeSnapshot> last = snapshot();
    const bool same = last != nullptr && inputs == last_inputs_;
    auto count = [&] {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.scans;
      if (!same) ++stats_.changes;
      stats_.scan_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    };
    if (same) {
      count();
      return last;
    }
    last_inputs_ = std::move(inputs);
    last_inputs_.resize(answers_size);  // the host's description is added once it is settled
    snap->generation = ++generation_;
    absl::flat_hash_set<std::string> ids;
    for (Answer& a : answers) {
      if (a.report) {
        Merge(*a.report, &ids, snap.get(), &a.status);
        if (a.status.device_count == 0 && a.status.message.empty()) {
          a.status.message = a.zero_devices_reason;
        }
        if (std::string w = ForeignResourceWarning(a.status.resource_name, a.status.vendor);
            !w.empty()) {
          a.status.message = a.status.message.empty() ? w : absl::StrCat(a.status.message, "; ", w);
        }
      }
      snap->plugins.push_back(std::move(a.status));
    }
    LoadHostTopologyIfNeeded(*snap);
    snap->host_topology = host_description_;
    // As it reads after this scan (hwloc loads on the first scan that finds a PCI device), so
    // that the next scan of the same node compares equal.
    last_inputs_.append(host_description_);
    if (host_ != nullptr) EnrichWithHostTopology(*host_, snap.get());
    RayMapping mapping = MapToRay(*snap);
    snap->ray = std::move(mapping.view);
    snap->resource_owners = std::move(mapping.owners);
    // A configured rack is the operator's word, over any plugin's rack domain.
    if (!rack_.empty()) snap->ray.labels["rayaccel.io/rack"] = rack_;
    for (PluginStatus& p : snap->plugins) {
      auto it = mapping.notes.find(p.name);
      if (it == mapping.notes.end()) continue;
      for (const std::string& note : it->second) AppendMessage(&p.message, note);
      if (p.state == PluginStatus::State::kActive) p.state = PluginStatus::State::kDegraded;
    }
    count();
    Publish(snap);
    return snap;
  }

  void Publish(std::shared_ptr<const NodeSnapshot> snap) {
    {
      std::lock_guard<std::mutex> snap_lock(snapshot_mu_);
      snapshot_ = std::move(snap);
    }
    published_.notify_all();
  }

  // A plugin's status as scan input (Rescan): every field, each with its size.
  static void AppendInputs(const PluginStatus& p, const std::string& zero_devices_reason,
                           std::string* out) {
    for (const std::string* f :
         {&p.name, &p.path, &p.message, &p.abi_version, &p.vendor, &p.plugin_version,
          &p.resource_name, &p.visible_devices_env, &zero_devices_reason}) {
      absl::StrAppend(out, f->size(), ":", *f);
    }
    absl::StrAppend(out, static_cast<int>(p.state), ",", p.capabilities, ";");
  }

  absl::Status ValidateQuantity(const std::string& resource, uint32_t quantity) const {
    if (quantity == 0) return absl::InvalidArgumentError("quantity must be at least 1");
    Slot* slot = SlotForResource(resource, *snapshot());
    if (slot == nullptr) {
      return absl::NotFoundError(absl::StrCat("no active plugin provides resource ", resource));
    }
    if (!slot->validates_quantity) return absl::OkStatus();  // no hook: nothing to ask
    std::lock_guard<std::mutex> lock(slot->mu);
    if (slot->plugin == nullptr || !slot->plugin->alive()) {
      return absl::UnavailableError(
          absl::StrCat("plugin ", slot->name, " is down: ", slot->status.message));
    }
    absl::Status st = slot->plugin->ValidateQuantity(quantity);
    if (!slot->plugin->alive()) MarkCrashed(slot, st);
    return st;
  }

  absl::StatusOr<Allocation> PreferredAllocation(const std::vector<std::string>& available_in,
                                                 const std::vector<std::string>& must_in,
                                                 size_t size, std::string resource) const {
    std::shared_ptr<const NodeSnapshot> snap = snapshot();
    absl::StatusOr<std::vector<size_t>> available = Resolve(*snap, available_in);
    if (!available.ok()) return available.status();
    absl::StatusOr<std::vector<size_t>> must = Resolve(*snap, must_in);
    if (!must.ok()) return must.status();
    // The family: named, else that of the given devices, else the first with devices.
    for (const std::vector<size_t>* list : {&*must, &*available}) {
      for (size_t p : *list) {
        const std::string& r = snap->devices[p].resource;
        if (resource.empty()) resource = r;
        if (r != resource) {
          return absl::InvalidArgumentError(
              absl::StrCat("device ", snap->devices[p].id, " is a ", r, ", not a ", resource,
                           ": one allocation takes devices of one family"));
        }
      }
    }
    if (resource.empty() && !snap->devices.empty()) resource = snap->devices[0].resource;
    // Only the plugin that gives this resource to Ray can be allocated from (two plugins may
    // both call their devices "GPU"; docs/ray-integration.md).
    auto owner = snap->resource_owners.find(resource);
    for (const std::vector<size_t>* list : {&*must, &*available}) {
      for (size_t p : *list) {
        if (owner == snap->resource_owners.end() || snap->devices[p].plugin != owner->second) {
          return absl::InvalidArgumentError(
              absl::StrCat("device ", snap->devices[p].id, " of plugin ", snap->devices[p].plugin,
                           " is not given to Ray as ", resource, ", so it cannot be allocated"));
        }
      }
    }
    if (available_in.empty() && owner != snap->resource_owners.end()) {
      std::set<std::string> parents;
      for (const Device& d : snap->devices) {
        if (!d.parent_id.empty()) parents.insert(d.parent_id);
      }
      for (size_t p = 0; p < snap->devices.size(); ++p) {
        const Device& d = snap->devices[p];
        if (d.plugin == owner->second && d.health != Health::kUnhealthy &&
            parents.count(d.id) == 0) {
          available->push_back(p);
        }
      }
    }
    Allocation none;
    none.generation = snap->generation;
    if (size > 1) {
      // A device its plugin marks "lease_alone" (a MIG instance: CUDA enumerates one per
      // process) is offered only in a set of one.
      auto alone = [&](size_t p) {
        for (const Attribute& a : snap->devices[p].attributes) {
          if (a.name == "lease_alone" && a.kind == Attribute::Kind::kBool && a.int_value != 0) {
            return true;
          }
        }
        return false;
      };
      for (size_t m : *must) {
        if (alone(m)) {
          none.reason = absl::StrCat("device ", snap->devices[m].id,
                                     " is leased alone (lease_alone), not in a set of ", size);
          return none;
        }
      }
      available->erase(std::remove_if(available->begin(), available->end(), alone),
                       available->end());
    }
    for (size_t m : *must) {
      if (std::find(available->begin(), available->end(), m) == available->end()) {
        none.reason =
            absl::StrCat("must-include device ", snap->devices[m].id, " is not available");
        return none;
      }
    }
    if (size == 0) {
      none.reason = "size must be at least 1";
    } else if (must->size() > size) {
      none.reason =
          absl::StrCat(must->size(), " devices must be included, more than the size ", size);
    } else if (available->size() < size) {
      none.reason = absl::StrCat("only ", available->size(), resource.empty() ? "" : " ", resource,
                                 " devices available, ", size, " requested");
    } else if (absl::Status st = ValidateQuantity(resource, static_cast<uint32_t>(size));
               !st.ok()) {
      none.reason = std::string(st.message());
    }
    if (!none.reason.empty()) return none;
    Allocation chosen =
        ChoosePreferred(*snap, *available, *must, size, options_.allocation_objective);
    for (size_t p : chosen.devices) chosen.device_ids.push_back(snap->devices[p].id);
    chosen.generation = snap->generation;
    return chosen;
  }

  // By ids: against an older generation the lease holds while the devices it names are still
  // there and not unhealthy (a change elsewhere on the node does not stale it).
  absl::StatusOr<std::map<std::string, std::string>> PrepareAllocation(
      const std::vector<std::string>& ids, uint64_t generation) const {
    std::shared_ptr<const NodeSnapshot> snap = snapshot();
    if (ids.empty()) return absl::InvalidArgumentError("no devices given");
    if (generation > snap->generation) {
      return absl::InvalidArgumentError(
          absl::StrCat("no snapshot ", generation, " yet: the current one is ", snap->generation));
    }
    const bool stale = generation != 0 && generation != snap->generation;
    absl::StatusOr<std::vector<size_t>> positions = Resolve(*snap, ids);
    if (!positions.ok() && stale && positions.status().code() == absl::StatusCode::kNotFound) {
      // Named in an older snapshot and gone since: the lease is stale, not malformed.
      return absl::FailedPreconditionError(
          absl::StrCat(positions.status().message(), " any more; snapshot ", generation,
                       " is stale, the current one is ", snap->generation));
    }
    if (!positions.ok()) return positions.status();
    if (stale) {
      for (size_t p : *positions) {
        const Device& d = snap->devices[p];
        if (d.health == Health::kUnhealthy) {
          return absl::FailedPreconditionError(
              absl::StrCat("device ", d.id, " is unhealthy now (", d.health_reason, "); snapshot ",
                           generation, " is stale, the current one is ", snap->generation));
        }
      }
    }
    return Prepare(*snap, *positions);
  }

  // By positions, which mean something only in the snapshot they were read from.
  absl::StatusOr<std::map<std::string, std::string>> PrepareAllocationAt(
      const std::vector<size_t>& positions, uint64_t generation) const {
    std::shared_ptr<const NodeSnapshot> snap = snapshot();
    if (generation != snap->generation) {
      return absl::FailedPreconditionError(
          absl::StrCat("positions refer to snapshot ", generation, "; the current one is ",
                       snap->generation, " (name devices by id to lease across snapshots)"));
    }
    if (positions.empty()) return absl::InvalidArgumentError("no devices given");
    for (size_t i = 0; i < positions.size(); ++i) {
      if (positions[i] >= snap->devices.size()) {
        return absl::NotFoundError(absl::StrCat("no device at position ", positions[i]));
      }
      if (std::find(positions.begin(), positions.begin() + i, positions[i]) !=
          positions.begin() + i) {
        return absl::InvalidArgumentError(absl::StrCat("position ", positions[i], " given twice"));
      }
    }
    return Prepare(*snap, positions);
  }

 private:
  // `positions` are valid and distinct in `snap`. The plugin is asked under its own lock about
  // its indices in its newest answer, which a scan in progress may have taken after `snap`.
  absl::StatusOr<std::map<std::string, std::string>> Prepare(
      const NodeSnapshot& snap, const std::vector<size_t>& positions) const {
    std::vector<const Device*> devices;
    for (size_t p : positions) devices.push_back(&snap.devices[p]);
    const std::string& plugin_name = devices.front()->plugin;
    for (const Device* d : devices) {
      if (d->plugin != plugin_name) {
        return absl::InvalidArgumentError(
            "devices of one allocation must come from one plugin (one accelerator family)");
      }
    }
    Slot* slot = SlotNamed(plugin_name);
    if (slot == nullptr) return absl::FailedPreconditionError("plugin is no longer loaded");
    std::lock_guard<std::mutex> lock(slot->mu);
    if (slot->plugin == nullptr || !slot->plugin->alive()) {
      return absl::UnavailableError(
          absl::StrCat("plugin ", plugin_name, " is down: ",
                       closing_ ? std::string("the registry is shut down") : slot->status.message));
    }
    if (slot->answer == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("plugin ", plugin_name, " failed its last discover"));
    }
    std::vector<uint32_t> indices;
    indices.reserve(devices.size());
    for (const Device* d : devices) {
      auto it = std::find_if(slot->answer->devices.begin(), slot->answer->devices.end(),
                             [&](const Device& r) { return r.id == d->id; });
      if (it == slot->answer->devices.end()) {
        return absl::FailedPreconditionError(
            absl::StrCat("device ", d->id, " is no longer reported by plugin ", plugin_name));
      }
      indices.push_back(it->index);
    }
    std::map<std::string, std::string> env;
    if (!slot->plugin->has_prepare_allocation()) {
      if (slot->status.visible_devices_env.empty()) {
        return absl::FailedPreconditionError(
            absl::StrCat("plugin ", plugin_name,
                         " has no prepare_allocation hook and no visible-devices variable"));
      }
      env[slot->status.visible_devices_env] = absl::StrJoin(indices, ",");
      return env;
    }
    auto set = slot->plugin->PrepareAllocation(indices);
    if (!slot->plugin->alive()) MarkCrashed(slot, set.status());
    if (!set.ok()) return set.status();
    for (auto& [name, value] : *set) {
      // A worker's environment is the plugin's to shape only for its devices: a variable
      // outside the family (LD_PRELOAD, PATH, ...) would run the worker differently.
      if (!InVisibleDevicesFamily(name, slot->status.visible_devices_env)) {
        return absl::PermissionDeniedError(
            absl::StrCat("plugin ", plugin_name, " set ", EscapeControl(name),
                         " for an allocation; only variables of its visible-devices family (",
                         slot->status.visible_devices_env.empty()
                             ? std::string("it declares none")
                             : slot->status.visible_devices_env.substr(
                                   0, slot->status.visible_devices_env.find('_') + 1) +
                                   "*",
                         ") may be set"));
      }
      env[name] = value;
    }
    return env;
  }

  absl::StatusOr<std::unique_ptr<PluginHandle>> OpenPlugin(const std::string& path) const {
    if (options_.isolation == RegistryOptions::Isolation::kInProcess) {
      absl::StatusOr<std::unique_ptr<LoadedPlugin>> p = LoadedPlugin::Open(path);
      if (!p.ok()) return p.status();
      return std::unique_ptr<PluginHandle>(*std::move(p));
    }
    isolation::RemoteOptions remote;
    remote.host_binary = options_.plugin_host.empty() ? DefaultPluginHost() : options_.plugin_host;
    remote.call_timeout = std::chrono::milliseconds(options_.call_timeout_ms);
    remote.memory_limit_bytes = options_.plugin_memory_limit_bytes;
    remote.spawn_child = options_.spawn_child;
    absl::StatusOr<std::unique_ptr<isolation::RemotePlugin>> p =
        isolation::RemotePlugin::Open(path, remote);
    if (!p.ok()) return p.status();
    return std::unique_ptr<PluginHandle>(*std::move(p));
  }

  std::chrono::milliseconds Backoff(int failures) const {
    uint64_t ms = options_.restart_backoff_ms;
    for (int i = 1; i < failures && ms < 60000; ++i) ms *= 2;
    return std::chrono::milliseconds(std::min<uint64_t>(ms, 60000));
  }

  // An isolated plugin's process died during a call (the cause in `st`): fail it and schedule
  // a restart. Caller holds slot->mu.
  void MarkCrashed(Slot* slot, const absl::Status& st) const {
    ++slot->failures_in_a_row;
    slot->crash = std::string(st.message());
    std::chrono::milliseconds wait = Backoff(slot->failures_in_a_row);
    slot->next_restart = std::chrono::steady_clock::now() + wait;
    slot->status.state = PluginStatus::State::kFailed;
    slot->status.message = absl::StrCat(slot->crash, "; restart in ", wait.count(), " ms");
    Log().warn("plugin {}: {}", slot->status.name, slot->status.message);
  }

  // Starts a crashed isolated plugin again once its backoff has passed, with the same checks
  // as the first load. The dead handle stays until a new one works, so it is retried later.
  void Restart(Slot* slot) {
    if (std::chrono::steady_clock::now() < slot->next_restart) return;
    ++slot->restarts;
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.plugin_restarts;
    }
    const std::string& path = slot->status.path;
    absl::Status ok = options_.check_permissions ? CheckPermissions(path) : absl::OkStatus();
    absl::StatusOr<std::unique_ptr<PluginHandle>> opened =
        ok.ok() ? OpenPlugin(path) : absl::StatusOr<std::unique_ptr<PluginHandle>>(ok);
    if (opened.ok() && (*opened)->name() != slot->status.name) {
      opened = absl::FailedPreconditionError(absl::StrCat("the plugin now calls itself \"",
                                                          (*opened)->name(), "\", not \"",
                                                          slot->status.name, "\""));
    }
    if (!opened.ok()) {
      MarkCrashed(slot, absl::Status(opened.status().code(),
                                     absl::StrCat("restart ", slot->restarts,
                                                  " failed: ", opened.status().message())));
      return;
    }
    slot->plugin = *std::move(opened);
    Initialize(slot, slot->file_config);
    if (!slot->plugin->alive()) {
      MarkCrashed(slot, absl::UnavailableError(absl::StrCat("restart ", slot->restarts,
                                                            " failed: ", slot->status.message)));
      return;
    }
    if (slot->status.state != PluginStatus::State::kFailed) {
      slot->status.message = absl::StrCat("restarted ", slot->restarts, " time",
                                          slot->restarts == 1 ? "" : "s", " after: ", slot->crash);
    }
  }

  // hwloc's view costs milliseconds to load (a full I/O discovery), so it is loaded on the
  // first scan that finds a PCI device, once: the PCI tree does not change under us.
  void LoadHostTopologyIfNeeded(const NodeSnapshot& snap) {
    if (!options_.host_topology || host_attempted_) return;
    bool any_pci = std::any_of(snap.devices.begin(), snap.devices.end(),
                               [](const Device& d) { return !d.pci_bus_id.empty(); });
    if (!any_pci) return;
    host_attempted_ = true;
    if (options_.replay != nullptr) {
      // The captured view: hwloc reads the captured XML, described as the capture described it.
      const CapturedNode& node = *options_.replay;
      constexpr absl::string_view kHwloc = "hwloc, ";
      if (node.hwloc_xml.empty() || !absl::StartsWith(node.host_topology, kHwloc)) {
        host_description_ = node.host_topology;
        return;
      }
      absl::StatusOr<std::unique_ptr<HostTopology>> host =
          HostTopology::LoadXml(node.hwloc_xml, node.host_topology.substr(kHwloc.size()));
      if (!host.ok()) {
        host_description_ = "unavailable: " + std::string(host.status().message());
        return;
      }
      host_ = *std::move(host);
      host_description_ = node.host_topology;
      return;
    }
    absl::StatusOr<std::unique_ptr<HostTopology>> host = HostTopology::Load(options_.hwloc_xml);
    if (host.ok()) {
      host_ = *std::move(host);
      host_description_ = "hwloc, " + host_->source();
    } else {
      host_description_ = "unavailable: " + std::string(host.status().message());
      Log().warn("host topology {}", host_description_);
    }
  }

  // Device ids to snapshot positions; each at most once.
  static absl::StatusOr<std::vector<size_t>> Resolve(const NodeSnapshot& snap,
                                                     const std::vector<std::string>& ids) {
    std::vector<size_t> out;
    out.reserve(ids.size());
    for (const std::string& id : ids) {
      size_t position = snap.devices.size();
      for (size_t p = 0; p < snap.devices.size() && position == snap.devices.size(); ++p) {
        if (snap.devices[p].id == id) position = p;
      }
      if (position == snap.devices.size()) {
        return absl::NotFoundError(absl::StrCat("no device \"", id, "\""));
      }
      if (std::find(out.begin(), out.end(), position) != out.end()) {
        return absl::InvalidArgumentError(absl::StrCat("device \"", id, "\" given twice"));
      }
      out.push_back(position);
    }
    return out;
  }

  // What `name` is configured with: the config file, then the environment, then the options.
  std::map<std::string, std::string> ConfigOf(const std::string& name,
                                              const PluginConfig& file_config) const {
    std::map<std::string, std::string> config;
    if (auto it = file_config.find(name); it != file_config.end()) config = it->second;
    if (options_.use_environment) {
      for (auto& [k, v] : EnvironmentConfig(name, environment_)) config[k] = v;
    }
    if (auto it = options_.config.find(name); it != options_.config.end()) {
      for (auto& [k, v] : it->second) config[k] = v;
    }
    return config;
  }

  void Initialize(Slot* slot, const PluginConfig& file_config) {
    const std::string& name = slot->plugin->name();
    std::map<std::string, std::string> config = ConfigOf(name, file_config);
    for (auto& [k, v] : options_.sole_plugin_config) config[k] = v;  // one plugin: checked
    PluginStatus& status = slot->status;
    auto fail = [&](const std::string& why) {
      status.state = PluginStatus::State::kFailed;
      status.message = why;
      Log().warn("plugin {} failed: {}", name, why);
    };
    if (absl::Status st = slot->plugin->Initialize(config); !st.ok()) {
      return fail(std::string(st.message()));
    }
    absl::StatusOr<PluginProperties> props = slot->plugin->GetProperties();
    if (!props.ok()) return fail(std::string(props.status().message()));
    status.vendor = props->vendor;
    status.resource_name = props->resource_name;
    status.visible_devices_env = props->visible_devices_env;
    status.plugin_version = props->plugin_version;
    if (absl::Status st = CheckResourceName(status.resource_name); !st.ok()) {
      return fail(absl::StrCat("get_properties: ", st.message()));
    }
    if (std::string warning = ForeignResourceWarning(status.resource_name, status.vendor);
        !warning.empty()) {
      Log().warn("plugin {}: {}", name, warning);
    }
    status.state = PluginStatus::State::kActive;
  }

  // Adds one plugin's report to the snapshot; refusals become notes in `status`.
  void Merge(const PluginReport& report, absl::flat_hash_set<std::string>* ids, NodeSnapshot* snap,
             PluginStatus* status) {
    std::vector<std::string> problems = report.problems;
    problems.insert(problems.end(), report.hook_failures.begin(), report.hook_failures.end());
    absl::flat_hash_map<uint32_t, size_t> position;  // plugin index -> snapshot position
    snap->devices.reserve(snap->devices.size() + report.devices.size());
    snap->links.reserve(snap->links.size() + report.links.size());
    for (Device d : report.devices) {
      if (!ids->insert(d.id).second) {
        problems.push_back(absl::StrCat("device ", d.index, ": id \"", d.id,
                                        "\" already reported by another plugin"));
        continue;
      }
      d.plugin = status->name;
      d.resource = status->resource_name;
      d.vendor = status->vendor;
      if (auto h = report.health.find(d.index); h != report.health.end()) {
        d.health = h->second.first;
        d.health_reason = h->second.second;
      }
      if (d.accelerator_type.empty()) {
        d.accelerator_type = AcceleratorTypeOf(status->vendor, d);
      }
      position[d.index] = snap->devices.size();
      snap->devices.push_back(std::move(d));
    }
    status->device_count = position.size();
    const std::string source = "plugin:" + status->name;
    for (const ReportedLink& l : report.links) {
      auto a = position.find(l.a), b = position.find(l.b);
      if (a == position.end() || b == position.end()) continue;  // device refused above
      snap->links.push_back(Link{std::min(a->second, b->second), std::max(a->second, b->second),
                                 l.type, l.count, l.bandwidth_mbps, l.pcie_path, source, l.weight,
                                 l.hops, l.min_bandwidth_mbps, l.type_name});
    }
    for (const ReportedDomain& r : report.domains) {
      Domain dom{status->name, r.kind, r.id, {}};
      for (uint32_t index : r.devices) {
        if (auto p = position.find(index); p != position.end()) dom.devices.push_back(p->second);
      }
      snap->domains.push_back(std::move(dom));
    }
    for (const auto& [key, value] : report.labels) {
      auto [it, inserted] = snap->plugin_labels.emplace(key, value);
      if (!inserted && it->second != value) {
        problems.push_back(absl::StrCat("label ", key, "=", value,
                                        " conflicts with another plugin's value ", it->second));
      }
    }
    if (!problems.empty()) {
      status->state = PluginStatus::State::kDegraded;
      status->message = absl::StrJoin(problems, "; ");
      Log().warn("plugin {} degraded: {}", status->name, status->message);
    }
  }

  // Ray's type string for a device that reported none; derived once per distinct device kind
  // (the derivation matches name patterns, and a node has few kinds).
  const std::string& AcceleratorTypeOf(const std::string& vendor, const Device& d) {
    std::string key =
        absl::StrCat(vendor, "\n", d.name, "\n", d.pci_vendor_id, ":", d.pci_device_id);
    auto it = accelerator_types_.find(key);
    if (it != accelerator_types_.end()) return it->second;
    if (accelerator_types_.size() >= 4096) accelerator_types_.clear();  // plugins name them
    return accelerator_types_
        .emplace(std::move(key),
                 DeriveAcceleratorType(vendor, d.name, d.pci_vendor_id, d.pci_device_id))
        .first->second;
  }

  // The plugin that gives `resource` to Ray (NodeSnapshot::resource_owners), else the first
  // active one that names it.
  Slot* SlotForResource(const std::string& resource, const NodeSnapshot& snap) const {
    if (auto owner = snap.resource_owners.find(resource); owner != snap.resource_owners.end()) {
      return SlotNamed(owner->second);
    }
    for (const PluginStatus& p : snap.plugins) {
      if (p.state != PluginStatus::State::kFailed && p.state != PluginStatus::State::kRefused &&
          p.resource_name == resource) {
        return SlotNamed(p.name);
      }
    }
    return nullptr;
  }

  // The loaded plugin of this name; takes no lock (names are fixed at load).
  Slot* SlotNamed(const std::string& name) const {
    for (const std::unique_ptr<Slot>& s : slots_) {
      if (s->loaded && s->name == name) return s.get();
    }
    return nullptr;
  }

 public:
  absl::StatusOr<CapturedNode> Capture() const {
    std::lock_guard<std::mutex> scan_lock(scan_mu_);
    std::shared_ptr<const NodeSnapshot> snap = snapshot();
    CapturedNode node;
    node.host_topology = snap->host_topology;
    if (host_ != nullptr) {
      absl::StatusOr<std::string> xml = host_->ExportXml();
      if (!xml.ok()) return xml.status();
      node.hwloc_xml = *std::move(xml);
    }
    for (const std::unique_ptr<Slot>& s : slots_) {
      Slot& slot = *s;
      CapturedPlugin c;
      std::unique_lock<std::mutex> slot_lock(slot.mu, std::defer_lock);
      if (slot.starting) {  // as the snapshot shows it; not waited for
        c.status.name = slot.name;
        c.status.path = slot.path;
        c.status.state = PluginStatus::State::kFailed;
      } else {
        slot_lock.lock();
        c.status = slot.status;
      }
      for (const PluginStatus& p : snap->plugins) {
        if (p.name == slot.name && p.path == slot.path) c.status = p;
      }
      const bool answered = c.status.state == PluginStatus::State::kActive ||
                            c.status.state == PluginStatus::State::kDegraded;
      if (answered && slot_lock.owns_lock() && slot.plugin != nullptr && slot.plugin->alive()) {
        PluginHandle& plugin = *slot.plugin;
        c.has_prepare_allocation = plugin.has_prepare_allocation();
        PluginReport report;
        if (absl::Status st = plugin.Query(&report); !st.ok()) {
          return absl::UnavailableError(
              absl::StrCat("capture: plugin ", c.status.name, ": ", st.message()));
        }
        c.zero_devices_reason = plugin.zero_devices_reason();
        isolation::EncodeReport(report, &c.report);
        std::vector<uint32_t> indices;
        for (const Device& d : report.devices) indices.push_back(d.index);
        std::sort(indices.begin(), indices.end());
        const size_t n = indices.size();
        for (uint32_t q = 1; q <= std::min<size_t>(n, 64); ++q) {
          absl::Status st = plugin.ValidateQuantity(q);
          c.quantities[q] = st.ok() ? "" : std::string(st.message());
        }
        if (c.has_prepare_allocation && n > 0) {
          std::vector<std::vector<uint32_t>> sets;
          for (uint32_t i : indices) sets.push_back({i});
          for (size_t a = 0; n <= 16 && a < n; ++a) {
            for (size_t b = a + 1; b < n; ++b) sets.push_back({indices[a], indices[b]});
          }
          if (n > 2) sets.push_back(indices);
          // Every device but the parents of partitions (a GPU in MIG mode): a whole-node lease
          // where partitions exist.
          std::set<std::string> parents;
          for (const Device& d : report.devices) {
            if (!d.parent_id.empty()) parents.insert(d.parent_id);
          }
          std::vector<uint32_t> leaves;
          for (const Device& d : report.devices) {
            if (parents.count(d.id) == 0) leaves.push_back(d.index);
          }
          std::sort(leaves.begin(), leaves.end());
          if (leaves.size() > 1 && std::find(sets.begin(), sets.end(), leaves) == sets.end()) {
            sets.push_back(leaves);
          }
          for (const std::vector<uint32_t>& set : sets) {
            CapturedPlugin::AllocationAnswer answer;
            answer.indices = set;
            absl::StatusOr<EnvList> env = plugin.PrepareAllocation(set);
            if (env.ok()) {
              answer.env.insert(env->begin(), env->end());
            } else {
              answer.error = std::string(env.status().message());
              if (answer.error.empty()) answer.error = "refused";
            }
            c.allocations.push_back(std::move(answer));
          }
        }
        if (!plugin.alive()) {
          return absl::UnavailableError(absl::StrCat("capture: plugin ", c.status.name,
                                                     " died while its answers were recorded"));
        }
      }
      node.plugins.push_back(std::move(c));
    }
    return node;
  }

 private:
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

void PluginHandle::AppendAnswerKey(const PluginReport& report, std::string* key) const {
  isolation::EncodeReport(report, key);
}

absl::Status PluginHandle::QueryShared(std::shared_ptr<const PluginReport>* report) {
  auto fresh = std::make_shared<PluginReport>();
  absl::Status st = Query(fresh.get());
  *report = std::move(fresh);
  return st;
}

Registry::Registry(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Registry::~Registry() { impl_->Shutdown(); }

void Registry::Shutdown() { impl_->Shutdown(); }
RegistryStats Registry::stats() const { return impl_->stats(); }

Registry::Subscription::~Subscription() {
  if (std::shared_ptr<Impl> impl = impl_.lock()) impl->Unsubscribe(id_);
}

std::unique_ptr<Registry::Subscription> Registry::Subscribe(
    std::function<void(std::shared_ptr<const NodeSnapshot>)> on_snapshot) {
  std::unique_ptr<Subscription> s(new Subscription());
  s->impl_ = impl_;
  s->id_ = impl_->Subscribe(std::move(on_snapshot));
  return s;
}

absl::StatusOr<std::unique_ptr<Registry>> Registry::Create(RegistryOptions options) {
  if (!options.sole_plugin_config.empty() && options.plugins.size() != 1) {
    return absl::InvalidArgumentError(
        "configuration without a plugin name needs exactly one plugin: name it (PLUGIN.KEY)");
  }
  const uint64_t log_token = SetLogSink(options.log_level, options.log_callback);
  auto impl = std::make_shared<Impl>(std::move(options));
  impl->set_log_token(log_token);
  if (absl::Status st = impl->Load(); !st.ok()) return st;
  impl->StartPlugins();
  std::unique_ptr<Registry> registry(new Registry(std::move(impl)));
  registry->Rescan();
  registry->impl_->StartWatching();
  return registry;
}

std::shared_ptr<const NodeSnapshot> Registry::snapshot() const { return impl_->snapshot(); }
absl::StatusOr<CapturedNode> Registry::Capture() const { return impl_->Capture(); }
std::shared_ptr<const NodeSnapshot> Registry::Rescan() { return impl_->Rescan(); }

std::shared_ptr<const NodeSnapshot> Registry::WaitForNewer(
    uint64_t generation, std::chrono::milliseconds timeout) const {
  return impl_->WaitForNewer(generation, timeout);
}

absl::Status Registry::ValidateQuantity(const std::string& resource, uint32_t quantity) const {
  return impl_->ValidateQuantity(resource, quantity);
}

absl::StatusOr<Allocation> Registry::PreferredAllocation(
    const std::vector<std::string>& available, const std::vector<std::string>& must_include,
    size_t size, const std::string& resource) const {
  return impl_->PreferredAllocation(available, must_include, size, resource);
}

absl::StatusOr<std::map<std::string, std::string>> Registry::PrepareAllocation(
    const std::vector<std::string>& device_ids, uint64_t generation) const {
  return impl_->PrepareAllocation(device_ids, generation);
}

absl::StatusOr<std::map<std::string, std::string>> Registry::PrepareAllocationAt(
    const std::vector<size_t>& positions, uint64_t generation) const {
  return impl_->PrepareAllocationAt(positions, generation);
}

}  // namespace rayaccel
