// The Gaudi plugin: Intel Gaudi accelerators from the habanalabs driver's sysfs, addressed by
// module id as Ray's HPU manager and HABANA_VISIBLE_MODULES do (docs/gaudi.md). Needs no
// Habana software; where libhlml.so is installed it adds serial numbers, critical-error events
// and telemetry. Config keys:
//   sysfs_root     where sysfs starts (default /sys)
//   hlml_library   libhlml.so to load (default: libhlml.so, then /usr/lib/habanalabs/libhlml.so)
#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/plugin_util.h"
#include "gaudi/gaudi_host.h"
#include "gaudi/hlml.h"
#include "gaudi/hlml_telemetry.h"

namespace rayaccel::gaudi {

// libhlml.so, loaded at the first discovery. Optional: without it, health is the driver's
// status file alone.
struct Hlml {
#define RAYACCEL_HLML_FUNCTIONS(X)                                               \
  X(hlml_init)                                                                   \
  X(hlml_shutdown)                                                               \
  X(hlml_device_get_count)                                                       \
  X(hlml_device_get_handle_by_index)                                             \
  X(hlml_device_get_pci_info) X(hlml_device_get_serial) X(hlml_event_set_create) \
      X(hlml_event_set_free) X(hlml_device_register_events) X(hlml_event_set_wait)
#define RAYACCEL_HLML_MEMBER(f) decltype(&::f) f = nullptr;
  RAYACCEL_HLML_FUNCTIONS(RAYACCEL_HLML_MEMBER)
#undef RAYACCEL_HLML_MEMBER
  HlmlTelemetryCalls telemetry;  // optional: an older libhlml.so may lack them
  void* handle = nullptr;
  bool initialized = false;
  hlml_event_set_t events = nullptr;
  std::map<hlml_device_t, std::string> bus_ids;  // HLML handle -> PCI bus id
  std::map<std::string, std::string> serials;    // PCI bus id -> serial number
};

}  // namespace rayaccel::gaudi

struct rayaccel_plugin_instance {
  const rayaccel_host_api* host = nullptr;
  std::string sysfs_root;
  std::string hlml_library;
  std::mutex mu;  // guards everything below
  rayaccel::gaudi::Scan scan;
  bool hlml_tried = false;
  bool hlml_failed_once = false;
  rayaccel::gaudi::Hlml hlml;
  // Faults HLML reported, by PCI bus id. One outlives rescans until the device is seen out of
  // operation (a reset) and operational again.
  struct Fault {
    std::string reason;
    bool reset_seen = false;
    std::optional<uint64_t> resets;  // the device's reset count when the fault came
  };
  std::map<std::string, Fault> faults;
};

