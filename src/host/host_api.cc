// The C API of rayaccel/host.h over the C++ registry: copies in, views out, and no exception
// or C++ type across the boundary.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "ray/node_publication.h"
#include "rayaccel/host.h"
#include "rayaccel/registry.h"

using rayaccel::Registry;

struct rayaccel_registry {
  std::unique_ptr<Registry> registry;
};

// A held snapshot and the arrays its views point into (built once, with it).
struct rayaccel_snapshot {
  std::atomic<int> holds{1};
  std::shared_ptr<const rayaccel::NodeSnapshot> snapshot;
  std::vector<std::vector<const char*>> nearest_nics;  // per device
  std::vector<std::pair<const char*, double>> resources;
  std::vector<std::pair<const char*, const char*>> labels;
};

struct rayaccel_subscription {
  std::unique_ptr<Registry::Subscription> subscription;
};

struct rayaccel_allocation {
  rayaccel::Allocation allocation;
  std::vector<const char*> ids;
};

struct rayaccel_publication_order {
  rayaccel::PublicationOrder order;
};

// A sample and the arrays its plugin views point into (built once, with it).
struct rayaccel_telemetry {
  rayaccel::Telemetry telemetry;
  std::vector<std::vector<uint32_t>> unknown_fields;      // per plugin
  std::vector<std::vector<const char*>> unknown_reasons;  // per plugin
};

struct rayaccel_environment {
  std::vector<std::pair<std::string, std::string>> variables;
};

namespace {

rayaccel_status Fail(rayaccel_error* error, rayaccel_status code, const std::string& message) {
  return rayaccel_error_set(error, code, message.c_str());
}

rayaccel_status FromStatus(const absl::Status& s, rayaccel_error* error) {
  if (s.ok()) return RAYACCEL_STATUS_OK;
  rayaccel_status code = RAYACCEL_STATUS_INTERNAL;
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      code = RAYACCEL_STATUS_INVALID_ARGUMENT;
      break;
    case absl::StatusCode::kNotFound:
      code = RAYACCEL_STATUS_NOT_FOUND;
      break;
    case absl::StatusCode::kUnimplemented:
      code = RAYACCEL_STATUS_UNSUPPORTED;
      break;
    case absl::StatusCode::kUnavailable:
      code = RAYACCEL_STATUS_UNAVAILABLE;
      break;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kPermissionDenied:
      code = RAYACCEL_STATUS_FAILED_PRECONDITION;
      break;
    case absl::StatusCode::kResourceExhausted:
      code = RAYACCEL_STATUS_RESOURCE_EXHAUSTED;
      break;
    case absl::StatusCode::kDeadlineExceeded:
      code = RAYACCEL_STATUS_TIMEOUT;
      break;
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
      code = RAYACCEL_STATUS_ABORTED;
      break;
    case absl::StatusCode::kUnauthenticated:
      code = RAYACCEL_STATUS_UNAUTHENTICATED;
      break;
    default:
      break;
  }
  return Fail(error, code, std::string(s.message()));
}

// Runs `body`, turning anything thrown into a status: nothing crosses the C boundary.
template <typename F>
rayaccel_status Guard(rayaccel_error* error, F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(error, RAYACCEL_STATUS_RESOURCE_EXHAUSTED, "out of memory");
  } catch (const std::exception& e) {
    return Fail(error, RAYACCEL_STATUS_INTERNAL, std::string("unexpected: ") + e.what());
  } catch (...) {
    return Fail(error, RAYACCEL_STATUS_INTERNAL, "unexpected exception");
  }
}

// Writes `full` into the host's view, as much of it as the host's struct_size holds.
template <typename View>
rayaccel_status FillView(View* out, View full, rayaccel_error* error) {
  if (out == nullptr || out->struct_size < sizeof(size_t)) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "a view needs its struct_size set");
  }
  const size_t n = std::min(out->struct_size, sizeof(View));
  full.struct_size = out->struct_size;
  std::memcpy(static_cast<void*>(out), &full, n);
  return RAYACCEL_STATUS_OK;
}

