#include "ray/ray_mapping.h"

#include <regex>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/validate.h"

namespace rayaccel {
namespace {

// Ray's TPU pod type: ^(v|tpu)\d+[a-zA-Z]*-\d+$, with "tpu7x-8" normalised to "v7x-8".
std::string NormalizeTpuPodType(const std::string& pod_type) {
  static const std::regex kPodType(R"(^(v|tpu)(\d+[a-zA-Z]*-\d+)$)");
  std::smatch m;
  if (!std::regex_match(pod_type, m, kPodType)) return "";
  return "v" + m[2].str();
}

// Ray's TPU accelerator type comes from the pod type alone ("v4-16" -> "TPU-V4"); a TPU host
// whose slice is unknown has none (python/ray/_private/accelerators/tpu.py).
std::string TpuTypeFromPodType(const std::string& pod_type) {
  std::string pod = NormalizeTpuPodType(pod_type);
  if (pod.empty()) return "";
  return "TPU-" + absl::AsciiStrToUpper(pod.substr(0, pod.find('-')));
}

}  // namespace

const std::vector<TopologyLevel>& TopologyLevels() {
  static const std::vector<TopologyLevel> kLevels = {
      {"nvlink", "rayaccel.io/nvlink-domain"},
      {"xgmi", "rayaccel.io/xgmi-hive"},
      {"tpu-slice", "rayaccel.io/tpu-slice"},
      {"rack", "rayaccel.io/rack"},
  };
  return kLevels;
}

bool IsRayDefinedLabelKey(const std::string& key) {
  static const std::set<std::string> kKeys = {
      "ray.io/accelerator-type",  "ray.io/market-type",   "ray.io/availability-region",
      "ray.io/availability-zone", "ray.io/node-group",    "ray.io/tpu-topology",
      "ray.io/tpu-slice-name",    "ray.io/tpu-worker-id", "ray.io/tpu-pod-type",
      "ray.io/gpu-domain",
  };
  return kKeys.count(key) > 0;
}

bool IsReservedRayResource(const std::string& name) {
  static const std::set<std::string> kNames = {"CPU", "memory", "object_store_memory"};
  for (const char* prefix : {"node:", "accelerator_type:", "bundle_group_"}) {
    if (absl::StartsWith(name, prefix)) return true;
  }
  return kNames.count(name) > 0;
}

bool IsResourceName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.' || c == ':';
  });
}

absl::Status CheckResourceName(const std::string& name) {
  if (!IsResourceName(name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "resource_name \"", name, "\" is not a Ray resource name ([A-Za-z0-9_.:-], 1-64)"));
  }
  if (IsReservedRayResource(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("resource_name \"", name, "\" is one of Ray's own resources"));
  }
  return absl::OkStatus();
}

std::string ForeignResourceWarning(const std::string& resource, const std::string& vendor) {
  struct Owner {
    const char* resource;
    const char* devices;
    std::vector<const char*> vendors;  // lower case
  };
  static const std::vector<Owner> kOwners = {
      {"TPU", "Google TPUs", {"google"}},
      {"HPU", "Intel Gaudi accelerators", {"intel", "habana"}},
      {"NPU", "Huawei Ascend NPUs", {"huawei"}},
      {"neuron_cores", "AWS Neuron cores", {"aws", "amazon"}},
      {"RBLN", "Rebellions accelerators", {"rebellions"}},
  };
  const std::string v = absl::AsciiStrToLower(vendor);
  for (const Owner& o : kOwners) {
    if (resource != o.resource) continue;
    for (const char* owner : o.vendors) {
      if (v == owner) return "";
    }
    return absl::StrCat("resource_name \"", resource, "\" is Ray's resource for ", o.devices,
                        ", and this plugin's vendor is \"", vendor,
                        "\": Ray's own code for that resource would handle these devices");
  }
  return "";
}

namespace {

// Whether Ray is given a device: not unhealthy, and not the parent of a reported partition
// (its partitions are what gets scheduled).
class CountedForRay {
 public:
  explicit CountedForRay(const NodeSnapshot& snapshot) {
    for (const Device& d : snapshot.devices) {
      if (!d.parent_id.empty()) parents_.insert({d.plugin, d.parent_id});
    }
  }
  bool operator()(const Device& d) const {
    return d.health != Health::kUnhealthy && parents_.count({d.plugin, d.id}) == 0;
  }

 private:
  std::set<std::pair<std::string, std::string>> parents_;  // (plugin, id)
};

}  // namespace

std::vector<CountedFamily> CountedFamilies(const NodeSnapshot& snapshot) {
  const CountedForRay counted(snapshot);
  const std::map<std::string, std::string> owners = MapToRay(snapshot).owners;
  std::vector<CountedFamily> out;
  std::set<std::string> seen;
  for (const PluginStatus& p : snapshot.plugins) {
    if (p.resource_name.empty() || seen.count(p.resource_name) > 0) continue;
    auto owner = owners.find(p.resource_name);
    if (owner != owners.end() && owner->second != p.name) continue;
    CountedFamily family{p.resource_name, p.name, p.visible_devices_env, {}};
    bool listed = false;
    for (const Device& d : snapshot.devices) {
      if (d.plugin != p.name) continue;
      listed = true;
      if (counted(d)) family.device_ids.push_back(d.id);
    }
    if (!listed) continue;
    seen.insert(p.resource_name);
    out.push_back(std::move(family));
  }
  return out;
}

