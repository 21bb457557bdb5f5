// The TPU plugin: Google TPU chips on this host, and the slice the host belongs to, the way
// Ray's own TPU accelerator manager sees them (docs/tpu.md). Needs no TPU runtime. Config keys:
//   dev_root             where device nodes live (default /dev)
//   sysfs_root           where sysfs starts (default /sys)
//   metadata_url         the GCE metadata attributes URL (default: GCE's own)
//   metadata_timeout_ms  the longest one scan may spend asking the metadata server (500)
//   metadata             "off" never asks the metadata server
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "common/plugin_util.h"
#include "tpu/gce_metadata.h"
#include "tpu/tpu_facts.h"
#include "tpu/tpu_host.h"

struct rayaccel_plugin_instance {
  const rayaccel_host_api* host = nullptr;
  std::string dev_root, sysfs_root, metadata_url;
  std::chrono::milliseconds metadata_timeout{500};
  bool metadata = true;
  std::mutex mu;                                    // guards everything below
  std::vector<rayaccel::tpu::Chip> chips;           // this scan's, plus vanished ones
  std::set<std::string> vanished;                   // nodes seen before and gone now
  std::map<std::string, rayaccel::tpu::Chip> seen;  // every chip ever found, by device id
  rayaccel::tpu::SliceIdentity slice;
};

namespace rayaccel::tpu {
namespace {

using plugin::Str;

constexpr char kVersion[] = "1.0.0";

// Metadata answers are kept for the life of the process when they are definite (200, 404):
// the slice a host belongs to does not change while it runs. A server that gave no proper
// answer (a host off GCE, a network not up yet) is asked again a minute later, not before, so
// that scans do not pay the timeout over and over. `deadline` bounds one scan's asking.
std::optional<std::string> CachedMetadata(const rayaccel_plugin_instance* self,
                                          const std::string& key,
                                          std::chrono::steady_clock::time_point deadline) {
  using Clock = std::chrono::steady_clock;
  static std::mutex mu;
  static std::map<std::string, MetadataAnswer> answers;
  static std::map<std::string, Clock::time_point> resting;  // server -> not before
  std::string cache_key = self->metadata_url + key;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = answers.find(cache_key); it != answers.end()) return it->second.value;
  auto rest = resting.find(self->metadata_url);
  if (rest != resting.end() && Clock::now() < rest->second) return std::nullopt;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return std::nullopt;
  MetadataAnswer a = GetMetadata(self->metadata_url, key, left);
  if (!a.value) {
    plugin::Log(self->host, RAYACCEL_LOG_INFO,
                "metadata " + key + ": " + a.error + " (" + self->metadata_url + ")");
  }
  if (a.http_status == 200 || a.http_status == 404) {
    answers.emplace(cache_key, a);
  } else if (a.http_status == 0) {
    resting[self->metadata_url] = Clock::now() + std::chrono::minutes(1);
  }
  return a.value;
}

rayaccel_status Initialize(rayaccel_initialize_args* args, rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    auto self = std::make_unique<rayaccel_plugin_instance>();
    self->host = args->host;
    self->dev_root = plugin::ConfigValue(args, "dev_root", "/dev");
    self->sysfs_root = plugin::ConfigValue(args, "sysfs_root", "/sys");
    self->metadata_url = plugin::ConfigValue(args, "metadata_url", kDefaultMetadataUrl);
    std::string timeout = plugin::ConfigValue(args, "metadata_timeout_ms", "500");
    char* end = nullptr;
    long ms = std::strtol(timeout.c_str(), &end, 10);
    if (end == timeout.c_str() || *end != '\0' || ms <= 0 || ms > 60000) {
      return plugin::Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                          "metadata_timeout_ms must be 1 to 60000, not '" + timeout + "'");
    }
    self->metadata_timeout = std::chrono::milliseconds(ms);
    std::string metadata = plugin::ConfigValue(args, "metadata", "on");
    if (metadata != "on" && metadata != "off") {
      return plugin::Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "metadata is on or off");
    }
    self->metadata = metadata == "on";
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
  plugin::SetProperties(props, "google", "TPU", "TPU_VISIBLE_CHIPS", kVersion);
  return RAYACCEL_STATUS_OK;
}

// Stable across restarts and rebinding: the PCI bus id, else the device node's name.
std::string ChipId(const Chip& chip) {
  return "tpu-" + (chip.pci ? chip.pci->bus_id : chip.node.substr(chip.node.rfind('/') + 1));
}

const Generation* GenerationOf(const rayaccel_plugin_instance* self, const Chip& chip) {
  if (chip.pci) {
    if (const Generation* g = GenerationFromPciDevice(chip.pci->device)) return g;
  }
  return self->slice.pod_type.empty() ? nullptr
                                      : FindGeneration(PodGeneration(self->slice.pod_type));
}

