// The Huawei Ascend plugin: NPUs from the driver's device nodes and PCI functions, given to
// Ray as Ray's own NPUAcceleratorManager gives them (docs/ascend.md): resource `NPU`, one per
// /dev/davinci<N>, numbered by logical id (what ASCEND_RT_VISIBLE_DEVICES names), and that
// variable as a comma-separated list of them. Then what Ray's manager does not know: PCI bus
// ids and NUMA nodes, and the HCCS links of the servers whose wiring is fixed by the model.
// Needs no CANN runtime; with the driver's libdcmi.so it samples telemetry. Config keys:
//   dev_root      where device nodes live (default /dev)
//   sysfs_root    where sysfs starts (default /sys)
//   dcmi_library  libdcmi.so to load for telemetry (default: libdcmi.so, then the driver's)
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ascend/ascend_host.h"
#include "ascend/dcmi_telemetry.h"
#include "common/plugin_util.h"

struct rayaccel_plugin_instance {
  const rayaccel_host_api* host = nullptr;
  std::string dev_root, sysfs_root, dcmi_library;
  std::mutex mu;  // guards the scan and DCMI
  rayaccel::ascend::NpuScan scan;
  rayaccel::ascend::Dcmi dcmi;
};

namespace rayaccel::ascend {
namespace {

using plugin::Str;

constexpr char kVersion[] = "1.0.0";

rayaccel_status Initialize(rayaccel_initialize_args* args, rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    auto self = std::make_unique<rayaccel_plugin_instance>();
    self->host = args->host;
    self->dev_root = plugin::ConfigValue(args, "dev_root", "/dev");
    self->sysfs_root = plugin::ConfigValue(args, "sysfs_root", "/sys");
    self->dcmi_library = plugin::ConfigValue(args, "dcmi_library");
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
  plugin::SetProperties(props, "huawei", "NPU", "ASCEND_RT_VISIBLE_DEVICES", kVersion);
  return RAYACCEL_STATUS_OK;
}

rayaccel_status Discover(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                         rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    self->scan = FindNpus(self->dev_root, self->sysfs_root);
    if (self->scan.npus.empty()) {
      plugin::ExplainNoDevices(self->host, sink, self->scan.why_none);
      return RAYACCEL_STATUS_OK;
    }
    for (const Npu& npu : self->scan.npus) {
      // Stable across restarts: the PCI bus id, else the physical id.
      const std::string id = "npu-" + (npu.pci ? npu.pci->bus_id : std::to_string(npu.physical_id));
      rayaccel_device_info info{};
      info.struct_size = sizeof(info);
      info.index = npu.logical_id;
      info.id = Str(id);
      info.name = Str(npu.chip != nullptr ? npu.chip->name : "Ascend NPU");
      // CANN's SoC family; Ray's type is aclrtGetSocName()'s full name (docs/ascend.md).
      info.accelerator_type = Str(npu.chip != nullptr ? npu.chip->soc : "");
      info.memory_bytes = npu.chip != nullptr ? npu.chip->hbm_bytes : 0;
      info.numa_node = -1;
      if (npu.pci) {
        info.pci_bus_id = Str(npu.pci->bus_id);
        info.pci_vendor_id = npu.pci->vendor;
        info.pci_device_id = npu.pci->device;
        info.numa_node = npu.pci->numa_node;
      }
      info.health = RAYACCEL_HEALTH_HEALTHY;
      rayaccel_status rc = sink->add_device(sink->host_context, &info);
      if (rc == RAYACCEL_STATUS_RESOURCE_EXHAUSTED || rc == RAYACCEL_STATUS_ABORTED) return rc;
      if (rc != RAYACCEL_STATUS_OK) continue;
      plugin::AddAttribute(sink, npu.logical_id, "physical_id",
                           static_cast<int64_t>(npu.physical_id));
      plugin::AddAttribute(sink, npu.logical_id, "device_node", npu.node);
    }
    return RAYACCEL_STATUS_OK;
  });
}

