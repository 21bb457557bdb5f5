// The plugins' lives: loading them (files, isolation, replay), starting, restarting and
// shutting them down, and their configuration.
#include <algorithm>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "isolation/remote_plugin.h"
#include "loader/plugin_loader.h"
#include "model/validate.h"
#include "ray/ray_mapping.h"
#include "registry/registry_impl.h"
#include "registry/replayed_plugin.h"
#include "util/log.h"

namespace rayaccel {

namespace {

// The configuration name of the node's own settings (node.rack).
constexpr char kNodeConfig[] = "node";

}  // namespace

Registry::Impl::~Impl() {
  Shutdown();
  slots_.clear();  // plugins may log while they shut down
  RestoreLogSink(log_token_);
}

void Registry::Impl::Shutdown() {
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

absl::Status Registry::Impl::LoadReplay() {
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

absl::Status Registry::Impl::Load() {
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

void Registry::Impl::LoadNodeConfig(const PluginConfig& file_config,
                                    const std::set<std::string>& plugins) {
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

void Registry::Impl::StartPlugins() {
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

void Registry::Impl::StartOne(Slot* slot) {
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

absl::StatusOr<std::unique_ptr<PluginHandle>> Registry::Impl::OpenPlugin(
    const std::string& path) const {
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

std::chrono::milliseconds Registry::Impl::Backoff(int failures) const {
  uint64_t ms = options_.restart_backoff_ms;
  for (int i = 1; i < failures && ms < 60000; ++i) ms *= 2;
  return std::chrono::milliseconds(std::min<uint64_t>(ms, 60000));
}

void Registry::Impl::MarkCrashed(Slot* slot, const absl::Status& st) const {
  ++slot->failures_in_a_row;
  slot->crash = std::string(st.message());
  std::chrono::milliseconds wait = Backoff(slot->failures_in_a_row);
  slot->next_restart = std::chrono::steady_clock::now() + wait;
  slot->status.state = PluginStatus::State::kFailed;
  slot->status.message = absl::StrCat(slot->crash, "; restart in ", wait.count(), " ms");
  Log().warn("plugin {}: {}", slot->status.name, slot->status.message);
}

void Registry::Impl::Restart(Slot* slot) {
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

std::map<std::string, std::string> Registry::Impl::ConfigOf(const std::string& name,
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

void Registry::Impl::Initialize(Slot* slot, const PluginConfig& file_config) {
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

}  // namespace rayaccel