RayMapping MapToRay(const NodeSnapshot& snapshot) {
  RayMapping out;
  RayView& ray = out.view;
  const CountedForRay counted(snapshot);

  std::map<std::string, std::string> owner;  // resource -> plugin
  std::string first_type;
  for (const PluginStatus& p : snapshot.plugins) {
    size_t count = 0;
    std::string type;
    for (const Device& d : snapshot.devices) {
      if (d.plugin != p.name || !counted(d)) continue;
      ++count;
      if (type.empty()) type = d.accelerator_type;
    }
    if (count == 0 || p.resource_name.empty()) continue;
    auto [it, inserted] = owner.emplace(p.resource_name, p.name);
    if (!inserted) {
      out.notes[p.name].push_back(absl::StrCat("resource ", p.resource_name,
                                               " is already provided by plugin ", it->second,
                                               "; these devices are listed but not given to Ray"));
      continue;
    }
    ray.resources[p.resource_name] = static_cast<double>(count);
    out.owners[p.resource_name] = p.name;
    if (p.resource_name == "TPU") {
      auto pod = snapshot.plugin_labels.find("ray.io/tpu-pod-type");
      type = TpuTypeFromPodType(pod == snapshot.plugin_labels.end() ? "" : pod->second);
      if (!type.empty()) ray.resources["accelerator_type:" + type] = 1;
    } else {
      for (const Device& d : snapshot.devices) {
        if (d.plugin == p.name && counted(d) && !d.accelerator_type.empty()) {
          ray.resources["accelerator_type:" + d.accelerator_type] = 1;
        }
      }
    }
    if (first_type.empty()) first_type = type;

    std::string family = absl::AsciiStrToLower(p.resource_name);
    std::string prefix = absl::StrCat(kRayaccelLabelPrefix, family, "-");
    if (CheckLabelKey(prefix + "count").ok()) {
      ray.labels[prefix + "count"] = std::to_string(count);
      if (CheckLabelValue(type).ok() && !type.empty()) ray.labels[prefix + "type"] = type;
      if (CheckLabelValue(p.vendor).ok() && !p.vendor.empty()) {
        ray.labels[prefix + "vendor"] = p.vendor;
      }
    }
  }
  if (!first_type.empty()) {
    if (CheckLabelValue(first_type).ok()) {
      ray.labels["ray.io/accelerator-type"] = first_type;
    }
  }

  // Topology levels: a plugin's domain of a kind that holds every device it gives Ray is a
  // level the whole node is in. ray.io/gpu-domain is Ray's key for the GPUs' NVLink domain;
  // each level also has a rayaccel.io/ key of its own, for label selectors and for a second
  // topology level.
  auto holding = [&](const std::string& plugin, const std::string& kind) -> const Domain* {
    std::set<size_t> devices;
    for (size_t i = 0; i < snapshot.devices.size(); ++i) {
      const Device& d = snapshot.devices[i];
      if (d.plugin == plugin && counted(d)) devices.insert(i);
    }
    const Domain* found = nullptr;
    for (const Domain& dom : snapshot.domains) {
      if (dom.plugin != plugin || dom.kind != kind) continue;
      std::set<size_t> members(dom.devices.begin(), dom.devices.end());
      if (!std::includes(members.begin(), members.end(), devices.begin(), devices.end())) continue;
      if (found != nullptr) return nullptr;  // two of one kind hold them all: no one answer
      found = &dom;
    }
    return found;
  };
  auto label_domain = [&](const std::string& key, const Domain& dom) {
    if (!CheckLabelValue(dom.id).ok()) {
      out.notes[dom.plugin].push_back(absl::StrCat(
          dom.kind, " domain id \"", dom.id, "\" is not a valid label value; ", key, " not set"));
      return;
    }
    auto [it, inserted] = ray.labels.emplace(key, dom.id);
    if (!inserted && it->second != dom.id) {
      out.notes[dom.plugin].push_back(absl::StrCat(
          key, " is \"", it->second, "\" by another plugin; this one's \"", dom.id, "\" not set"));
    }
  };
  if (auto gpu = owner.find("GPU"); gpu != owner.end()) {
    if (const Domain* dom = holding(gpu->second, "nvlink")) {
      label_domain("ray.io/gpu-domain", *dom);
    }
  }
  for (const TopologyLevel& level : TopologyLevels()) {
    for (const auto& [resource, plugin] : owner) {
      if (const Domain* dom = holding(plugin, level.domain_kind)) {
        label_domain(level.label_key, *dom);
      }
    }
  }

  // The plugins' own labels (checked by the collector); derived labels above win.
  for (const auto& [key, value] : snapshot.plugin_labels) ray.labels.emplace(key, value);

  // TPU extras, from the labels the TPU plugin sets (Ray's tpu.py conventions).
  auto label = [&](const char* key) -> std::string {
    auto it = ray.labels.find(key);
    return it == ray.labels.end() ? "" : it->second;
  };
  if (ray.resources.count("TPU") > 0) {
    // As Ray's get_current_node_additional_resources: both only when the slice name, the
    // worker id and a valid pod type are all known. The slice name becomes a resource unless
    // it would collide with one (e.g. "TPU").
    std::string slice = label("ray.io/tpu-slice-name");
    std::string worker = label("ray.io/tpu-worker-id");
    std::string pod = NormalizeTpuPodType(label("ray.io/tpu-pod-type"));
    if (!slice.empty() && !worker.empty() && !pod.empty()) {
      if (!IsReservedRayResource(slice) && ray.resources.count(slice) == 0) {
        ray.resources[slice] = 1;
      }
      if (worker == "0") ray.resources["TPU-" + pod + "-head"] = 1;
    }
  }
  return out;
}

}  // namespace rayaccel