// The HCCS groups of the servers whose wiring the model fixes, by physical id: an Atlas 800
// training server's eight Ascend 910 are two rings of four (0-3, 4-7), each ring all-to-all
// over HCCS and the rings joined over PCIe; an Atlas 800T A2's eight 910B are all-to-all.
std::map<uint32_t, std::vector<const Npu*>> HccsGroups(const NpuScan& scan) {
  std::map<uint32_t, std::vector<const Npu*>> groups;
  for (const Npu& npu : scan.npus) {
    if (npu.chip == nullptr || npu.physical_id > 7) continue;
    const std::string soc = npu.chip->soc;
    if (soc == "Ascend910") groups[npu.physical_id / 4].push_back(&npu);
    if (soc == "Ascend910B") groups[0].push_back(&npu);
  }
  return groups;
}

rayaccel_status GetTopology(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                            rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    for (const auto& [group, npus] : HccsGroups(self->scan)) {
      if (npus.size() < 2) continue;
      std::vector<uint32_t> members;
      for (size_t i = 0; i < npus.size(); ++i) {
        members.push_back(npus[i]->logical_id);
        for (size_t j = i + 1; j < npus.size(); ++j) {
          plugin::AddLink(sink, npus[i]->logical_id, npus[j]->logical_id, RAYACCEL_LINK_OTHER,
                          "HCCS");
        }
      }
      plugin::AddDomain(sink, "hccs", "group" + std::to_string(group), members);
    }
    return RAYACCEL_STATUS_OK;
  });
}

// Each NPU's sample from DCMI, by logical id; without libdcmi.so every field is unknown.
rayaccel_status GetTelemetry(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                             rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    std::string why_not;
    if (!self->dcmi.Open(self->dcmi_library, &why_not)) {
      sink->explain_unknown(sink->host_context, plugin::kEverySampleField, Str(why_not));
      return RAYACCEL_STATUS_OK;
    }
    uint32_t known = 0;
    std::map<uint32_t, std::string> why;
    for (const Npu& npu : self->scan.npus) {
      rayaccel_device_sample s{};
      s.struct_size = sizeof(s);
      s.device_index = npu.logical_id;
      self->dcmi.Sample(npu.physical_id, &s, &why);
      known |= s.known;
      rayaccel_status rc = sink->add_sample(sink->host_context, &s);
      if (rc == RAYACCEL_STATUS_RESOURCE_EXHAUSTED || rc == RAYACCEL_STATUS_ABORTED) return rc;
    }
    plugin::ExplainUnknownFields(sink, known, why);
    return RAYACCEL_STATUS_OK;
  });
}

constexpr rayaccel_plugin_api kApi = {
    sizeof(rayaccel_plugin_api),
    RAYACCEL_ABI_VERSION_MAJOR,
    RAYACCEL_ABI_VERSION_MINOR,
    {"ascend", 6},
    RAYACCEL_CAP_TOPOLOGY | RAYACCEL_CAP_TELEMETRY,
    &Initialize,
    &Shutdown,
    &GetProperties,
    &Discover,
    /*get_labels=*/nullptr,  // Ray's manager sets none
    &GetTopology,
    /*get_health=*/nullptr,  // healthy while its device node is there
    /*wait_health_events=*/nullptr,
    // Ray accepts any quantity of NPU, and the host's visible-devices list (logical ids,
    // comma-separated) is the format Ray writes.
    /*validate_quantity=*/nullptr,
    /*prepare_allocation=*/nullptr,
    /*transport=*/nullptr,
    &GetTelemetry,
};

}  // namespace
}  // namespace rayaccel::ascend

extern "C" RAYACCEL_PLUGIN_EXPORT rayaccel_status
rayaccel_plugin_entry(rayaccel_negotiation* negotiation, rayaccel_error* error) {
  return rayaccel::plugin::Negotiate(negotiation, &rayaccel::ascend::kApi, error);
}