// The host's struct as this library knows it: the fields its struct_size holds, the rest
// zero (each field's default).
template <typename Args>
bool ReadArgs(const Args* in, Args* out) {
  std::memset(static_cast<void*>(out), 0, sizeof(Args));
  if (in == nullptr || in->struct_size < sizeof(size_t)) return false;
  std::memcpy(static_cast<void*>(out), in, std::min(in->struct_size, sizeof(Args)));
  return true;
}

const char* Text(const char* s) { return s != nullptr ? s : ""; }

std::vector<std::string> Strings(const char* const* items, size_t count) {
  std::vector<std::string> out;
  for (size_t i = 0; items != nullptr && i < count; ++i) out.emplace_back(Text(items[i]));
  return out;
}

rayaccel_snapshot* Wrap(std::shared_ptr<const rayaccel::NodeSnapshot> snapshot) {
  auto* out = new rayaccel_snapshot();
  out->snapshot = std::move(snapshot);
  const rayaccel::NodeSnapshot& s = *out->snapshot;
  out->nearest_nics.resize(s.devices.size());
  for (size_t i = 0; i < s.devices.size(); ++i) {
    for (const std::string& nic : s.devices[i].nearest_nics) {
      out->nearest_nics[i].push_back(nic.c_str());
    }
  }
  for (const auto& [name, quantity] : s.ray.resources) {
    out->resources.emplace_back(name.c_str(), quantity);
  }
  for (const auto& [key, value] : s.ray.labels) {
    out->labels.emplace_back(key.c_str(), value.c_str());
  }
  return out;
}

rayaccel_status OutOfRange(rayaccel_error* error, const char* what, size_t i, size_t count) {
  return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
              std::string(what) + " " + std::to_string(i) + " of " + std::to_string(count));
}

rayaccel_log_level LevelOf(rayaccel::LogLevel level) {
  switch (level) {
    case rayaccel::LogLevel::kTrace:
      return RAYACCEL_LOG_TRACE;
    case rayaccel::LogLevel::kDebug:
      return RAYACCEL_LOG_DEBUG;
    case rayaccel::LogLevel::kInfo:
      return RAYACCEL_LOG_INFO;
    case rayaccel::LogLevel::kWarning:
      return RAYACCEL_LOG_WARN;
    default:
      return RAYACCEL_LOG_ERROR;
  }
}

rayaccel::LogLevel LevelFrom(rayaccel_log_level level) {
  switch (static_cast<uint32_t>(level)) {
    case RAYACCEL_LOG_TRACE:
      return rayaccel::LogLevel::kTrace;
    case RAYACCEL_LOG_DEBUG:
      return rayaccel::LogLevel::kDebug;
    case RAYACCEL_LOG_INFO:
      return rayaccel::LogLevel::kInfo;
    case RAYACCEL_LOG_WARN:
      return rayaccel::LogLevel::kWarning;
    default:
      return rayaccel::LogLevel::kError;
  }
}

pid_t RunSpawn(void* spawn) { return (*static_cast<const std::function<pid_t()>*>(spawn))(); }

