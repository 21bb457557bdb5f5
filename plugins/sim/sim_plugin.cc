// The sim plugin: simulated accelerators described by a JSON spec (config key `spec`, or
// RAYACCEL_SIM_SPEC through the host). A real plugin in every other respect: same ABI, same
// loader, so tests, demos and the conformance suite exercise the host exactly as a vendor's
// plugin would. The spec is re-read on every discovery, so editing it and rescanning shows
// the change (e.g. a device turning unhealthy).
#include <sys/stat.h>

#include <memory>
#include <mutex>
#include <string>

#include "common/plugin_util.h"
#include "sim/sim_spec.h"

namespace rayaccel::sim {
namespace {

using plugin::Str;

constexpr char kVersion[] = "1.0.0";

}  // namespace
}  // namespace rayaccel::sim

// The opaque instance type of plugin.h, defined by this plugin.
struct rayaccel_plugin_instance {
  const rayaccel_host_api* host = nullptr;
  std::string spec_path;
  std::mutex mu;  // guards everything below
  rayaccel::sim::SimSpec spec;
  bool loaded = false;  // `spec` matches the file as of loaded_size and loaded_mtime
  off_t loaded_size = 0;
  timespec loaded_mtime{};
};

namespace rayaccel::sim {
namespace {

// Re-reads the spec when the file changed since the last read (size or modification time);
// a broken file is an error and the previous spec is kept for the other hooks.
rayaccel_status Reload(rayaccel_plugin_instance* self, rayaccel_error* error) {
  if (self->spec_path.empty()) return RAYACCEL_STATUS_OK;
  struct stat st {};
  const bool have_stat = stat(self->spec_path.c_str(), &st) == 0;
  if (have_stat && self->loaded && st.st_size == self->loaded_size &&
      st.st_mtim.tv_sec == self->loaded_mtime.tv_sec &&
      st.st_mtim.tv_nsec == self->loaded_mtime.tv_nsec) {
    return RAYACCEL_STATUS_OK;
  }
  SimSpec spec;
  std::string problem;
  if (!LoadSpec(self->spec_path, &spec, &problem)) {
    self->loaded = false;
    return plugin::Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, problem);
  }
  self->spec = std::move(spec);
  self->loaded = have_stat;  // without a stat there is nothing to compare next time
  self->loaded_size = st.st_size;
  self->loaded_mtime = st.st_mtim;
  return RAYACCEL_STATUS_OK;
}

rayaccel_status Initialize(rayaccel_initialize_args* args, rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    if (args == nullptr ||
        args->struct_size < RAYACCEL_STRUCT_SIZE(rayaccel_initialize_args, instance)) {
      return rayaccel_error_set(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "bad initialize args");
    }
    auto self = std::make_unique<rayaccel_plugin_instance>();
    self->host = args->host;
    self->spec_path = plugin::ConfigValue(args, "spec");
    if (self->spec_path.empty()) {
      plugin::Log(self->host, RAYACCEL_LOG_INFO,
                  "0 devices: no spec configured (set sim.spec or RAYACCEL_SIM_SPEC)");
    }
    if (rayaccel_status rc = Reload(self.get(), error); rc != RAYACCEL_STATUS_OK) return rc;
    args->instance = self.release();
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status Shutdown(rayaccel_plugin_instance* self, rayaccel_error* error) {
  if (self == nullptr) {
    return rayaccel_error_set(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no instance");
  }
  delete self;
  return RAYACCEL_STATUS_OK;
}

rayaccel_status GetProperties(rayaccel_plugin_instance* self, rayaccel_plugin_properties* props,
                              rayaccel_error* error) {
  if (self == nullptr || props == nullptr) {
    return rayaccel_error_set(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "NULL argument");
  }
  std::lock_guard<std::mutex> lock(self->mu);
  const SimSpec& s = self->spec;
  std::string_view vendor = s.vendor.empty() ? std::string_view("simulated") : s.vendor;
  plugin::SetProperties(props, vendor, s.resource_name, s.visible_devices_env, kVersion);
  return RAYACCEL_STATUS_OK;
}

rayaccel_status Discover(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                         rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    if (self == nullptr || sink == nullptr) {
      return rayaccel_error_set(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "NULL argument");
    }
    std::lock_guard<std::mutex> lock(self->mu);
    if (rayaccel_status rc = Reload(self, error); rc != RAYACCEL_STATUS_OK) return rc;
    const SimSpec& s = self->spec;
    for (size_t i = 0; i < s.devices.size(); ++i) {
      const SimDevice& d = s.devices[i];
      rayaccel_device_info info{};
      info.struct_size = sizeof(info);
      info.index = static_cast<uint32_t>(i);
      info.id = Str(d.uuid);
      info.name = Str(d.name);
      info.accelerator_type = Str(d.accelerator_type);
      info.architecture = Str(d.architecture);
      info.memory_bytes = d.memory_bytes;
      info.pci_bus_id = Str(d.pci_bus_id);
      info.pci_vendor_id = d.pci_vendor_id;
      info.pci_device_id = d.pci_device_id;
      info.numa_node = d.numa_node;
      info.driver_version = Str(d.driver_version);
      info.firmware_version = Str(d.firmware_version);
      info.parent_id = Str(d.parent);
      info.partition_profile = Str(d.partition_profile);
      info.health = d.health;
      info.health_reason = Str(d.health_reason);
      if (rayaccel_status rc = sink->add_device(sink->host_context, &info);
          rc == RAYACCEL_STATUS_RESOURCE_EXHAUSTED || rc == RAYACCEL_STATUS_ABORTED) {
        return rc;  // the host wants no more; a refused single device is its business
      }
    }
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status GetLabels(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                          rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    for (const auto& [key, value] : self->spec.labels) {
      sink->add_label(sink->host_context, Str(key), Str(value));
    }
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status GetTopology(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                            rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    for (const SimLink& l : self->spec.links) {
      rayaccel_link link{};
      link.struct_size = sizeof(link);
      link.device_a = l.a;
      link.device_b = l.b;
      link.type = l.type;
      link.pcie_path = l.path;
      link.count = l.count;
      link.bandwidth_mbps = l.bandwidth_mbps;
      sink->add_link(sink->host_context, &link);
    }
    for (const SimDomain& d : self->spec.domains) plugin::AddDomain(sink, d.kind, d.id, d.devices);
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status ValidateQuantity(rayaccel_plugin_instance* self, uint32_t quantity,
                                 rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    const std::vector<uint32_t>& valid = self->spec.valid_quantities;
    if (valid.empty()) return RAYACCEL_STATUS_OK;
    std::string list;
    for (uint32_t q : valid) {
      if (q == quantity) return RAYACCEL_STATUS_OK;
      list += (list.empty() ? "" : ", ") + std::to_string(q);
    }
    return plugin::Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                        "requests of " + self->spec.resource_name + " must be one of " + list +
                            "; got " + std::to_string(quantity));
  });
}

rayaccel_status PrepareAllocation(rayaccel_plugin_instance* self, rayaccel_allocation_args* args,
                                  rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    const SimSpec& s = self->spec;
    std::string list;
    for (size_t i = 0; i < args->device_count; ++i) {
      uint32_t index = args->device_indices[i];
      if (index >= s.devices.size()) {
        return plugin::Fail(error, RAYACCEL_STATUS_NOT_FOUND, "no device " + std::to_string(index));
      }
      list += (i == 0 ? "" : ",") + std::to_string(index);
    }
    if (s.visible_devices_env.empty()) return RAYACCEL_STATUS_OK;
    return plugin::SetEnv(args->sink, s.visible_devices_env, list);
  });
}

constexpr rayaccel_plugin_api kApi = {
    sizeof(rayaccel_plugin_api),
    RAYACCEL_ABI_VERSION_MAJOR,
    RAYACCEL_ABI_VERSION_MINOR,
    {"sim", 3},
    RAYACCEL_CAP_TOPOLOGY | RAYACCEL_CAP_ALLOCATION | RAYACCEL_CAP_THREAD_SAFE,
    &Initialize,
    &Shutdown,
    &GetProperties,
    &Discover,
    &GetLabels,
    &GetTopology,
    /*get_health=*/nullptr,  // health comes with each device from the spec
    /*wait_health_events=*/nullptr,
    &ValidateQuantity,
    &PrepareAllocation,
    /*transport=*/nullptr,
};

}  // namespace
}  // namespace rayaccel::sim

extern "C" RAYACCEL_PLUGIN_EXPORT rayaccel_status
rayaccel_plugin_entry(rayaccel_negotiation* negotiation, rayaccel_error* error) {
  return rayaccel::plugin::Negotiate(negotiation, &rayaccel::sim::kApi, error);
}