namespace rayaccel::gaudi {
namespace {

using plugin::Str;

constexpr char kVersion[] = "1.0.0";
constexpr uint64_t kGiB = uint64_t{1} << 30;

struct GenerationFacts {
  const char* name;          // "Intel Gaudi 2"
  const char* architecture;  // "gaudi2"
  uint64_t hbm_bytes;
  // Inside an HLS box every pair of accelerators is linked directly over RoCE ports on the
  // accelerators: Gaudi 1 has one 100 GbE port per peer, Gaudi 2 three 100 GbE ports (21
  // scale-up ports for 7 peers), Gaudi 3 three 200 GbE ports.
  uint32_t ports_per_peer;
  uint64_t port_mbps;  // MB/s per port and direction
};

const GenerationFacts* Facts(int generation) {
  static const GenerationFacts kFacts[] = {
      {"Intel Gaudi", "gaudi", 32 * kGiB, 1, 12500},
      {"Intel Gaudi 2", "gaudi2", 96 * kGiB, 3, 12500},
      {"Intel Gaudi 3", "gaudi3", 128 * kGiB, 3, 25000},
  };
  return generation >= 1 && generation <= 3 ? &kFacts[generation - 1] : nullptr;
}

rayaccel_status Initialize(rayaccel_initialize_args* args, rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    auto self = std::make_unique<rayaccel_plugin_instance>();
    self->host = args->host;
    self->sysfs_root = plugin::ConfigValue(args, "sysfs_root", "/sys");
    self->hlml_library = plugin::ConfigValue(args, "hlml_library");
    args->instance = self.release();
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status Shutdown(rayaccel_plugin_instance* self, rayaccel_error* /*error*/) {
  if (self == nullptr) return RAYACCEL_STATUS_INVALID_ARGUMENT;
  Hlml& h = self->hlml;
  if (h.events != nullptr) h.hlml_event_set_free(h.events);
  if (h.initialized) h.hlml_shutdown();
  rayaccel::plugin::CloseLibrary(h.handle);
  delete self;
  return RAYACCEL_STATUS_OK;
}

// Loads and initializes libhlml.so once; says why not in a log line. Caller holds mu.
void LoadHlml(rayaccel_plugin_instance* self) {
  if (self->hlml_tried) return;
  self->hlml_tried = true;
  Hlml& h = self->hlml;
  std::vector<std::string> candidates = {self->hlml_library};
  if (self->hlml_library.empty()) candidates = {"libhlml.so", "/usr/lib/habanalabs/libhlml.so"};
  std::string why;
  for (const std::string& c : candidates) {
    h.handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h.handle != nullptr) break;
    const char* e = dlerror();
    why = e != nullptr ? e : c;
  }
  if (h.handle == nullptr) {
    plugin::Log(self->host, RAYACCEL_LOG_INFO,
                "no libhlml.so (" + why + "): health from the driver's status file only");
    return;
  }
#define RAYACCEL_HLML_LOAD(f)                                  \
  h.f = reinterpret_cast<decltype(&::f)>(dlsym(h.handle, #f)); \
  if (h.f == nullptr && why.empty()) why = "libhlml.so lacks " #f;
  why.clear();
  RAYACCEL_HLML_FUNCTIONS(RAYACCEL_HLML_LOAD)
#undef RAYACCEL_HLML_LOAD
  hlml_return_t rc = why.empty() ? h.hlml_init() : HLML_SUCCESS;
  if (!why.empty() || (rc != HLML_SUCCESS && rc != HLML_ERROR_ALREADY_INITIALIZED)) {
    if (!self->hlml_failed_once) {
      plugin::Log(self->host, RAYACCEL_LOG_WARN,
                  why.empty() ? "hlml_init failed with HLML error " + std::to_string(rc) +
                                    "; trying again at each scan"
                              : why);
    }
    self->hlml_failed_once = true;
    rayaccel::plugin::CloseLibrary(h.handle);
    h = Hlml();
    if (why.empty()) self->hlml_tried = false;  // the driver may come up later
    return;
  }
  h.initialized = true;
  h.telemetry = LoadHlmlTelemetry(h.handle);
  unsigned count = 0;
  if (h.hlml_device_get_count(&count) != HLML_SUCCESS) count = 0;
  for (unsigned i = 0; i < count; ++i) {
    hlml_device_t d = nullptr;
    hlml_pci_info_t pci{};
    if (h.hlml_device_get_handle_by_index(i, &d) != HLML_SUCCESS ||
        h.hlml_device_get_pci_info(d, &pci) != HLML_SUCCESS) {
      continue;
    }
    std::string bus(pci.bus_id, strnlen(pci.bus_id, sizeof(pci.bus_id)));
    for (char& c : bus) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    h.bus_ids[d] = bus;
    char serial[256] = {};
    if (h.hlml_device_get_serial(d, serial, sizeof(serial)) == HLML_SUCCESS) {
      h.serials[bus] = std::string(serial, strnlen(serial, sizeof(serial)));
    }
  }
}

rayaccel_status GetProperties(rayaccel_plugin_instance* /*self*/, rayaccel_plugin_properties* props,
                              rayaccel_error* /*error*/) {
  plugin::SetProperties(props, "intel", "HPU", "HABANA_VISIBLE_MODULES", kVersion);
  return RAYACCEL_STATUS_OK;
}

rayaccel_status Discover(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                         rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    Scan scan = ScanHost(self->sysfs_root);
    if (!scan.accelerators.empty()) LoadHlml(self);
    for (const std::string& p : scan.problems) plugin::Log(self->host, RAYACCEL_LOG_WARN, p);
    if (scan.accelerators.empty()) {
      plugin::ExplainNoDevices(self->host, sink, scan.why_none);
    }
    for (const Accelerator& a : scan.accelerators) {
      const GenerationFacts* facts = Facts(GenerationOf(a.pci.device, a.device_type));
      std::string id = "gaudi-" + a.pci.bus_id;
      std::string reason;
      rayaccel_device_info info{};
      info.struct_size = sizeof(info);
      info.index = a.module_id;  // what HABANA_VISIBLE_MODULES names
      info.id = Str(id);
      info.name = Str(facts != nullptr ? facts->name : "Intel Gaudi");
      if (facts != nullptr) info.architecture = Str(facts->architecture);
      info.memory_bytes = facts != nullptr ? facts->hbm_bytes : 0;
      info.pci_bus_id = Str(a.pci.bus_id);
      info.pci_vendor_id = a.pci.vendor;
      info.pci_device_id = a.pci.device;
      info.numa_node = a.pci.numa_node;
      info.driver_version = Str(scan.driver_version);
      info.firmware_version = Str(a.fw_os_version);
      auto fault = self->faults.find(a.pci.bus_id);
      if (fault != self->faults.end()) {
        // A fault HLML reported holds until the device has been out of operation (a reset)
        // and reads operational again.
        // A reset shows as the device out of operation, or as a grown reset count.
        if (!fault->second.resets) fault->second.resets = a.resets;
        if (!IsOperational(a.status) || a.resets > *fault->second.resets) {
          fault->second.reset_seen = true;
        }
        if (fault->second.reset_seen && IsOperational(a.status)) {
          self->faults.erase(fault);
          fault = self->faults.end();
        }
      }
      if (a.status.empty()) {
        info.health = RAYACCEL_HEALTH_UNKNOWN;
        reason = "the driver reports no status";
      } else if (!IsOperational(a.status)) {
        info.health = RAYACCEL_HEALTH_UNHEALTHY;
        reason = "status: " + a.status;
      } else if (fault != self->faults.end()) {
        info.health = RAYACCEL_HEALTH_UNHEALTHY;
        reason = fault->second.reason;
      } else {
        info.health = RAYACCEL_HEALTH_HEALTHY;
      }
      info.health_reason = Str(reason);
      rayaccel_status rc = sink->add_device(sink->host_context, &info);
      if (rc == RAYACCEL_STATUS_RESOURCE_EXHAUSTED || rc == RAYACCEL_STATUS_ABORTED) return rc;
      if (rc != RAYACCEL_STATUS_OK) continue;
      using plugin::AddAttribute;
      AddAttribute(sink, a.module_id, "module_id", static_cast<int64_t>(a.module_id));
      AddAttribute(sink, a.module_id, "device_node", "/dev/accel/" + a.name);
      AddAttribute(sink, a.module_id, "device_type", a.device_type);
      AddAttribute(sink, a.module_id, "scale_out_nic", a.scale_out_nic);
      AddAttribute(sink, a.module_id, "cpucp_version", a.cpucp_version);
      auto serial = self->hlml.serials.find(a.pci.bus_id);
      if (serial != self->hlml.serials.end()) {
        AddAttribute(sink, a.module_id, "serial_number", serial->second);
      }
      if (a.max_power_mw != 0) {
        AddAttribute(sink, a.module_id, "max_power_mw", static_cast<int64_t>(a.max_power_mw));
      }
    }
    self->scan = std::move(scan);
    return RAYACCEL_STATUS_OK;
  });
}

std::string EventName(unsigned long long type) {
  if (type & HLML_EVENT_CRITICAL_ERR) return "critical error";
  if (type & HLML_EVENT_ECC_DERR) return "uncorrectable ECC error";
  if (type & HLML_EVENT_DRAM_ERR) return "DRAM error";
  return "event " + std::to_string(type);
}

// HLML's critical, uncorrectable-ECC and DRAM error events, one at a time. UNSUPPORTED
// without libhlml.so, so the host's health watch stops asking.
rayaccel_status WaitHealthEvents(rayaccel_plugin_instance* self, rayaccel_health_wait_args* args,
                                 rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    hlml_event_set_t set = nullptr;
    Hlml* h = &self->hlml;
    {
      std::lock_guard<std::mutex> lock(self->mu);
      LoadHlml(self);
      if (!h->initialized) {
        return plugin::Fail(error, RAYACCEL_STATUS_UNSUPPORTED,
                            "no libhlml.so: health comes from the driver's status file");
      }
      if (h->events == nullptr) {
        if (h->hlml_event_set_create(&h->events) != HLML_SUCCESS) {
          h->events = nullptr;
          return plugin::Fail(error, RAYACCEL_STATUS_UNAVAILABLE, "hlml_event_set_create failed");
        }
        for (const auto& [device, bus] : h->bus_ids) {
          hlml_return_t rc = h->hlml_device_register_events(
              device, HLML_EVENT_CRITICAL_ERR | HLML_EVENT_ECC_DERR | HLML_EVENT_DRAM_ERR,
              h->events);
          if (rc != HLML_SUCCESS) {
            plugin::Log(self->host, RAYACCEL_LOG_WARN,
                        "no HLML events for " + bus +
                            ": hlml_device_register_events failed with HLML error " +
                            std::to_string(rc));
          }
        }
      }
      set = h->events;
    }
    hlml_event_data_t data{};
    hlml_return_t rc = h->hlml_event_set_wait(set, &data, args->timeout_ms);
    if (rc == HLML_ERROR_TIMEOUT) return RAYACCEL_STATUS_TIMEOUT;
    if (rc != HLML_SUCCESS) {
      return plugin::Fail(error, RAYACCEL_STATUS_UNAVAILABLE,
                          "hlml_event_set_wait failed with HLML error " + std::to_string(rc));
    }
    std::lock_guard<std::mutex> lock(self->mu);
    auto bus = h->bus_ids.find(data.device);
    if (bus == h->bus_ids.end()) return RAYACCEL_STATUS_TIMEOUT;  // not a device HLML listed
    std::string reason = "HLML " + EventName(data.event_type);
    // Kept by bus id whatever the last scan holds: the next scan applies it too.
    self->faults[bus->second] = {reason, false, std::nullopt};
    for (const Accelerator& a : self->scan.accelerators) {
      if (a.pci.bus_id != bus->second) continue;
      self->faults[bus->second].resets = a.resets;
      return args->sink->set_health(args->sink->host_context, a.module_id,
                                    RAYACCEL_HEALTH_UNHEALTHY, Str(reason));
    }
    return RAYACCEL_STATUS_TIMEOUT;
  });
}

