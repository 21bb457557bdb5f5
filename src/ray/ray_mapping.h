// Maps a node's devices to what Ray is given: resources and labels in Ray's conventions.
// The one place that knows Ray's resource and label naming (with accelerator_type.h).
#ifndef RAYACCEL_RAY_RAY_MAPPING_H_
#define RAYACCEL_RAY_RAY_MAPPING_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "rayaccel/snapshot.h"

namespace rayaccel {

// Label keys Ray itself defines under its reserved prefix; plugins may set only these
// (ray.io/node-id is the raylet's alone).
bool IsRayDefinedLabelKey(const std::string& key);

// Resources Ray itself defines or derives (CPU, memory, node:<ip>, accelerator_type:<T>, ...):
// a plugin's resource name may not be one of them.
bool IsReservedRayResource(const std::string& name);

// Ray resource names as `ray start --resources` and the raylet's static resource list take
// them: [A-Za-z0-9_.:-], 1 to 64 characters (no commas, the list separator; no spaces).
bool IsResourceName(const std::string& name);

// The one judgement of a plugin's resource name, shared by the registry (which refuses the
// plugin) and the conformance suite (which fails it): a Ray resource name, not one of Ray's own.
absl::Status CheckResourceName(const std::string& name);

// Resources Ray already gives one vendor's devices (TPU: Google, HPU: Intel Gaudi, NPU: Huawei
// Ascend, neuron_cores: AWS, RBLN: Rebellions). A plugin of another vendor claiming one is
// allowed but warned about, since Ray's own code for that resource would misread its devices:
// the warning, or "" when `resource` is not one of these or `vendor` owns it. GPU is shared by
// every GPU vendor and never warned about.
std::string ForeignResourceWarning(const std::string& resource, const std::string& vendor);

// The rayaccel label namespace for everything Ray does not define.
inline constexpr char kRayaccelLabelPrefix[] = "rayaccel.io/";

// The topology levels rayaccel labels a node with: a plugin's domain of `domain_kind` that holds
// every device the plugin gives Ray becomes the label `label_key` = the domain's id.
struct TopologyLevel {
  const char* domain_kind;  // "nvlink", "xgmi", "tpu-slice", "rack"
  const char* label_key;    // "rayaccel.io/nvlink-domain", ...
};
const std::vector<TopologyLevel>& TopologyLevels();

struct RayMapping {
  RayView view;
  // Per plugin name: what was not passed to Ray and why (a dropped label, a resource
  // already provided by another plugin, ...).
  std::map<std::string, std::vector<std::string>> notes;
  // Which plugin gives each accelerator resource to Ray.
  std::map<std::string, std::string> owners;
};

// Pure function of the snapshot's plugins, devices, domains and plugin labels.
//  - `<resource>: n` per family, n = healthy or unknown-health devices that are not the
//    parent of a reported partition; the first plugin (in snapshot order) to claim a
//    resource name owns it, later ones are noted and not counted.
//  - `accelerator_type:<T>: 1` for each type among the counted devices.
//  - `ray.io/accelerator-type`: the type of the first counted device of the first family.
//  - `ray.io/gpu-domain`: the NVLink domain id when every counted GPU is in one, and per
//    TopologyLevels() the domain holding every counted device of a family as its own label
//    (rayaccel.io/nvlink-domain, -xgmi-hive, -tpu-slice, -rack).
//  - TPU: `<slice name>: 1` and `TPU-<pod type>-head: 1` on worker 0, from the plugin's
//    ray.io/tpu-* labels.
//  - `rayaccel.io/<resource>-{count,type,vendor}` per family, and the plugins' own labels.
RayMapping MapToRay(const NodeSnapshot& snapshot);

// Device by device, what MapToRay gives Ray of each family: per resource, the plugin that
// gives it (or, when none counts a device, the first that lists one) and the ids of the
// devices counted, in snapshot order; empty when the plugin lists devices and counts none.
struct CountedFamily {
  std::string resource;
  std::string plugin;
  std::string visible_devices_env;  // the plugin's; may be empty
  std::vector<std::string> device_ids;
};
std::vector<CountedFamily> CountedFamilies(const NodeSnapshot& snapshot);

}  // namespace rayaccel

#endif  // RAYACCEL_RAY_RAY_MAPPING_H_
