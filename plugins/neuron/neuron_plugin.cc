// The AWS Neuron plugin: Inferentia and Trainium devices from the Neuron driver's sysfs, given
// to Ray as Ray's own NeuronAcceleratorManager gives them (docs/neuron.md): resource
// `neuron_cores`, one unit per NeuronCore, numbered as the Neuron runtime numbers them (device
// N's cores are N * cores_per_device + k), type `aws-neuron-core`, and NEURON_RT_VISIBLE_CORES
// as a comma-separated list of those numbers. Then what Ray's manager does not know: each
// core's device, the NeuronLink wiring between devices, and the devices as domains. Needs no
// Neuron runtime or tools. Config keys:
//   sysfs_root  where sysfs starts (default /sys)
//   dev_root    where device nodes live (default /dev)
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/plugin_util.h"
#include "neuron/neuron_host.h"

struct rayaccel_plugin_instance {
  const rayaccel_host_api* host = nullptr;
  std::string sysfs_root, dev_root;
  std::mutex mu;  // guards the scan
  rayaccel::neuron::NeuronScan scan;
};

namespace rayaccel::neuron {
namespace {

using plugin::Str;

constexpr char kVersion[] = "1.0.0";
// Ray's type for every Neuron core (ray.util.accelerators.AWS_NEURON_CORE).
constexpr char kRayType[] = "aws-neuron-core";

// The runtime's number of a device's first core: the cores of the devices before it.
std::map<uint32_t, uint32_t> FirstCores(const NeuronScan& scan) {
  std::map<uint32_t, uint32_t> first;
  uint32_t next = 0;
  for (const NeuronDevice& d : scan.devices) {
    first[d.index] = next;
    next += d.core_count;
  }
  return first;
}

rayaccel_status Initialize(rayaccel_initialize_args* args, rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    auto self = std::make_unique<rayaccel_plugin_instance>();
    self->host = args->host;
    self->sysfs_root = plugin::ConfigValue(args, "sysfs_root", "/sys");
    self->dev_root = plugin::ConfigValue(args, "dev_root", "/dev");
    args->instance = self.release();
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status Shutdown(rayaccel_plugin_instance* self, rayaccel_error* /*error*/) {
  delete self;
  return RAYACCEL_STATUS_OK;
}

rayaccel_status GetProperties(rayaccel_plugin_instance* /*self*/, rayaccel_plugin_properties* props,
                              rayaccel_error* /*error*/) {
  plugin::SetProperties(props, "aws", "neuron_cores", "NEURON_RT_VISIBLE_CORES", kVersion);
  return RAYACCEL_STATUS_OK;
}

rayaccel_status Discover(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                         rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    self->scan = FindNeuronDevices(self->sysfs_root, self->dev_root);
    for (const std::string& p : self->scan.problems) {
      plugin::Log(self->host, RAYACCEL_LOG_WARN, p);
    }
    if (self->scan.devices.empty()) {
      plugin::ExplainNoDevices(self->host, sink, self->scan.why_none);
      return RAYACCEL_STATUS_OK;
    }
    const std::map<uint32_t, uint32_t> first = FirstCores(self->scan);
    for (const NeuronDevice& d : self->scan.devices) {
      const std::string device = "neuron" + std::to_string(d.index);
      const std::string name = d.device_name.empty() ? "NeuronCore" : d.device_name + " NeuronCore";
      for (uint32_t k = 0; k < d.core_count; ++k) {
        const uint32_t core = first.at(d.index) + k;
        // Stable while the node runs: the device and the core on it.
        const std::string id = "neuron-" + std::to_string(d.index) + "-nc" + std::to_string(k);
        rayaccel_device_info info{};
        info.struct_size = sizeof(info);
        info.index = core;
        info.id = Str(id);
        info.name = Str(name);
        info.accelerator_type = Str(kRayType);
        info.architecture = Str(d.arch_type);
        info.numa_node = -1;
        info.health = RAYACCEL_HEALTH_HEALTHY;
        rayaccel_status rc = sink->add_device(sink->host_context, &info);
        if (rc == RAYACCEL_STATUS_RESOURCE_EXHAUSTED || rc == RAYACCEL_STATUS_ABORTED) return rc;
        if (rc != RAYACCEL_STATUS_OK) continue;
        plugin::AddAttribute(sink, core, "neuron_device", static_cast<int64_t>(d.index));
        plugin::AddAttribute(sink, core, "core_on_device", static_cast<int64_t>(k));
        plugin::AddAttribute(sink, core, "instance_family", d.instance_type);  // "" is left out
        plugin::AddAttribute(sink, core, "device_node", d.device_node);
      }
    }
    return RAYACCEL_STATUS_OK;
  });
}

// Cores of one device share it (weight 1); cores of devices the driver says are wired
// together are one NeuronLink apart (weight 2). Each device is a domain of its cores, and the
// devices joined by NeuronLink one domain of all theirs.
rayaccel_status GetTopology(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                            rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    const NeuronScan& scan = self->scan;
    const std::map<uint32_t, uint32_t> first = FirstCores(scan);
    std::map<uint32_t, const NeuronDevice*> by_index;
    for (const NeuronDevice& d : scan.devices) by_index[d.index] = &d;
    std::set<std::pair<uint32_t, uint32_t>> wired;
    std::vector<uint32_t> linked_cores;
    for (const NeuronDevice& d : scan.devices) {
      const uint32_t base = first.at(d.index);
      std::vector<uint32_t> cores;
      for (uint32_t k = 0; k < d.core_count; ++k) cores.push_back(base + k);
      for (size_t i = 0; i < cores.size(); ++i) {
        for (size_t j = i + 1; j < cores.size(); ++j) {
          plugin::AddLink(sink, cores[i], cores[j], RAYACCEL_LINK_OTHER, "on-device", 1);
        }
      }
      plugin::AddDomain(sink, "neuron-device", "neuron" + std::to_string(d.index), cores);
      for (uint32_t peer : d.connected) {
        auto other = by_index.find(peer);
        if (peer == d.index || other == by_index.end()) continue;
        if (!wired.insert({std::min(d.index, peer), std::max(d.index, peer)}).second) continue;
        const uint32_t peer_base = first.at(peer);
        for (uint32_t k = 0; k < d.core_count; ++k) {
          for (uint32_t m = 0; m < other->second->core_count; ++m) {
            plugin::AddLink(sink, base + k, peer_base + m, RAYACCEL_LINK_OTHER, "NeuronLink", 2);
          }
        }
      }
    }
    if (!wired.empty()) {
      std::set<uint32_t> devices;
      for (const auto& [a, b] : wired) devices.insert({a, b});
      for (uint32_t n : devices) {
        for (uint32_t k = 0; k < by_index.at(n)->core_count; ++k) {
          linked_cores.push_back(first.at(n) + k);
        }
      }
      plugin::AddDomain(sink, "neuronlink", "node", linked_cores);
    }
    return RAYACCEL_STATUS_OK;
  });
}

