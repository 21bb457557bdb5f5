// The Intel GPU plugin: Data Center GPU Max, Flex and Arc GPUs from the i915 and xe drivers'
// sysfs, given to Ray as Ray's own IntelGPUAcceleratorManager gives them (docs/intel_gpu.md):
// resource `GPU`, one per Level Zero root device, which under the default flat hierarchy is a
// tile (a Max 1550 is two), numbered in Level Zero's order (discrete first, by PCI bus id);
// type "Intel-GPU-" and the last two words of the device's name; ZE_AFFINITY_MASK with the
// device numbers, and ONEAPI_DEVICE_SELECTOR as "level_zero:" and the numbers the mask leaves
// (0 to n-1). Then what Ray's manager does not know: PCI bus
// ids and NUMA nodes, each tile's card, and the tiles of a card as a domain. Needs no Level Zero
// runtime. Config keys:
//   sysfs_root  where sysfs starts (default /sys)
//   hierarchy   FLAT (a device per tile) or COMPOSITE (a device per card); default
//               ZE_FLAT_DEVICE_HIERARCHY's value, else FLAT, as Level Zero decides
//   integrated  count the processor's integrated graphics too (default false)
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/plugin_util.h"
#include "intel_gpu/hwmon_telemetry.h"
#include "intel_gpu/intel_gpu_host.h"

namespace rayaccel::intel_gpu {

// One Level Zero root device: a tile of a card (flat hierarchy) or a whole card.
struct RootDevice {
  uint32_t index = 0;
  const Card* card = nullptr;
  uint32_t tile = 0;   // the tile, in the flat hierarchy
  bool whole = false;  // the card with all its tiles (composite hierarchy)
};

}  // namespace rayaccel::intel_gpu

struct rayaccel_plugin_instance {
  const rayaccel_host_api* host = nullptr;
  std::string sysfs_root;
  bool flat = true;
  bool integrated = false;
  std::mutex mu;  // guards the scan and the devices
  rayaccel::intel_gpu::CardScan scan;
  std::vector<rayaccel::intel_gpu::RootDevice> devices;
  std::map<std::string, rayaccel::intel_gpu::EnergyRate> energy;  // by PCI bus id
};

namespace rayaccel::intel_gpu {
namespace {

using plugin::Str;

constexpr char kVersion[] = "1.0.0";
// Ray's variable (its manager's get_visible_accelerator_ids_env_var), and the selector it writes
// beside it, with its backend (ONEAPI_DEVICE_BACKEND_TYPE + ":") before the numbers.
constexpr char kAffinityMask[] = "ZE_AFFINITY_MASK";
constexpr char kSelector[] = "ONEAPI_DEVICE_SELECTOR";
constexpr char kSelectorPrefix[] = "level_zero:";

rayaccel_status Initialize(rayaccel_initialize_args* args, rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    auto self = std::make_unique<rayaccel_plugin_instance>();
    self->host = args->host;
    self->sysfs_root = plugin::ConfigValue(args, "sysfs_root", "/sys");
    const char* env = std::getenv("ZE_FLAT_DEVICE_HIERARCHY");
    const std::string hierarchy = plugin::ConfigValue(args, "hierarchy", env ? env : "FLAT");
    // COMBINED exposes tiles as root devices as FLAT does; COMPOSITE exposes cards.
    if (hierarchy != "FLAT" && hierarchy != "COMPOSITE" && hierarchy != "COMBINED") {
      return plugin::Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                          "hierarchy \"" + hierarchy + "\" is not FLAT, COMPOSITE or COMBINED");
    }
    self->flat = hierarchy != "COMPOSITE";
    std::optional<bool> integrated = plugin::ConfigBool(args, "integrated", false);
    if (!integrated) {
      return plugin::Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                          "integrated must be true or false");
    }
    self->integrated = *integrated;
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
  plugin::SetProperties(props, "intel", "GPU", kAffinityMask, kVersion);
  return RAYACCEL_STATUS_OK;
}

std::vector<RootDevice> RootDevices(const CardScan& scan, bool flat) {
  std::vector<RootDevice> out;
  for (const Card& c : scan.cards) {
    const uint32_t n = flat ? c.tiles : 1;
    for (uint32_t t = 0; t < n; ++t) {
      RootDevice d;
      d.index = static_cast<uint32_t>(out.size());
      d.card = &c;
      d.tile = t;
      d.whole = !flat;
      out.push_back(d);
    }
  }
  return out;
}

