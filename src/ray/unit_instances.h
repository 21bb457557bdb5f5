// Which resources Ray counts in instances (device 0, device 1, ...), and what to start Ray with
// so that it counts a family it does not know that way too.
//
// Ray's raylet tells a task which devices it holds only for its unit-instance resources: `GPU`
// and the list of its `custom_unit_instance_resources` setting
// (src/ray/common/ray_config_def.h). Any other resource is one pool: every task of it is told
// instance 0, whatever it asked for. A process reads the setting from the environment variable
// RAY_custom_unit_instance_resources, which replaces Ray's default list whole.
#ifndef RAYACCEL_RAY_UNIT_INSTANCES_H_
#define RAYACCEL_RAY_UNIT_INSTANCES_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rayaccel {

inline constexpr char kRayUnitInstanceVariable[] = "RAY_custom_unit_instance_resources";

// Ray's own unit-instance resource besides the list (predefined_unit_instance_resources).
inline constexpr char kRayPredefinedUnitInstances[] = "GPU";

// The list's default in the Ray version rayaccel is tested with (requirements.txt, Ray 2.60).
inline constexpr char kTestedRayVersion[] = "2.60.0";
inline constexpr char kTestedRayCustomUnitInstances[] =
    "neuron_cores,TPU,NPU,HPU,RBLN,FURIOSA,TTNPU,MBLT";

// The value of RAY_custom_unit_instance_resources that makes Ray count every one of
// `resources` in instances: `rays_list` (what Ray would use: its default, or the variable the
// user set) with the missing ones appended in order, nothing of `rays_list` dropped or
// reordered. nullopt when Ray counts each of them that way already.
std::optional<std::string> UnitInstanceSetting(const std::vector<std::string>& resources,
                                               absl::string_view rays_list);

// The default list compiled into Ray's `_raylet.so` at `path` (a string literal there): the
// one NUL-terminated string that is a comma-separated list of resource names holding both
// `neuron_cores` and `TPU`, Ray's entries since the setting began. An error when the file
// cannot be read or holds no such string, or several different ones.
absl::StatusOr<std::string> ReadRayletUnitInstanceDefault(const std::string& path);

}  // namespace rayaccel

#endif  // RAYACCEL_RAY_UNIT_INSTANCES_H_