// Each NeuronCore's device memory in use, from the driver's per-core counters, against its
// share of the chip's HBM. The driver keeps no utilization (neuron-monitor derives it from the
// runtime), reports power as a percent of the chip's maximum, not in milliwatts, has no
// temperature, and counts uncorrected ECC errors only: those stay unknown, said once.
rayaccel_status GetTelemetry(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                             rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    const std::map<uint32_t, uint32_t> first = FirstCores(self->scan);
    uint32_t known = 0;
    std::map<uint32_t, std::string> why = {
        {RAYACCEL_SAMPLE_UTILIZATION,
         "the Neuron driver's sysfs keeps no utilization (neuron-monitor derives it)"},
        {RAYACCEL_SAMPLE_POWER,
         "the Neuron driver reports power as a percent of the chip's maximum, not in mW"},
        {RAYACCEL_SAMPLE_TEMPERATURE, "the Neuron driver's sysfs has no temperature"},
        {RAYACCEL_SAMPLE_ECC, "the Neuron driver's sysfs counts uncorrected ECC errors only"},
        {RAYACCEL_SAMPLE_RETIRED_PAGES, "the Neuron driver's sysfs has no retired pages"},
        {RAYACCEL_SAMPLE_LINK_ERRORS, "the Neuron driver's sysfs has no NeuronLink error count"}};
    for (const NeuronDevice& d : self->scan.devices) {
      const uint64_t hbm = DeviceHbmBytes(d.device_name);
      for (uint32_t k = 0; k < d.core_count; ++k) {
        rayaccel_device_sample s{};
        s.struct_size = sizeof(s);
        s.device_index = first.at(d.index) + k;
        std::string reason;
        std::optional<uint64_t> used = CoreDeviceMemoryUsed(self->sysfs_root, d.index, k, &reason);
        if (used && hbm != 0) {
          s.known |= RAYACCEL_SAMPLE_MEMORY;
          s.memory_used_bytes = std::min(*used, hbm / d.core_count);
          s.memory_total_bytes = hbm / d.core_count;
        } else {
          why.emplace(RAYACCEL_SAMPLE_MEMORY,
                      used ? "no HBM size known for \"" + d.device_name + "\"" : reason);
        }
        known |= s.known;
        rayaccel_status rc = sink->add_sample(sink->host_context, &s);
        if (rc == RAYACCEL_STATUS_RESOURCE_EXHAUSTED || rc == RAYACCEL_STATUS_ABORTED) return rc;
      }
    }
    plugin::ExplainUnknownFields(sink, known, why);
    return RAYACCEL_STATUS_OK;
  });
}

constexpr rayaccel_plugin_api kApi = {
    sizeof(rayaccel_plugin_api),
    RAYACCEL_ABI_VERSION_MAJOR,
    RAYACCEL_ABI_VERSION_MINOR,
    {"neuron", 6},
    RAYACCEL_CAP_TOPOLOGY | RAYACCEL_CAP_TELEMETRY,
    &Initialize,
    &Shutdown,
    &GetProperties,
    &Discover,
    /*get_labels=*/nullptr,  // Ray's manager sets none
    &GetTopology,
    /*get_health=*/nullptr,  // healthy when the driver lists it
    /*wait_health_events=*/nullptr,
    // Ray refuses only fractional neuron_cores; a whole quantity is always valid, and the
    // host's visible-devices list is Ray's format (comma-separated core numbers).
    /*validate_quantity=*/nullptr,
    /*prepare_allocation=*/nullptr,
    /*transport=*/nullptr,
    &GetTelemetry,
};

}  // namespace
}  // namespace rayaccel::neuron

extern "C" RAYACCEL_PLUGIN_EXPORT rayaccel_status
rayaccel_plugin_entry(rayaccel_negotiation* negotiation, rayaccel_error* error) {
  return rayaccel::plugin::Negotiate(negotiation, &rayaccel::neuron::kApi, error);
}