rayaccel_status Discover(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                         rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    self->devices.clear();
    self->scan = FindCards(self->sysfs_root, self->integrated);
    self->devices = RootDevices(self->scan, self->flat);
    for (const std::string& p : self->scan.problems) {
      plugin::Log(self->host, RAYACCEL_LOG_WARN, p);
    }
    if (self->devices.empty()) {
      plugin::ExplainNoDevices(self->host, sink, self->scan.why_none);
      return RAYACCEL_STATUS_OK;
    }
    for (const RootDevice& d : self->devices) {
      const Card& c = *d.card;
      const bool split = !d.whole && c.tiles > 1;
      // Stable across restarts: the PCI bus id, and the tile when the card has several.
      const std::string id =
          "intel-" + c.pci.bus_id + (split ? "-t" + std::to_string(d.tile) : std::string());
      const std::string name = c.model != nullptr ? c.model->name : "Intel GPU";
      const std::string type = c.model != nullptr ? RayType(c.model->name) : "";
      uint64_t memory = c.model != nullptr ? c.model->tile_memory : 0;
      if (d.whole) memory *= c.tiles;
      rayaccel_device_info info{};
      info.struct_size = sizeof(info);
      info.index = d.index;
      info.id = Str(id);
      info.name = Str(name);
      info.accelerator_type = Str(type);
      info.architecture = Str(c.model != nullptr ? c.model->family : "");
      info.memory_bytes = memory;
      info.pci_bus_id = Str(c.pci.bus_id);
      info.pci_vendor_id = c.pci.vendor;
      info.pci_device_id = c.pci.device;
      info.numa_node = c.pci.numa_node;
      info.health = RAYACCEL_HEALTH_HEALTHY;
      rayaccel_status rc = sink->add_device(sink->host_context, &info);
      if (rc == RAYACCEL_STATUS_RESOURCE_EXHAUSTED || rc == RAYACCEL_STATUS_ABORTED) return rc;
      if (rc != RAYACCEL_STATUS_OK) continue;
      plugin::AddAttribute(sink, d.index, "card", static_cast<int64_t>(c.card));
      if (d.whole) {
        plugin::AddAttribute(sink, d.index, "tiles", static_cast<int64_t>(c.tiles));
      } else {
        plugin::AddAttribute(sink, d.index, "tile", static_cast<int64_t>(d.tile));
      }
      plugin::AddAttribute(sink, d.index, "driver", c.driver);  // "" is left out
      if (c.integrated)
        plugin::AddAttribute(sink, d.index, "integrated", 1, RAYACCEL_ATTRIBUTE_BOOL);
    }
    return RAYACCEL_STATUS_OK;
  });
}

// The tiles of one card share its package (weight 1): each card with several is a domain of
// them. Between cards the host's PCIe topology says the rest; Xe Link wiring is not in sysfs.
rayaccel_status GetTopology(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                            rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    std::vector<uint32_t> tiles;
    for (size_t i = 0; i < self->devices.size(); ++i) {
      const RootDevice& d = self->devices[i];
      tiles.push_back(d.index);
      const bool last = i + 1 == self->devices.size() || self->devices[i + 1].card != d.card;
      if (!last) continue;
      for (size_t a = 0; a < tiles.size(); ++a) {
        for (size_t b = a + 1; b < tiles.size(); ++b) {
          plugin::AddLink(sink, tiles[a], tiles[b], RAYACCEL_LINK_OTHER, "on-package", 1);
        }
      }
      if (tiles.size() > 1) plugin::AddDomain(sink, "intel-gpu-card", d.card->pci.bus_id, tiles);
      tiles.clear();
    }
    return RAYACCEL_STATUS_OK;
  });
}

