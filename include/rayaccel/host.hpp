// rayaccel/host.hpp: the C API of rayaccel/host.h in standard C++17 types, header-only.
//
// For a C++ host built with any Abseil, gRPC or protobuf, or none (Ray's raylet): it includes
// nothing but the C header and the standard library, and links librayaccel.so through the C
// functions alone. Snapshots are copied into plain structs (std::string, std::vector,
// std::map); errors are rayaccel::host::Status, a code of plugin.h's rayaccel_status and a
// message. rayaccel/registry.h is the richer C++ API in Abseil's types, for hosts built with
// the same packages as rayaccel.
#ifndef RAYACCEL_HOST_HPP_
#define RAYACCEL_HOST_HPP_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rayaccel/host.h"

namespace rayaccel::host {

// A call's outcome: ok, or a code (plugin.h's rayaccel_status) and why.
class Status {
 public:
  Status() = default;
  Status(rayaccel_status code, std::string message) : code_(code), message_(std::move(message)) {}
  bool ok() const { return code_ == RAYACCEL_STATUS_OK; }
  rayaccel_status code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  rayaccel_status code_ = RAYACCEL_STATUS_OK;
  std::string message_;
};

// A value or the Status that says why there is none.
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {}  // NOLINT(google-explicit-constructor)
  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() { return *value_; }
  const T& value() const { return *value_; }
  T* operator->() { return &*value_; }
  T& operator*() { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

struct Attribute {
  std::string name;
  rayaccel_attribute_kind kind = RAYACCEL_ATTRIBUTE_STRING;
  std::string string_value;
  int64_t int_value = 0;
};

struct Device {
  std::string id, plugin, resource;
  uint32_t index = 0;
  std::string name, vendor, accelerator_type, architecture;
  uint64_t memory_bytes = 0;
  std::string pci_bus_id;
  uint32_t pci_vendor_id = 0, pci_device_id = 0;
  int32_t numa_node = -1;
  std::string driver_version, firmware_version, parent_id, partition_profile;
  rayaccel_health health = RAYACCEL_HEALTH_UNKNOWN;
  std::string health_reason, cpuset;
  std::vector<std::string> nearest_nics;
  std::vector<Attribute> attributes;
};

struct Link {
  size_t a = 0, b = 0;  // positions in Snapshot::devices
  rayaccel_link_type type = RAYACCEL_LINK_PCIE;
  std::string type_name;
  uint32_t count = 0;
  uint64_t bandwidth_mbps = 0;
  rayaccel_pcie_path pcie_path = RAYACCEL_PCIE_PATH_UNKNOWN;
  std::string source;
  uint32_t weight = 0, hops = 0;
  uint64_t min_bandwidth_mbps = 0;
};

struct Domain {
  std::string plugin, kind, id;
  std::vector<size_t> devices;
};

struct Plugin {
  std::string name, path;
  rayaccel_plugin_state state = RAYACCEL_PLUGIN_REFUSED;
  std::string message, abi_version, vendor, plugin_version, resource_name, visible_devices_env;
  uint64_t capabilities = 0;
  size_t device_count = 0;
};

// One snapshot of the node, copied out of the library.
struct Snapshot {
  uint64_t generation = 0;
  std::vector<Device> devices;
  std::vector<Link> links;
  std::vector<Domain> domains;
  std::vector<Plugin> plugins;
  std::map<std::string, double> resources;    // Ray's resources_total
  std::map<std::string, std::string> labels;  // Ray's node labels
  std::string host_topology;
};

struct Allocation {
  uint64_t generation = 0;
  std::vector<size_t> devices;
  std::vector<std::string> device_ids;
  std::string reason;
  int64_t link_score = 0, leftover_score = 0;
};

struct Stats {
  uint64_t scans = 0, changes = 0, health_events = 0, plugin_restarts = 0;
  double scan_seconds = 0;
};

// Registry::SampleTelemetry (host API 1.1): each device's sample, a value holding only where
// its RAYACCEL_SAMPLE_* bit is in `sample.known`, and each plugin's error and unknown fields.
struct DeviceTelemetry {
  std::string device_id;
  std::string plugin;
  rayaccel_device_sample sample{};
};
struct PluginTelemetry {
  std::string name;
  std::string error;
  double seconds = 0;
  std::map<uint32_t, std::string> unknown;  // RAYACCEL_SAMPLE_* bits -> why
};
struct Telemetry {
  int64_t unix_ms = 0;
  std::vector<DeviceTelemetry> devices;
  std::vector<PluginTelemetry> plugins;
};

struct Options {
  std::vector<std::string> search_path;
  std::vector<std::string> plugins;
  std::map<std::string, std::map<std::string, std::string>> config;  // plugin -> key -> value
  bool use_environment = true;
  std::string config_file;
  bool check_permissions = true;
  bool host_topology = true;
  std::string hwloc_xml;
  rayaccel_isolation isolation = RAYACCEL_ISOLATION_IN_PROCESS;
  std::string plugin_host;
  uint32_t call_timeout_ms = 0, restart_backoff_ms = 0, start_deadline_ms = 0;
  uint64_t plugin_memory_limit_bytes = 0;
  rayaccel_allocation_objective allocation_objective = RAYACCEL_OBJECTIVE_WHOLE_PARTITION;
  rayaccel_log_level log_level = RAYACCEL_LOG_WARN;
  std::function<void(rayaccel_log_level, const char*)> log;  // empty: stderr
  // Starts a plugin host: call `spawn` once and return its pid (Ray's KnownChildrenTracker).
  std::function<pid_t(const std::function<pid_t()>& spawn)> spawn_child;
  bool watch_health = false;
};

namespace internal {

class Error {
 public:
  Error() { error_.message = buffer_, error_.capacity = sizeof(buffer_); }
  rayaccel_error* get() { return &error_; }
  Status status(rayaccel_status code) const { return Status(code, buffer_); }

 private:
  char buffer_[1024] = {};
  rayaccel_error error_ = {sizeof(rayaccel_error), nullptr, 0};
};

inline std::string Str(const char* s) { return s != nullptr ? s : ""; }

inline Snapshot Copy(const rayaccel_snapshot* s) {
  Snapshot out;
  rayaccel_snapshot_info info{sizeof(info)};
  if (rayaccel_snapshot_get_info(s, &info, nullptr) != RAYACCEL_STATUS_OK) return out;
  out.generation = info.generation;
  out.host_topology = Str(info.host_topology);
  for (size_t i = 0; i < info.device_count; ++i) {
    rayaccel_device_view v{sizeof(v)};
    if (rayaccel_snapshot_get_device(s, i, &v, nullptr) != RAYACCEL_STATUS_OK) continue;
    Device d;
    d.id = Str(v.id), d.plugin = Str(v.plugin), d.resource = Str(v.resource), d.index = v.index;
    d.name = Str(v.name), d.vendor = Str(v.vendor);
    d.accelerator_type = Str(v.accelerator_type), d.architecture = Str(v.architecture);
    d.memory_bytes = v.memory_bytes, d.pci_bus_id = Str(v.pci_bus_id);
    d.pci_vendor_id = v.pci_vendor_id, d.pci_device_id = v.pci_device_id;
    d.numa_node = v.numa_node;
    d.driver_version = Str(v.driver_version), d.firmware_version = Str(v.firmware_version);
    d.parent_id = Str(v.parent_id), d.partition_profile = Str(v.partition_profile);
    d.health = v.health, d.health_reason = Str(v.health_reason), d.cpuset = Str(v.cpuset);
    for (size_t n = 0; n < v.nearest_nic_count; ++n) d.nearest_nics.push_back(v.nearest_nics[n]);
    for (size_t a = 0; a < v.attribute_count; ++a) {
      rayaccel_attribute_view av{sizeof(av)};
      if (rayaccel_snapshot_get_attribute(s, i, a, &av, nullptr) != RAYACCEL_STATUS_OK) continue;
      d.attributes.push_back({Str(av.name), av.kind, Str(av.string_value), av.int_value});
    }
    out.devices.push_back(std::move(d));
  }
  for (size_t i = 0; i < info.link_count; ++i) {
    rayaccel_link_view v{sizeof(v)};
    if (rayaccel_snapshot_get_link(s, i, &v, nullptr) != RAYACCEL_STATUS_OK) continue;
    out.links.push_back({v.a, v.b, v.type, Str(v.type_name), v.count, v.bandwidth_mbps, v.pcie_path,
                         Str(v.source), v.weight, v.hops, v.min_bandwidth_mbps});
  }
  for (size_t i = 0; i < info.domain_count; ++i) {
    rayaccel_domain_view v{sizeof(v)};
    if (rayaccel_snapshot_get_domain(s, i, &v, nullptr) != RAYACCEL_STATUS_OK) continue;
    out.domains.push_back(
        {Str(v.plugin), Str(v.kind), Str(v.id), {v.devices, v.devices + v.device_count}});
  }
  for (size_t i = 0; i < info.plugin_count; ++i) {
    rayaccel_plugin_view v{sizeof(v)};
    if (rayaccel_snapshot_get_plugin(s, i, &v, nullptr) != RAYACCEL_STATUS_OK) continue;
    out.plugins.push_back({Str(v.name), Str(v.path), v.state, Str(v.message), Str(v.abi_version),
                           Str(v.vendor), Str(v.plugin_version), Str(v.resource_name),
                           Str(v.visible_devices_env), v.capabilities, v.device_count});
  }
  for (size_t i = 0; i < info.resource_count; ++i) {
    const char* name = nullptr;
    double quantity = 0;
    if (rayaccel_snapshot_get_resource(s, i, &name, &quantity, nullptr) == RAYACCEL_STATUS_OK) {
      out.resources[name] = quantity;
    }
  }
  for (size_t i = 0; i < info.label_count; ++i) {
    const char *key = nullptr, *value = nullptr;
    if (rayaccel_snapshot_get_label(s, i, &key, &value, nullptr) == RAYACCEL_STATUS_OK) {
      out.labels[key] = value;
    }
  }
  return out;
}

// Takes a held snapshot, copies it and lets it go.
inline Snapshot Take(rayaccel_snapshot* s) {
  Snapshot out = Copy(s);
  rayaccel_snapshot_release(s);
  return out;
}

inline std::vector<const char*> Pointers(const std::vector<std::string>& v) {
  std::vector<const char*> out;
  for (const std::string& s : v) out.push_back(s.c_str());
  return out;
}

}  // namespace internal

class Registry {
 public:
  class Subscription {
   public:
    ~Subscription() { rayaccel_subscription_destroy(handle_); }
    Subscription(const Subscription&) = delete;
    Subscription& operator=(const Subscription&) = delete;

   private:
    friend class Registry;
    using Callback = std::function<void(const Snapshot&)>;
    explicit Subscription(Callback callback) : callback_(std::move(callback)) {}
    static void Deliver(void* self, rayaccel_snapshot* s) {
      static_cast<Subscription*>(self)->callback_(internal::Copy(s));
    }
    Callback callback_;
    rayaccel_subscription* handle_ = nullptr;
  };

  // Loads the plugins and takes the first snapshot (blocking as rayaccel_registry_create).
  static Result<Registry> Create(Options options) {
    auto held = std::make_unique<Held>();
    held->options = std::move(options);
    const Options& o = held->options;
    rayaccel_registry_options c = RAYACCEL_REGISTRY_OPTIONS_INIT;
    std::vector<const char*> search = internal::Pointers(o.search_path);
    std::vector<const char*> plugins = internal::Pointers(o.plugins);
    std::vector<rayaccel_host_config_entry> config;
    for (const auto& [plugin, values] : o.config) {
      for (const auto& [key, value] : values) {
        config.push_back(
            {sizeof(rayaccel_host_config_entry), plugin.c_str(), key.c_str(), value.c_str()});
      }
    }
    c.search_path = search.data(), c.search_path_count = search.size();
    c.plugins = plugins.data(), c.plugins_count = plugins.size();
    c.config = config.data(), c.config_count = config.size();
    c.ignore_environment = !o.use_environment;
    c.config_file = o.config_file.empty() ? nullptr : o.config_file.c_str();
    c.allow_unsafe_permissions = !o.check_permissions;
    c.no_host_topology = !o.host_topology;
    c.hwloc_xml = o.hwloc_xml.empty() ? nullptr : o.hwloc_xml.c_str();
    c.isolation = o.isolation;
    c.plugin_host = o.plugin_host.empty() ? nullptr : o.plugin_host.c_str();
    c.call_timeout_ms = o.call_timeout_ms, c.restart_backoff_ms = o.restart_backoff_ms;
    c.start_deadline_ms = o.start_deadline_ms;
    c.plugin_memory_limit_bytes = o.plugin_memory_limit_bytes;
    c.allocation_objective = o.allocation_objective;
    c.log_level = o.log_level;
    if (o.log) c.log = Held::Log, c.log_user_data = held.get();
    if (o.spawn_child) c.spawn_child = Held::Spawn, c.spawn_user_data = held.get();
    c.watch_health = o.watch_health;
    internal::Error e;
    rayaccel_registry* r = nullptr;
    if (rayaccel_status st = rayaccel_registry_create(&c, &r, e.get()); st != RAYACCEL_STATUS_OK) {
      return e.status(st);
    }
    return Registry(r, std::move(held));
  }

  Registry(Registry&& other) noexcept
      : registry_(std::exchange(other.registry_, nullptr)), held_(std::move(other.held_)) {}
  Registry& operator=(Registry&& other) noexcept {
    if (this != &other) {
      rayaccel_registry_destroy(registry_);
      registry_ = std::exchange(other.registry_, nullptr);
      held_ = std::move(other.held_);
    }
    return *this;
  }
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;
  ~Registry() { rayaccel_registry_destroy(registry_); }  // before held_: the callbacks go last

  Snapshot snapshot() const { return SnapshotOf(registry_, rayaccel_registry_snapshot); }
  Snapshot Rescan() { return SnapshotOf(registry_, rayaccel_registry_rescan); }
  Snapshot WaitForNewer(uint64_t generation, std::chrono::milliseconds timeout) const {
    rayaccel_snapshot* s = nullptr;
    if (rayaccel_registry_wait_for_newer(registry_, generation,
                                         static_cast<uint32_t>(timeout.count()), &s,
                                         nullptr) != RAYACCEL_STATUS_OK) {
      return {};
    }
    return internal::Take(s);
  }

  // `on_snapshot` with the current snapshot, then each newer one, on a thread of the
  // registry's, until the handle goes.
  Result<std::unique_ptr<Subscription>> Subscribe(
      std::function<void(const Snapshot&)> on_snapshot) {
    std::unique_ptr<Subscription> s(new Subscription(std::move(on_snapshot)));
    internal::Error e;
    if (rayaccel_status st = rayaccel_registry_subscribe(registry_, Subscription::Deliver, s.get(),
                                                         &s->handle_, e.get());
        st != RAYACCEL_STATUS_OK) {
      return e.status(st);
    }
    return s;
  }

  Status ValidateQuantity(const std::string& resource, uint32_t quantity) const {
    internal::Error e;
    rayaccel_status st =
        rayaccel_registry_validate_quantity(registry_, resource.c_str(), quantity, e.get());
    return st == RAYACCEL_STATUS_OK ? Status() : e.status(st);
  }

  Result<Allocation> PreferredAllocation(const std::vector<std::string>& available_ids,
                                         const std::vector<std::string>& must_include_ids,
                                         size_t size, const std::string& resource = "") const {
    std::vector<const char*> available = internal::Pointers(available_ids);
    std::vector<const char*> must = internal::Pointers(must_include_ids);
    rayaccel_preferred_allocation_args args{sizeof(args)};
    args.available_ids = available.data(), args.available_count = available.size();
    args.must_include_ids = must.data(), args.must_include_count = must.size();
    args.size = size;
    args.resource = resource.c_str();
    internal::Error e;
    rayaccel_allocation* a = nullptr;
    if (rayaccel_status st = rayaccel_registry_preferred_allocation(registry_, &args, &a, e.get());
        st != RAYACCEL_STATUS_OK) {
      return e.status(st);
    }
    rayaccel_allocation_view v{sizeof(v)};
    rayaccel_allocation_get(a, &v, nullptr);
    Allocation out;
    out.generation = v.generation;
    out.devices.assign(v.devices, v.devices + v.device_count);
    out.device_ids.assign(v.device_ids, v.device_ids + v.device_count);
    out.reason = internal::Str(v.reason);
    out.link_score = v.link_score, out.leftover_score = v.leftover_score;
    rayaccel_allocation_destroy(a);
    return out;
  }

  Result<std::map<std::string, std::string>> PrepareAllocation(
      const std::vector<std::string>& device_ids, uint64_t generation = 0) const {
    std::vector<const char*> ids = internal::Pointers(device_ids);
    rayaccel_prepare_allocation_args args{sizeof(args)};
    args.device_ids = ids.data(), args.device_count = ids.size(), args.generation = generation;
    internal::Error e;
    rayaccel_environment* env = nullptr;
    if (rayaccel_status st = rayaccel_registry_prepare_allocation(registry_, &args, &env, e.get());
        st != RAYACCEL_STATUS_OK) {
      return e.status(st);
    }
    std::map<std::string, std::string> out;
    for (size_t i = 0; i < rayaccel_environment_count(env); ++i) {
      const char *name = nullptr, *value = nullptr;
      if (rayaccel_environment_get(env, i, &name, &value, nullptr) == RAYACCEL_STATUS_OK) {
        out[name] = value;
      }
    }
    rayaccel_environment_destroy(env);
    return out;
  }

  Stats stats() const {
    rayaccel_registry_stats s{sizeof(s)};
    rayaccel_registry_get_stats(registry_, &s, nullptr);
    return {s.scans, s.changes, s.health_events, s.plugin_restarts, s.scan_seconds};
  }

  // Blocks up to each isolated plugin's call timeout; a library older than host API 1.1 has
  // no such call (check rayaccel_host_api_version() first).
  Result<Telemetry> SampleTelemetry() const {
    rayaccel_telemetry* t = nullptr;
    internal::Error e;
    if (rayaccel_status st = rayaccel_registry_sample_telemetry(registry_, &t, e.get());
        st != RAYACCEL_STATUS_OK) {
      return e.status(st);
    }
    Telemetry out;
    rayaccel_telemetry_info info{sizeof(info)};
    rayaccel_telemetry_get_info(t, &info, nullptr);
    out.unix_ms = info.unix_ms;
    for (size_t i = 0; i < info.device_count; ++i) {
      rayaccel_telemetry_device_view v{sizeof(v)};
      if (rayaccel_telemetry_get_device(t, i, &v, nullptr) != RAYACCEL_STATUS_OK) continue;
      out.devices.push_back({internal::Str(v.device_id), internal::Str(v.plugin), v.sample});
    }
    for (size_t i = 0; i < info.plugin_count; ++i) {
      rayaccel_telemetry_plugin_view v{sizeof(v)};
      if (rayaccel_telemetry_get_plugin(t, i, &v, nullptr) != RAYACCEL_STATUS_OK) continue;
      PluginTelemetry p{internal::Str(v.name), internal::Str(v.error), v.seconds, {}};
      for (size_t k = 0; k < v.unknown_count; ++k) {
        p.unknown[v.unknown_fields[k]] = v.unknown_reasons[k];
      }
      out.plugins.push_back(std::move(p));
    }
    rayaccel_telemetry_destroy(t);
    return out;
  }

  void Shutdown() { rayaccel_registry_shutdown(registry_); }

 private:
  // What the C callbacks reach through their user data: alive as long as the registry.
  struct Held {
    Options options;
    static void Log(void* self, rayaccel_log_level level, const char* line) {
      static_cast<Held*>(self)->options.log(level, line);
    }
    static pid_t Spawn(void* self, pid_t (*spawn)(void*), void* spawn_context) {
      std::function<pid_t()> run = [spawn, spawn_context] { return spawn(spawn_context); };
      return static_cast<Held*>(self)->options.spawn_child(run);
    }
  };

  Registry(rayaccel_registry* registry, std::unique_ptr<Held> held)
      : registry_(registry), held_(std::move(held)) {}

  static Snapshot SnapshotOf(rayaccel_registry* r,
                             rayaccel_status (*get)(rayaccel_registry*, rayaccel_snapshot**,
                                                    rayaccel_error*)) {
    rayaccel_snapshot* s = nullptr;
    if (get(r, &s, nullptr) != RAYACCEL_STATUS_OK) return {};
    return internal::Take(s);
  }

  rayaccel_registry* registry_ = nullptr;
  std::unique_ptr<Held> held_;
};

}  // namespace rayaccel::host

#endif  // RAYACCEL_HOST_HPP_