absl::Status Options(const rayaccel_registry_options& o, rayaccel::RegistryOptions* out) {
  out->search_path = Strings(o.search_path, o.search_path_count);
  out->plugins = Strings(o.plugins, o.plugins_count);
  for (size_t i = 0; o.config != nullptr && i < o.config_count; ++i) {
    const rayaccel_host_config_entry& e = o.config[i];
    if (e.struct_size < sizeof(rayaccel_host_config_entry) || e.key == nullptr ||
        e.value == nullptr) {
      return absl::InvalidArgumentError("config entry " + std::to_string(i) +
                                        ": needs its struct_size, a key and a value");
    }
    if (e.plugin == nullptr) {
      out->sole_plugin_config[e.key] = e.value;
    } else {
      out->config[e.plugin][e.key] = e.value;
    }
  }
  out->use_environment = o.ignore_environment == 0;
  out->config_file = Text(o.config_file);
  out->check_permissions = o.allow_unsafe_permissions == 0;
  out->host_topology = o.no_host_topology == 0;
  out->hwloc_xml = Text(o.hwloc_xml);
  switch (static_cast<uint32_t>(o.isolation)) {
    case RAYACCEL_ISOLATION_IN_PROCESS:
      out->isolation = rayaccel::RegistryOptions::Isolation::kInProcess;
      break;
    case RAYACCEL_ISOLATION_CHILD_PROCESS:
      out->isolation = rayaccel::RegistryOptions::Isolation::kChildProcess;
      break;
    default:
      return absl::InvalidArgumentError("isolation " +
                                        std::to_string(static_cast<uint32_t>(o.isolation)) +
                                        ": not one of rayaccel_isolation's values");
  }
  out->plugin_host = Text(o.plugin_host);
  if (o.call_timeout_ms != 0) out->call_timeout_ms = o.call_timeout_ms;
  if (o.restart_backoff_ms != 0) out->restart_backoff_ms = o.restart_backoff_ms;
  out->start_deadline_ms = o.start_deadline_ms;
  if (o.plugin_memory_limit_bytes == UINT64_MAX) {
    out->plugin_memory_limit_bytes = 0;
  } else if (o.plugin_memory_limit_bytes != 0) {
    out->plugin_memory_limit_bytes = o.plugin_memory_limit_bytes;
  }
  if (o.spawn_child != nullptr) {
    rayaccel_spawn_fn spawn = o.spawn_child;
    void* user = o.spawn_user_data;
    out->spawn_child = [spawn, user](const std::function<pid_t()>& run) {
      return spawn(user, RunSpawn, const_cast<std::function<pid_t()>*>(&run));
    };
  }
  switch (static_cast<uint32_t>(o.allocation_objective)) {
    case RAYACCEL_OBJECTIVE_WHOLE_PARTITION:
      out->allocation_objective = rayaccel::AllocationObjective::kWholePartition;
      break;
    case RAYACCEL_OBJECTIVE_REQUEST_FIRST:
      out->allocation_objective = rayaccel::AllocationObjective::kRequestFirst;
      break;
    default:
      return absl::InvalidArgumentError(
          "allocation objective " + std::to_string(static_cast<uint32_t>(o.allocation_objective)) +
          ": not one of rayaccel_allocation_objective's values");
  }
  if (static_cast<uint32_t>(o.log_level) > RAYACCEL_LOG_ERROR) {
    return absl::InvalidArgumentError("log level " +
                                      std::to_string(static_cast<uint32_t>(o.log_level)) +
                                      ": not one of rayaccel_log_level's values");
  }
  out->log_level = LevelFrom(o.log_level);
  if (o.log != nullptr) {
    rayaccel_log_fn log = o.log;
    void* user = o.log_user_data;
    out->log_callback = [log, user](rayaccel::LogLevel level, const std::string& line) {
      log(user, LevelOf(level), line.c_str());
    };
  }
  out->watch_health = o.watch_health != 0;
  return absl::OkStatus();
}

rayaccel_status BadHandle(rayaccel_error* error, const char* what) {
  return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, std::string("no ") + what);
}

}  // namespace

extern "C" {

uint32_t rayaccel_host_api_version(void) {
  return (uint32_t{RAYACCEL_HOST_API_VERSION_MAJOR} << 16) | RAYACCEL_HOST_API_VERSION_MINOR;
}

rayaccel_status rayaccel_registry_create(const rayaccel_registry_options* options,
                                         rayaccel_registry** out, rayaccel_error* error) {
  return Guard(error, [&] {
    rayaccel_registry_options o;
    if (out == nullptr || !ReadArgs(options, &o)) {
      return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                  "create needs options (RAYACCEL_REGISTRY_OPTIONS_INIT) and a place for the "
                  "registry");
    }
    *out = nullptr;
    rayaccel::RegistryOptions converted;
    if (absl::Status s = Options(o, &converted); !s.ok()) return FromStatus(s, error);
    absl::StatusOr<std::unique_ptr<Registry>> r = Registry::Create(std::move(converted));
    if (!r.ok()) return FromStatus(r.status(), error);
    auto* handle = new rayaccel_registry();
    handle->registry = *std::move(r);
    *out = handle;
    return RAYACCEL_STATUS_OK;
  });
}

void rayaccel_registry_shutdown(rayaccel_registry* registry) {
  if (registry == nullptr) return;
  (void)Guard(nullptr, [&] {
    registry->registry->Shutdown();
    return RAYACCEL_STATUS_OK;
  });
}