// Each accelerator's sample from HLML, by module id; without libhlml.so every field is unknown
// (the driver's sysfs holds no utilization or memory use).
rayaccel_status GetTelemetry(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                             rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    LoadHlml(self);
    Hlml& h = self->hlml;
    if (!h.initialized) {
      sink->explain_unknown(sink->host_context, plugin::kEverySampleField,
                            Str("no libhlml.so: the habanalabs driver's sysfs has no telemetry"));
      return RAYACCEL_STATUS_OK;
    }
    uint32_t known = 0;
    std::map<uint32_t, std::string> why;
    for (const Accelerator& a : self->scan.accelerators) {
      auto handle = std::find_if(h.bus_ids.begin(), h.bus_ids.end(),
                                 [&](const auto& entry) { return entry.second == a.pci.bus_id; });
      if (handle == h.bus_ids.end()) continue;  // HLML does not list it: no sample
      rayaccel_device_sample s{};
      s.struct_size = sizeof(s);
      s.device_index = a.module_id;
      if (!SampleAip(h.telemetry, handle->first, &s, &why)) continue;
      known |= s.known;
      rayaccel_status rc = sink->add_sample(sink->host_context, &s);
      if (rc == RAYACCEL_STATUS_RESOURCE_EXHAUSTED || rc == RAYACCEL_STATUS_ABORTED) return rc;
    }
    plugin::ExplainUnknownFields(sink, known, why);
    return RAYACCEL_STATUS_OK;
  });
}