rayaccel_status Discover(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                         rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    ChipScan scan = FindChips(self->dev_root, self->sysfs_root);
    // A chip whose device node disappears stays listed, unhealthy, so that a scheduler sees
    // the loss instead of a smaller host.
    std::set<std::string> present;
    std::set<uint32_t> present_index;
    for (const Chip& c : scan.chips) {
      present.insert(ChipId(c));
      present_index.insert(c.index);
    }
    // A chip found again under another node (its driver rebound to vfio, say), or one whose
    // index is taken again, is not a vanished one.
    for (auto it = self->seen.begin(); it != self->seen.end();) {
      it = present_index.count(it->second.index) > 0 && present.count(it->first) == 0
               ? self->seen.erase(it)
               : std::next(it);
    }
    for (const Chip& c : scan.chips) self->seen[ChipId(c)] = c;
    self->vanished.clear();
    for (const auto& [id, chip] : self->seen) {
      if (present.count(id) == 0) {
        self->vanished.insert(chip.node);
        scan.chips.push_back(chip);
      }
    }
    std::sort(scan.chips.begin(), scan.chips.end(),
              [](const Chip& a, const Chip& b) { return a.index < b.index; });
    self->chips = scan.chips;
    if (self->chips.empty()) {
      plugin::ExplainNoDevices(self->host, sink, scan.why_none);
      self->slice = SliceIdentity();
      return RAYACCEL_STATUS_OK;
    }
    self->slice = ReadSliceIdentity(
        [](const char* name) -> std::optional<std::string> {
          const char* v = std::getenv(name);
          return v == nullptr ? std::nullopt : std::optional<std::string>(v);
        },
        [self, deadline = std::chrono::steady_clock::now() + self->metadata_timeout](
            const std::string& key) -> std::optional<std::string> {
          if (!self->metadata) return std::nullopt;
          return CachedMetadata(self, key, deadline);
        },
        present.size());
    for (const std::string& p : self->slice.problems) {
      plugin::Log(self->host, RAYACCEL_LOG_WARN, p);
    }
    for (const Chip& chip : self->chips) {
      const Generation* g = GenerationOf(self, chip);
      std::string name = g != nullptr ? g->marketing : "TPU";
      std::string id = ChipId(chip);
      std::string type =
          self->slice.pod_type.empty() ? "" : RayAcceleratorType(self->slice.pod_type);
      std::string reason;
      rayaccel_device_info info{};
      info.struct_size = sizeof(info);
      info.index = chip.index;
      info.id = Str(id);
      info.name = Str(name);
      info.accelerator_type = Str(type);
      if (g != nullptr) info.architecture = Str(g->name);
      info.memory_bytes = g != nullptr ? g->hbm_bytes : 0;
      if (chip.pci) {
        info.pci_bus_id = Str(chip.pci->bus_id);
        info.pci_vendor_id = chip.pci->vendor;
        info.pci_device_id = chip.pci->device;
        info.numa_node = chip.pci->numa_node;
      } else {
        info.numa_node = -1;
      }
      if (self->vanished.count(chip.node) > 0) {
        reason = "device node " + chip.node + " disappeared";
        info.health = RAYACCEL_HEALTH_UNHEALTHY;
        info.health_reason = Str(reason);
      } else {
        info.health = RAYACCEL_HEALTH_HEALTHY;
      }
      rayaccel_status rc = sink->add_device(sink->host_context, &info);
      if (rc == RAYACCEL_STATUS_RESOURCE_EXHAUSTED || rc == RAYACCEL_STATUS_ABORTED) return rc;
      if (rc != RAYACCEL_STATUS_OK) continue;
      plugin::AddAttribute(sink, chip.index, "device_node", chip.node);
      if (g != nullptr) {
        plugin::AddAttribute(sink, chip.index, "cores_per_chip",
                             static_cast<int64_t>(g->cores_per_chip));
      }
      // The slice this chip belongs to (the tpu-slice domain carries no attributes of its own).
      if (!self->slice.pod_type.empty()) {
        plugin::AddAttribute(sink, chip.index, "slice_hosts",
                             static_cast<int64_t>(PodHosts(self->slice.pod_type)));
      }
      plugin::AddAttribute(sink, chip.index, "slice_topology", self->slice.topology);
    }
    return RAYACCEL_STATUS_OK;
  });
}

