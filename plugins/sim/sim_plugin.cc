// The sim plugin: simulated accelerators described by a JSON spec (config key `spec`, or
// RAYACCEL_SIM_SPEC through the host). A real plugin in every other respect: same ABI, same
// loader, so tests, demos and the conformance suite exercise the host exactly as a vendor's
// plugin would. The spec is re-read on every discovery, so editing it and rescanning shows
// the change (e.g. a device turning unhealthy); with the host watching health, an edit is
// itself a health event and the new snapshot follows at once.
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "common/plugin_util.h"
#include "common/transport_fabric.h"
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
  std::string ucx_library;       // config ucx_library: the UCX its transport loads
  std::string transport_fabric;  // config transport_fabric: ucx or libfabric (transport_fabric.h)
  std::mutex mu;                 // guards everything below
  rayaccel::sim::SimSpec spec;
  bool loaded = false;  // `spec` matches the file as of loaded_stat
  struct stat loaded_stat {};
  // The health watch (wait_health_events): an inotify descriptor on the spec's folder and the
  // file as last reported. Guarded by watch_mu, taken only by the watching thread.
  std::mutex watch_mu;
  int inotify_fd = -1;
  bool watched = false;
  struct stat watched_stat {};
};

namespace rayaccel::sim {
namespace {

// Re-reads the spec when the file changed since the last read: another file under the name
// (an editor's save by rename; the kernel's file times tick in milliseconds, so a quick
// rewrite can keep the old time), another size or another modification time. A broken file
// is an error and the previous spec is kept for the other hooks.
rayaccel_status Reload(rayaccel_plugin_instance* self, rayaccel_error* error) {
  if (self->spec_path.empty()) return RAYACCEL_STATUS_OK;
  struct stat st {};
  const bool have_stat = stat(self->spec_path.c_str(), &st) == 0;
  const struct stat& was = self->loaded_stat;
  if (have_stat && self->loaded && st.st_dev == was.st_dev && st.st_ino == was.st_ino &&
      st.st_size == was.st_size && st.st_mtim.tv_sec == was.st_mtim.tv_sec &&
      st.st_mtim.tv_nsec == was.st_mtim.tv_nsec) {
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
  self->loaded_stat = st;
  return RAYACCEL_STATUS_OK;
}

constexpr char kNoSpec[] = "no spec configured (set sim.spec or RAYACCEL_SIM_SPEC)";

rayaccel_status Initialize(rayaccel_initialize_args* args, rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    if (args == nullptr ||
        args->struct_size < RAYACCEL_STRUCT_SIZE(rayaccel_initialize_args, instance)) {
      return rayaccel_error_set(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "bad initialize args");
    }
    auto self = std::make_unique<rayaccel_plugin_instance>();
    self->host = args->host;
    self->spec_path = plugin::ConfigValue(args, "spec");
    self->ucx_library = plugin::ConfigValue(args, "ucx_library");
    self->transport_fabric = plugin::ConfigValue(args, "transport_fabric");
    if (self->spec_path.empty()) {
      plugin::Log(self->host, RAYACCEL_LOG_INFO, std::string("0 devices: ") + kNoSpec);
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
  if (self->inotify_fd >= 0) close(self->inotify_fd);
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
    // Said on each scan to the sink; logged once, at initialize.
    if (self->spec_path.empty()) plugin::ExplainNoDevices(nullptr, sink, kNoSpec);
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

// Telemetry that changes as a busy node's does, from the clock: each device's utilization
// walks 0-100% on a period of its own, memory, power and temperature follow it, and the ECC
// count grows by one an hour on device 0. Link error counters are what a spec cannot say.
rayaccel_status GetTelemetry(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                             rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    if (self == nullptr || sink == nullptr ||
        !RAYACCEL_HAS_FIELD(sink, rayaccel_sink, explain_unknown)) {
      return rayaccel_error_set(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "NULL argument");
    }
    std::lock_guard<std::mutex> lock(self->mu);
    const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    for (size_t i = 0; i < self->spec.devices.size(); ++i) {
      const SimDevice& d = self->spec.devices[i];
      const int64_t period = 60 + 17 * static_cast<int64_t>(i);  // seconds
      const int64_t phase = (now + 13 * static_cast<int64_t>(i)) % period;
      const uint32_t busy = static_cast<uint32_t>(
          phase < period / 2 ? 200 * phase / period : 200 * (period - phase) / period);
      rayaccel_device_sample s{};
      s.struct_size = sizeof(s);
      s.device_index = static_cast<uint32_t>(i);
      s.known = RAYACCEL_SAMPLE_UTILIZATION | RAYACCEL_SAMPLE_POWER | RAYACCEL_SAMPLE_TEMPERATURE |
                RAYACCEL_SAMPLE_ECC | RAYACCEL_SAMPLE_RETIRED_PAGES;
      s.utilization_percent = std::min<uint32_t>(busy, 100);
      s.power_mw = 70'000 + 6'000 * s.utilization_percent;
      s.temperature_c = 32 + static_cast<int32_t>(s.utilization_percent) / 2;
      if (d.memory_bytes > 0) {
        s.known |= RAYACCEL_SAMPLE_MEMORY;
        s.memory_total_bytes = d.memory_bytes;
        s.memory_used_bytes = d.memory_bytes / 100 * (5 + s.utilization_percent * 9 / 10);
      }
      constexpr int64_t k2026 = 1767225600;  // 2026-01-01: an error an hour since
      s.ecc_corrected = i == 0 && now > k2026 ? static_cast<uint64_t>((now - k2026) / 3600) : 0;
      if (rayaccel_status rc = sink->add_sample(sink->host_context, &s); rc != RAYACCEL_STATUS_OK) {
        return rc;
      }
    }
    return sink->explain_unknown(sink->host_context, RAYACCEL_SAMPLE_LINK_ERRORS,
                                 Str("a sim spec has no link error counters"));
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
      link.type_name = Str(l.type_name);
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

// Whether the spec file differs from when it was last reported (or first seen).
bool SpecChanged(rayaccel_plugin_instance* self) {
  struct stat st {};
  if (stat(self->spec_path.c_str(), &st) != 0) st = {};  // gone: a change once, then not
  const struct stat& w = self->watched_stat;
  bool changed = self->watched &&
                 (st.st_ino != w.st_ino || st.st_size != w.st_size ||
                  st.st_mtim.tv_sec != w.st_mtim.tv_sec || st.st_mtim.tv_nsec != w.st_mtim.tv_nsec);
  self->watched = true;
  self->watched_stat = st;
  return changed;
}

// A spec edit is the sim's health event. It reports every device's health as the new spec
// has it (an edit can touch any of them), unknown for devices the spec no longer lists, and
// unknown for all when the spec no longer reads: always at least one change to report.
void ReportSpecHealth(rayaccel_plugin_instance* self, const rayaccel_sink* sink) {
  std::lock_guard<std::mutex> lock(self->mu);
  const size_t before = self->spec.devices.size();
  char text[256] = "";
  rayaccel_error problem{sizeof(problem), text, sizeof(text)};
  if (Reload(self, &problem) != RAYACCEL_STATUS_OK) {
    std::string reason = std::string("spec unreadable: ") + text;
    for (size_t i = 0; i < before; ++i) {
      sink->set_health(sink->host_context, static_cast<uint32_t>(i), RAYACCEL_HEALTH_UNKNOWN,
                       Str(reason));
    }
    return;
  }
  const std::vector<SimDevice>& now = self->spec.devices;
  for (size_t i = 0; i < now.size(); ++i) {
    sink->set_health(sink->host_context, static_cast<uint32_t>(i), now[i].health,
                     Str(now[i].health_reason));
  }
  for (size_t i = now.size(); i < before; ++i) {
    sink->set_health(sink->host_context, static_cast<uint32_t>(i), RAYACCEL_HEALTH_UNKNOWN,
                     Str(std::string("no longer in the spec")));
  }
}

// Waits for the spec to change. The folder is watched, not the file, so that an editor's
// write-to-a-temporary-and-rename counts; the stat comparison filters out other files.
rayaccel_status WaitHealthEvents(rayaccel_plugin_instance* self, rayaccel_health_wait_args* args,
                                 rayaccel_error* error) {
  return plugin::Guard(error, [&]() -> rayaccel_status {
    if (self == nullptr || args == nullptr) {
      return rayaccel_error_set(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "NULL argument");
    }
    if (self->spec_path.empty()) {
      return rayaccel_error_set(error, RAYACCEL_STATUS_UNSUPPORTED, "no spec to watch");
    }
    std::lock_guard<std::mutex> lock(self->watch_mu);
    if (self->inotify_fd < 0) {
      size_t slash = self->spec_path.rfind('/');
      std::string dir = slash == std::string::npos ? "." : self->spec_path.substr(0, slash + 1);
      int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
      if (fd < 0 || inotify_add_watch(fd, dir.c_str(),
                                      IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE |
                                          IN_MOVED_FROM | IN_ATTRIB) < 0) {
        if (fd >= 0) close(fd);
        return plugin::Fail(error, RAYACCEL_STATUS_UNAVAILABLE,
                            "cannot watch " + dir + ": " + std::strerror(errno));
      }
      self->inotify_fd = fd;
      // The baseline is the file as the last scan read it, so an edit made between that scan
      // and this first wait is still news.
      SpecChanged(self);
      std::lock_guard<std::mutex> spec_lock(self->mu);
      if (self->loaded) self->watched_stat = self->loaded_stat;
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(args->timeout_ms);
    while (true) {
      if (SpecChanged(self)) {
        ReportSpecHealth(self, args->sink);
        return RAYACCEL_STATUS_OK;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return RAYACCEL_STATUS_TIMEOUT;
      pollfd p{self->inotify_fd, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) > 0) {
        alignas(inotify_event) char drained[4096];
        while (read(self->inotify_fd, drained, sizeof(drained)) > 0) {
        }
      }
    }
  });
}

// Transfers go through the shared helpers, UCX or libfabric as the endpoint chooses (config
// transport_fabric, RAYACCEL_TRANSPORT_FABRIC); simulated devices have no memory of their own,
// so only host memory registers.
const rayaccel_transport_api kTransport =
    plugin::fabric::Table(&plugin::fabric::OpenEndpointFor<plugin::ucx::DeviceMemory::kNone>);

constexpr rayaccel_plugin_api kApi = {
    sizeof(rayaccel_plugin_api),
    RAYACCEL_ABI_VERSION_MAJOR,
    RAYACCEL_ABI_VERSION_MINOR,
    {"sim", 3},
    RAYACCEL_CAP_TOPOLOGY | RAYACCEL_CAP_ALLOCATION | RAYACCEL_CAP_THREAD_SAFE |
        RAYACCEL_CAP_HEALTH_EVENTS | RAYACCEL_CAP_TRANSPORT | RAYACCEL_CAP_TELEMETRY,
    &Initialize,
    &Shutdown,
    &GetProperties,
    &Discover,
    &GetLabels,
    &GetTopology,
    /*get_health=*/nullptr,  // health comes with each device from the spec
    &WaitHealthEvents,
    &ValidateQuantity,
    &PrepareAllocation,
    &kTransport,
    &GetTelemetry,
};

}  // namespace
}  // namespace rayaccel::sim

extern "C" RAYACCEL_PLUGIN_EXPORT rayaccel_status
rayaccel_plugin_entry(rayaccel_negotiation* negotiation, rayaccel_error* error) {
  return rayaccel::plugin::Negotiate(negotiation, &rayaccel::sim::kApi, error);
}