// The box's all-to-all scale-up links between accelerators of one generation, and the box as
// a domain.
rayaccel_status GetTopology(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                            rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    const std::vector<Accelerator>& all = self->scan.accelerators;
    std::vector<uint32_t> members;
    for (size_t i = 0; i < all.size(); ++i) {
      members.push_back(all[i].module_id);
      int gi = GenerationOf(all[i].pci.device, all[i].device_type);
      const GenerationFacts* facts = Facts(gi);
      for (size_t j = i + 1; facts != nullptr && j < all.size(); ++j) {
        if (GenerationOf(all[j].pci.device, all[j].device_type) != gi) continue;
        rayaccel_link link{};
        link.struct_size = sizeof(link);
        link.device_a = all[i].module_id;
        link.device_b = all[j].module_id;
        link.type = RAYACCEL_LINK_SCALE_OUT;
        link.count = facts->ports_per_peer;
        link.bandwidth_mbps = facts->ports_per_peer * facts->port_mbps;
        link.hops = 1;
        sink->add_link(sink->host_context, &link);
      }
    }
    if (members.size() > 1) plugin::AddDomain(sink, "gaudi-box", "local", members);
    return RAYACCEL_STATUS_OK;
  });
}

// Ray's HPU manager sets HABANA_VISIBLE_MODULES to the module ids.
rayaccel_status PrepareAllocation(rayaccel_plugin_instance* self, rayaccel_allocation_args* args,
                                  rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    std::string list;
    for (size_t i = 0; i < args->device_count; ++i) {
      uint32_t module = args->device_indices[i];
      bool known = std::any_of(self->scan.accelerators.begin(), self->scan.accelerators.end(),
                               [&](const Accelerator& a) { return a.module_id == module; });
      if (!known) {
        return plugin::Fail(error, RAYACCEL_STATUS_NOT_FOUND,
                            "no Gaudi with module id " + std::to_string(module));
      }
      list += (i == 0 ? "" : ",") + std::to_string(module);
    }
    return plugin::SetEnv(args->sink, "HABANA_VISIBLE_MODULES", list);
  });
}

constexpr rayaccel_plugin_api kApi = {
    sizeof(rayaccel_plugin_api),
    RAYACCEL_ABI_VERSION_MAJOR,
    RAYACCEL_ABI_VERSION_MINOR,
    {"gaudi", 5},
    RAYACCEL_CAP_TOPOLOGY | RAYACCEL_CAP_ALLOCATION | RAYACCEL_CAP_HEALTH_EVENTS |
        RAYACCEL_CAP_TELEMETRY,
    &Initialize,
    &Shutdown,
    &GetProperties,
    &Discover,
    /*get_labels=*/nullptr,
    &GetTopology,
    /*get_health=*/nullptr,  // health comes with each device, from its status file
    &WaitHealthEvents,
    /*validate_quantity=*/nullptr,  // Ray's HPU takes any whole number
    &PrepareAllocation,
    /*transport=*/nullptr,
    &GetTelemetry,
};

}  // namespace
}  // namespace rayaccel::gaudi

extern "C" RAYACCEL_PLUGIN_EXPORT rayaccel_status
rayaccel_plugin_entry(rayaccel_negotiation* negotiation, rayaccel_error* error) {
  return rayaccel::plugin::Negotiate(negotiation, &rayaccel::gaudi::kApi, error);
}