// Ray's TPU node labels, each only when its value is known.
rayaccel_status GetLabels(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                          rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    const SliceIdentity& s = self->slice;
    auto add = [&](const char* key, const std::string& value) {
      if (!value.empty()) sink->add_label(sink->host_context, Str(key), Str(value));
    };
    add("ray.io/tpu-slice-name", s.slice_name);
    add("ray.io/tpu-worker-id", s.worker_id ? std::to_string(*s.worker_id) : "");
    add("ray.io/tpu-topology", s.topology);
    add("ray.io/tpu-pod-type", s.pod_type);
    return RAYACCEL_STATUS_OK;
  });
}

// ICI between this host's chips: a grid (2x2 for four chips, 2x4 for eight), neighbours
// linked; and the slice as a domain.
rayaccel_status GetTopology(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                            rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    std::vector<uint32_t> present;
    for (const Chip& c : self->chips) {
      if (self->vanished.count(c.node) == 0) present.push_back(c.index);
    }
    std::sort(present.begin(), present.end());
    HostGrid grid = GridFor(present.size());
    for (size_t i = 0; grid.width > 0 && i < present.size(); ++i) {
      size_t x = i % grid.width, y = i / grid.width;
      for (size_t j : {x + 1 < grid.width ? i + 1 : i, y + 1 < grid.height ? i + grid.width : i}) {
        if (j == i) continue;
        plugin::AddLink(sink, present[i], present[j], RAYACCEL_LINK_ICI);
      }
    }
    if (!self->slice.slice_name.empty() && !present.empty()) {
      plugin::AddDomain(sink, "tpu-slice", self->slice.slice_name, present);
    }
    return RAYACCEL_STATUS_OK;
  });
}

// Ray's TPU_VALID_CHIP_OPTIONS.
rayaccel_status ValidateQuantity(rayaccel_plugin_instance* /*self*/, uint32_t quantity,
                                 rayaccel_error* error) {
  if (quantity == 1 || quantity == 2 || quantity == 4 || quantity == 8) return RAYACCEL_STATUS_OK;
  return plugin::Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                      "The number of requested 'TPU' was set to " + std::to_string(quantity) +
                          " which is not a supported chip configuration. Supported configs: "
                          "(1, 2, 4, 8)");
}

// What Ray's set_current_process_visible_accelerator_ids sets: nothing for the whole host;
// TPU_VISIBLE_CHIPS for part of it, with the bounds libtpu needs for one or two chips.
rayaccel_status PrepareAllocation(rayaccel_plugin_instance* self, rayaccel_allocation_args* args,
                                  rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    std::set<uint32_t> known, wanted;
    for (const Chip& c : self->chips) {
      if (self->vanished.count(c.node) == 0) known.insert(c.index);
    }
    std::string list;
    for (size_t i = 0; i < args->device_count; ++i) {
      uint32_t index = args->device_indices[i];
      if (known.count(index) == 0) {
        return plugin::Fail(error, RAYACCEL_STATUS_NOT_FOUND, "no chip " + std::to_string(index));
      }
      if (!wanted.insert(index).second) continue;
      list += (list.empty() ? "" : ",") + std::to_string(index);
    }
    if (wanted == known) return RAYACCEL_STATUS_OK;
    rayaccel_status rc = plugin::SetEnv(args->sink, "TPU_VISIBLE_CHIPS", list);
    if (rc != RAYACCEL_STATUS_OK || wanted.size() > 2) return rc;
    rc = plugin::SetEnv(args->sink, "TPU_CHIPS_PER_HOST_BOUNDS",
                        wanted.size() == 1 ? "1,1,1" : "1,2,1");
    if (rc != RAYACCEL_STATUS_OK) return rc;
    return plugin::SetEnv(args->sink, "TPU_HOST_BOUNDS", "1,1,1");
  });
}

constexpr rayaccel_plugin_api kApi = {
    sizeof(rayaccel_plugin_api),
    RAYACCEL_ABI_VERSION_MAJOR,
    RAYACCEL_ABI_VERSION_MINOR,
    {"tpu", 3},
    RAYACCEL_CAP_TOPOLOGY | RAYACCEL_CAP_ALLOCATION,
    &Initialize,
    &Shutdown,
    &GetProperties,
    &Discover,
    &GetLabels,
    &GetTopology,
    /*get_health=*/nullptr,  // health comes with each chip
    /*wait_health_events=*/nullptr,
    &ValidateQuantity,
    &PrepareAllocation,
    /*transport=*/nullptr,
    /*get_telemetry=*/nullptr,
};

}  // namespace
}  // namespace rayaccel::tpu

extern "C" RAYACCEL_PLUGIN_EXPORT rayaccel_status
rayaccel_plugin_entry(rayaccel_negotiation* negotiation, rayaccel_error* error) {
  return rayaccel::plugin::Negotiate(negotiation, &rayaccel::tpu::kApi, error);
}