// Each card's power (its hwmon energy counter's rate since the last call) and, on xe, its
// package temperature. A tile of a card that has several gets neither: the drivers measure
// the card. Utilization, memory in use and error counters are not in either driver's sysfs.
rayaccel_status GetTelemetry(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                             rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    const auto now = std::chrono::steady_clock::now();
    uint32_t known = 0;
    std::map<uint32_t, std::string> why = {
        {RAYACCEL_SAMPLE_UTILIZATION,
         "i915 and xe keep no utilization in sysfs (per client in DRM fdinfo only)"},
        {RAYACCEL_SAMPLE_MEMORY, "i915 and xe keep no memory in use in sysfs"},
        {RAYACCEL_SAMPLE_ECC, "i915 and xe keep no ECC counters in sysfs"},
        {RAYACCEL_SAMPLE_RETIRED_PAGES, "i915 and xe keep no retired pages in sysfs"},
        {RAYACCEL_SAMPLE_LINK_ERRORS, "i915 and xe keep no Xe Link error counters in sysfs"}};
    for (const RootDevice& d : self->devices) {
      rayaccel_device_sample s{};
      s.struct_size = sizeof(s);
      s.device_index = d.index;
      if (!d.whole && d.card->tiles > 1) {
        why.emplace(RAYACCEL_SAMPLE_POWER, "the driver measures power per card, not per tile");
        why.emplace(RAYACCEL_SAMPLE_TEMPERATURE, "the driver measures temperature per card");
      } else {
        const CardHwmon h = ReadCardHwmon(self->sysfs_root + "/class/drm/card" +
                                          std::to_string(d.card->card) + "/device");
        if (h.energy_uj) {
          std::optional<uint32_t> mw = self->energy[d.card->pci.bus_id].PowerMw(*h.energy_uj, now);
          if (mw) {
            s.known |= RAYACCEL_SAMPLE_POWER;
            s.power_mw = *mw;
          } else {
            why.emplace(RAYACCEL_SAMPLE_POWER,
                        "power is energy1_input's rate: two samples 100 ms or more apart");
          }
        } else {
          why.emplace(RAYACCEL_SAMPLE_POWER, h.why_no_energy);
        }
        if (h.temperature_c) {
          s.known |= RAYACCEL_SAMPLE_TEMPERATURE;
          s.temperature_c = *h.temperature_c;
        } else {
          why.emplace(RAYACCEL_SAMPLE_TEMPERATURE, h.why_no_temperature);
        }
      }
      known |= s.known;
      rayaccel_status rc = sink->add_sample(sink->host_context, &s);
      if (rc == RAYACCEL_STATUS_RESOURCE_EXHAUSTED || rc == RAYACCEL_STATUS_ABORTED) return rc;
    }
    plugin::ExplainUnknownFields(sink, known, why);
    return RAYACCEL_STATUS_OK;
  });
}

// As Ray's manager: the device numbers in ZE_AFFINITY_MASK, in the order given; Level Zero
// then shows the process only those, numbered from 0, so the selector names 0 to n-1.
rayaccel_status PrepareAllocation(rayaccel_plugin_instance* self, rayaccel_allocation_args* args,
                                  rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    std::string mask, selector = kSelectorPrefix;
    for (size_t i = 0; i < args->device_count; ++i) {
      const uint32_t index = args->device_indices[i];
      if (index >= self->devices.size()) {
        return plugin::Fail(error, RAYACCEL_STATUS_NOT_FOUND, "no device " + std::to_string(index));
      }
      if (i > 0) mask += ',', selector += ',';
      mask += std::to_string(index);
      selector += std::to_string(i);
    }
    rayaccel_status rc = plugin::SetEnv(args->sink, kAffinityMask, mask);
    if (rc != RAYACCEL_STATUS_OK) return rc;
    return plugin::SetEnv(args->sink, kSelector, selector);
  });
}

constexpr rayaccel_plugin_api kApi = {
    sizeof(rayaccel_plugin_api),
    RAYACCEL_ABI_VERSION_MAJOR,
    RAYACCEL_ABI_VERSION_MINOR,
    {"intel_gpu", 9},
    RAYACCEL_CAP_TOPOLOGY | RAYACCEL_CAP_ALLOCATION | RAYACCEL_CAP_TELEMETRY,
    &Initialize,
    &Shutdown,
    &GetProperties,
    &Discover,
    /*get_labels=*/nullptr,  // Ray's manager sets none
    &GetTopology,
    /*get_health=*/nullptr,  // healthy while the driver lists it
    /*wait_health_events=*/nullptr,
    // Ray accepts any quantity of GPU, fractions too.
    /*validate_quantity=*/nullptr,
    &PrepareAllocation,
    /*transport=*/nullptr,
    &GetTelemetry,
};

}  // namespace
}  // namespace rayaccel::intel_gpu

extern "C" RAYACCEL_PLUGIN_EXPORT rayaccel_status
rayaccel_plugin_entry(rayaccel_negotiation* negotiation, rayaccel_error* error) {
  return rayaccel::plugin::Negotiate(negotiation, &rayaccel::intel_gpu::kApi, error);
}