void rayaccel_registry_destroy(rayaccel_registry* registry) {
  if (registry == nullptr) return;
  (void)Guard(nullptr, [&] {
    delete registry;
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status rayaccel_registry_snapshot(rayaccel_registry* registry, rayaccel_snapshot** out,
                                           rayaccel_error* error) {
  if (registry == nullptr || out == nullptr) return BadHandle(error, "registry or output");
  return Guard(error, [&] {
    *out = Wrap(registry->registry->snapshot());
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status rayaccel_registry_rescan(rayaccel_registry* registry, rayaccel_snapshot** out,
                                         rayaccel_error* error) {
  if (registry == nullptr || out == nullptr) return BadHandle(error, "registry or output");
  return Guard(error, [&] {
    *out = Wrap(registry->registry->Rescan());
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status rayaccel_registry_wait_for_newer(rayaccel_registry* registry, uint64_t generation,
                                                 uint32_t timeout_ms, rayaccel_snapshot** out,
                                                 rayaccel_error* error) {
  if (registry == nullptr || out == nullptr) return BadHandle(error, "registry or output");
  return Guard(error, [&] {
    *out =
        Wrap(registry->registry->WaitForNewer(generation, std::chrono::milliseconds(timeout_ms)));
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_snapshot* rayaccel_snapshot_retain(rayaccel_snapshot* snapshot) {
  if (snapshot != nullptr) snapshot->holds.fetch_add(1, std::memory_order_relaxed);
  return snapshot;
}

void rayaccel_snapshot_release(rayaccel_snapshot* snapshot) {
  if (snapshot != nullptr && snapshot->holds.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    delete snapshot;
  }
}

rayaccel_status rayaccel_registry_subscribe(rayaccel_registry* registry,
                                            rayaccel_snapshot_fn on_snapshot, void* user_data,
                                            rayaccel_subscription** out, rayaccel_error* error) {
  if (registry == nullptr || on_snapshot == nullptr || out == nullptr) {
    return BadHandle(error, "registry, callback or output");
  }
  *out = nullptr;
  return Guard(error, [&] {
    auto* handle = new rayaccel_subscription();
    handle->subscription = registry->registry->Subscribe(
        [on_snapshot, user_data](std::shared_ptr<const rayaccel::NodeSnapshot> s) {
          rayaccel_snapshot* lent = Wrap(std::move(s));
          on_snapshot(user_data, lent);
          rayaccel_snapshot_release(lent);
        });
    *out = handle;
    return RAYACCEL_STATUS_OK;
  });
}

void rayaccel_subscription_destroy(rayaccel_subscription* subscription) {
  if (subscription == nullptr) return;
  (void)Guard(nullptr, [&] {
    delete subscription;
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status rayaccel_snapshot_get_info(const rayaccel_snapshot* snapshot,
                                           rayaccel_snapshot_info* out, rayaccel_error* error) {
  if (snapshot == nullptr) return BadHandle(error, "snapshot");
  const rayaccel::NodeSnapshot& s = *snapshot->snapshot;
  rayaccel_snapshot_info v{};
  v.generation = s.generation;
  v.device_count = s.devices.size();
  v.link_count = s.links.size();
  v.domain_count = s.domains.size();
  v.plugin_count = s.plugins.size();
  v.resource_count = snapshot->resources.size();
  v.label_count = snapshot->labels.size();
  v.host_topology = s.host_topology.c_str();
  return FillView(out, v, error);
}

rayaccel_status rayaccel_snapshot_get_device(const rayaccel_snapshot* snapshot, size_t i,
                                             rayaccel_device_view* out, rayaccel_error* error) {
  if (snapshot == nullptr) return BadHandle(error, "snapshot");
  const rayaccel::NodeSnapshot& s = *snapshot->snapshot;
  if (i >= s.devices.size()) return OutOfRange(error, "device", i, s.devices.size());
  const rayaccel::Device& d = s.devices[i];
  rayaccel_device_view v{};
  v.id = d.id.c_str();
  v.plugin = d.plugin.c_str();
  v.resource = d.resource.c_str();
  v.index = d.index;
  v.name = d.name.c_str();
  v.vendor = d.vendor.c_str();
  v.accelerator_type = d.accelerator_type.c_str();
  v.architecture = d.architecture.c_str();
  v.memory_bytes = d.memory_bytes;
  v.pci_bus_id = d.pci_bus_id.c_str();
  v.pci_vendor_id = d.pci_vendor_id;
  v.pci_device_id = d.pci_device_id;
  v.numa_node = d.numa_node;
  v.driver_version = d.driver_version.c_str();
  v.firmware_version = d.firmware_version.c_str();
  v.parent_id = d.parent_id.c_str();
  v.partition_profile = d.partition_profile.c_str();
  v.health = static_cast<rayaccel_health>(d.health);
  v.health_reason = d.health_reason.c_str();
  v.cpuset = d.cpuset.c_str();
  v.nearest_nic_count = snapshot->nearest_nics[i].size();
  v.nearest_nics = snapshot->nearest_nics[i].data();
  v.attribute_count = d.attributes.size();
  return FillView(out, v, error);
}

rayaccel_status rayaccel_snapshot_get_attribute(const rayaccel_snapshot* snapshot, size_t device,
                                                size_t i, rayaccel_attribute_view* out,
                                                rayaccel_error* error) {
  if (snapshot == nullptr) return BadHandle(error, "snapshot");
  const rayaccel::NodeSnapshot& s = *snapshot->snapshot;
  if (device >= s.devices.size()) return OutOfRange(error, "device", device, s.devices.size());
  const std::vector<rayaccel::Attribute>& attributes = s.devices[device].attributes;
  if (i >= attributes.size()) return OutOfRange(error, "attribute", i, attributes.size());
  const rayaccel::Attribute& a = attributes[i];
  rayaccel_attribute_view v{};
  v.name = a.name.c_str();
  v.kind = static_cast<rayaccel_attribute_kind>(a.kind);
  v.string_value = a.string_value.c_str();
  v.int_value = a.int_value;
  return FillView(out, v, error);
}

rayaccel_status rayaccel_snapshot_get_link(const rayaccel_snapshot* snapshot, size_t i,
                                           rayaccel_link_view* out, rayaccel_error* error) {
  if (snapshot == nullptr) return BadHandle(error, "snapshot");
  const rayaccel::NodeSnapshot& s = *snapshot->snapshot;
  if (i >= s.links.size()) return OutOfRange(error, "link", i, s.links.size());
  const rayaccel::Link& l = s.links[i];
  rayaccel_link_view v{};
  v.a = l.a;
  v.b = l.b;
  v.type = static_cast<rayaccel_link_type>(l.type);
  v.type_name = l.type_name.c_str();
  v.count = l.count;
  v.bandwidth_mbps = l.bandwidth_mbps;
  v.pcie_path = static_cast<rayaccel_pcie_path>(l.pcie_path);
  v.source = l.source.c_str();
  v.weight = l.weight;
  v.hops = l.hops;
  v.min_bandwidth_mbps = l.min_bandwidth_mbps;
  return FillView(out, v, error);
}

rayaccel_status rayaccel_snapshot_get_domain(const rayaccel_snapshot* snapshot, size_t i,
                                             rayaccel_domain_view* out, rayaccel_error* error) {
  if (snapshot == nullptr) return BadHandle(error, "snapshot");
  const rayaccel::NodeSnapshot& s = *snapshot->snapshot;
  if (i >= s.domains.size()) return OutOfRange(error, "domain", i, s.domains.size());
  const rayaccel::Domain& d = s.domains[i];
  rayaccel_domain_view v{};
  v.plugin = d.plugin.c_str();
  v.kind = d.kind.c_str();
  v.id = d.id.c_str();
  v.device_count = d.devices.size();
  v.devices = d.devices.data();
  return FillView(out, v, error);
}

rayaccel_status rayaccel_snapshot_get_plugin(const rayaccel_snapshot* snapshot, size_t i,
                                             rayaccel_plugin_view* out, rayaccel_error* error) {
  if (snapshot == nullptr) return BadHandle(error, "snapshot");
  const rayaccel::NodeSnapshot& s = *snapshot->snapshot;
  if (i >= s.plugins.size()) return OutOfRange(error, "plugin", i, s.plugins.size());
  const rayaccel::PluginStatus& p = s.plugins[i];
  rayaccel_plugin_view v{};
  v.name = p.name.c_str();
  v.path = p.path.c_str();
  v.state = static_cast<rayaccel_plugin_state>(p.state);
  v.message = p.message.c_str();
  v.abi_version = p.abi_version.c_str();
  v.vendor = p.vendor.c_str();
  v.plugin_version = p.plugin_version.c_str();
  v.resource_name = p.resource_name.c_str();
  v.visible_devices_env = p.visible_devices_env.c_str();
  v.capabilities = p.capabilities;
  v.device_count = p.device_count;
  return FillView(out, v, error);
}

rayaccel_status rayaccel_snapshot_get_resource(const rayaccel_snapshot* snapshot, size_t i,
                                               const char** name, double* quantity,
                                               rayaccel_error* error) {
  if (snapshot == nullptr || name == nullptr || quantity == nullptr) {
    return BadHandle(error, "snapshot or output");
  }
  if (i >= snapshot->resources.size()) {
    return OutOfRange(error, "resource", i, snapshot->resources.size());
  }
  *name = snapshot->resources[i].first;
  *quantity = snapshot->resources[i].second;
  return RAYACCEL_STATUS_OK;
}

rayaccel_status rayaccel_snapshot_get_label(const rayaccel_snapshot* snapshot, size_t i,
                                            const char** key, const char** value,
                                            rayaccel_error* error) {
  if (snapshot == nullptr || key == nullptr || value == nullptr) {
    return BadHandle(error, "snapshot or output");
  }
  if (i >= snapshot->labels.size()) return OutOfRange(error, "label", i, snapshot->labels.size());
  *key = snapshot->labels[i].first;
  *value = snapshot->labels[i].second;
  return RAYACCEL_STATUS_OK;
}

rayaccel_status rayaccel_registry_validate_quantity(rayaccel_registry* registry,
                                                    const char* resource, uint32_t quantity,
                                                    rayaccel_error* error) {
  if (registry == nullptr || resource == nullptr) return BadHandle(error, "registry or resource");
  return Guard(error, [&] {
    return FromStatus(registry->registry->ValidateQuantity(resource, quantity), error);
  });
}

rayaccel_status rayaccel_registry_preferred_allocation(
    rayaccel_registry* registry, const rayaccel_preferred_allocation_args* args,
    rayaccel_allocation** out, rayaccel_error* error) {
  rayaccel_preferred_allocation_args a;
  if (registry == nullptr || out == nullptr || !ReadArgs(args, &a)) {
    return BadHandle(error, "registry, args (with struct_size) or output");
  }
  *out = nullptr;
  return Guard(error, [&] {
    absl::StatusOr<rayaccel::Allocation> got = registry->registry->PreferredAllocation(
        Strings(a.available_ids, a.available_count),
        Strings(a.must_include_ids, a.must_include_count), a.size, Text(a.resource));
    if (!got.ok()) return FromStatus(got.status(), error);
    auto* handle = new rayaccel_allocation();
    handle->allocation = *std::move(got);
    for (const std::string& id : handle->allocation.device_ids) handle->ids.push_back(id.c_str());
    *out = handle;
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status rayaccel_allocation_get(const rayaccel_allocation* allocation,
                                        rayaccel_allocation_view* out, rayaccel_error* error) {
  if (allocation == nullptr) return BadHandle(error, "allocation");
  const rayaccel::Allocation& a = allocation->allocation;
  rayaccel_allocation_view v{};
  v.generation = a.generation;
  v.device_count = a.devices.size();
  v.devices = a.devices.data();
  v.device_ids = allocation->ids.data();
  v.reason = a.reason.c_str();
  v.link_score = a.link_score;
  v.leftover_score = a.leftover_score;
  return FillView(out, v, error);
}

void rayaccel_allocation_destroy(rayaccel_allocation* allocation) { delete allocation; }

rayaccel_status rayaccel_registry_prepare_allocation(rayaccel_registry* registry,
                                                     const rayaccel_prepare_allocation_args* args,
                                                     rayaccel_environment** out,
                                                     rayaccel_error* error) {
  rayaccel_prepare_allocation_args a;
  if (registry == nullptr || out == nullptr || !ReadArgs(args, &a)) {
    return BadHandle(error, "registry, args (with struct_size) or output");
  }
  *out = nullptr;
  return Guard(error, [&] {
    absl::StatusOr<std::map<std::string, std::string>> env =
        registry->registry->PrepareAllocation(Strings(a.device_ids, a.device_count), a.generation);
    if (!env.ok()) return FromStatus(env.status(), error);
    auto* handle = new rayaccel_environment();
    handle->variables.assign(env->begin(), env->end());
    *out = handle;
    return RAYACCEL_STATUS_OK;
  });
}

size_t rayaccel_environment_count(const rayaccel_environment* environment) {
  return environment != nullptr ? environment->variables.size() : 0;
}

rayaccel_status rayaccel_environment_get(const rayaccel_environment* environment, size_t i,
                                         const char** name, const char** value,
                                         rayaccel_error* error) {
  if (environment == nullptr || name == nullptr || value == nullptr) {
    return BadHandle(error, "environment or output");
  }
  if (i >= environment->variables.size()) {
    return OutOfRange(error, "variable", i, environment->variables.size());
  }
  *name = environment->variables[i].first.c_str();
  *value = environment->variables[i].second.c_str();
  return RAYACCEL_STATUS_OK;
}

void rayaccel_environment_destroy(rayaccel_environment* environment) { delete environment; }

rayaccel_status rayaccel_registry_get_stats(rayaccel_registry* registry,
                                            rayaccel_registry_stats* out, rayaccel_error* error) {
  if (registry == nullptr) return BadHandle(error, "registry");
  return Guard(error, [&] {
    const rayaccel::RegistryStats s = registry->registry->stats();
    rayaccel_registry_stats v{};
    v.scans = s.scans;
    v.changes = s.changes;
    v.health_events = s.health_events;
    v.plugin_restarts = s.plugin_restarts;
    v.scan_seconds = s.scan_seconds;
    return FillView(out, v, error);
  });
}

rayaccel_status rayaccel_registry_sample_telemetry(rayaccel_registry* registry,
                                                   rayaccel_telemetry** out,
                                                   rayaccel_error* error) {
  if (registry == nullptr || out == nullptr) return BadHandle(error, "registry or output");
  *out = nullptr;
  return Guard(error, [&] {
    auto handle = std::make_unique<rayaccel_telemetry>();
    handle->telemetry = registry->registry->SampleTelemetry();
    for (const rayaccel::PluginTelemetry& p : handle->telemetry.plugins) {
      handle->unknown_fields.emplace_back();
      handle->unknown_reasons.emplace_back();
      for (const auto& [fields, why] : p.unknown) {
        handle->unknown_fields.back().push_back(fields);
        handle->unknown_reasons.back().push_back(why.c_str());
      }
    }
    *out = handle.release();
    return RAYACCEL_STATUS_OK;
  });
}

void rayaccel_telemetry_destroy(rayaccel_telemetry* telemetry) { delete telemetry; }

rayaccel_status rayaccel_telemetry_get_info(const rayaccel_telemetry* telemetry,
                                            rayaccel_telemetry_info* out, rayaccel_error* error) {
  if (telemetry == nullptr) return BadHandle(error, "telemetry");
  rayaccel_telemetry_info v{};
  v.unix_ms = telemetry->telemetry.unix_ms;
  v.device_count = telemetry->telemetry.devices.size();
  v.plugin_count = telemetry->telemetry.plugins.size();
  return FillView(out, v, error);
}

rayaccel_status rayaccel_telemetry_get_device(const rayaccel_telemetry* telemetry, size_t i,
                                              rayaccel_telemetry_device_view* out,
                                              rayaccel_error* error) {
  if (telemetry == nullptr) return BadHandle(error, "telemetry");
  const std::vector<rayaccel::DeviceSample>& devices = telemetry->telemetry.devices;
  if (i >= devices.size()) return OutOfRange(error, "telemetry device", i, devices.size());
  const rayaccel::DeviceSample& d = devices[i];
  rayaccel_telemetry_device_view v{};
  v.device_id = d.device_id.c_str();
  v.plugin = d.plugin.c_str();
  v.sample.struct_size = sizeof(v.sample);
  v.sample.device_index = d.index;
  v.sample.known = d.known;
  v.sample.utilization_percent = d.utilization_percent;
  v.sample.memory_used_bytes = d.memory_used_bytes;
  v.sample.memory_total_bytes = d.memory_total_bytes;
  v.sample.power_mw = d.power_mw;
  v.sample.temperature_c = d.temperature_c;
  v.sample.ecc_corrected = d.ecc_corrected;
  v.sample.ecc_uncorrected = d.ecc_uncorrected;
  v.sample.retired_pages = d.retired_pages;
  v.sample.link_errors = d.link_errors;
  return FillView(out, v, error);
}

rayaccel_status rayaccel_telemetry_get_plugin(const rayaccel_telemetry* telemetry, size_t i,
                                              rayaccel_telemetry_plugin_view* out,
                                              rayaccel_error* error) {
  if (telemetry == nullptr) return BadHandle(error, "telemetry");
  const std::vector<rayaccel::PluginTelemetry>& plugins = telemetry->telemetry.plugins;
  if (i >= plugins.size()) return OutOfRange(error, "telemetry plugin", i, plugins.size());
  rayaccel_telemetry_plugin_view v{};
  v.name = plugins[i].plugin.c_str();
  v.error = plugins[i].error.c_str();
  v.seconds = plugins[i].seconds;
  v.unknown_count = telemetry->unknown_fields[i].size();
  v.unknown_fields = telemetry->unknown_fields[i].data();
  v.unknown_reasons = telemetry->unknown_reasons[i].data();
  return FillView(out, v, error);
}

rayaccel_status rayaccel_publication_check(const rayaccel_publication* publication,
                                           rayaccel_error* error) {
  rayaccel_publication p;
  if (!ReadArgs(publication, &p)) return BadHandle(error, "publication (with struct_size)");
  return Guard(error, [&] {
    if (absl::Status st = rayaccel::CheckNodeId(Text(p.node_id)); !st.ok()) {
      return FromStatus(st, error);
    }
    if (absl::Status st = rayaccel::CheckAgentSession(Text(p.session)); !st.ok()) {
      return FromStatus(st, error);
    }
    if ((p.resource_count > 0 &&
         (p.resource_names == nullptr || p.resource_quantities == nullptr)) ||
        (p.label_count > 0 && (p.label_keys == nullptr || p.label_values == nullptr))) {
      return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "a count without its arrays");
    }
    std::map<std::string, double> resources;
    for (size_t i = 0; i < p.resource_count; ++i) {
      if (!resources.emplace(Text(p.resource_names[i]), p.resource_quantities[i]).second) {
        return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                    std::string("resource \"") + Text(p.resource_names[i]) + "\" given twice");
      }
    }
    std::map<std::string, std::string> labels;
    for (size_t i = 0; i < p.label_count; ++i) {
      if (!labels.emplace(Text(p.label_keys[i]), Text(p.label_values[i])).second) {
        return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                    std::string("label \"") + Text(p.label_keys[i]) + "\" given twice");
      }
    }
    if (absl::Status st = rayaccel::CheckNodeResources(resources); !st.ok()) {
      return FromStatus(st, error);
    }
    return FromStatus(rayaccel::CheckNodeLabels(labels), error);
  });
}

rayaccel_status rayaccel_publication_order_create(rayaccel_publication_order** out,
                                                  rayaccel_error* error) {
  if (out == nullptr) return BadHandle(error, "output");
  return Guard(error, [&] {
    *out = new rayaccel_publication_order();
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status rayaccel_publication_order_admit(rayaccel_publication_order* order,
                                                 const char* node_id, const char* session,
                                                 uint64_t generation, int* apply, uint64_t* current,
                                                 rayaccel_error* error) {
  if (order == nullptr || node_id == nullptr || session == nullptr || apply == nullptr ||
      current == nullptr) {
    return BadHandle(error, "order, node id, session or output");
  }
  return Guard(error, [&] {
    const rayaccel::PublicationOrder::Decision d = order->order.Admit(node_id, session, generation);
    *apply = d.apply ? 1 : 0;
    *current = d.generation;
    return RAYACCEL_STATUS_OK;
  });
}

void rayaccel_publication_order_destroy(rayaccel_publication_order* order) { delete order; }

}  // extern "C"
