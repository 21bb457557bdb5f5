#include "cli/ray_start_env.h"

#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "present/render.h"
#include "ray/ray_mapping.h"
#include "ray/unit_instances.h"

namespace rayaccel::cli {

std::vector<std::string> ResourcesRayDoesNotCountByDevice(const NodeSnapshot& snapshot,
                                                          absl::string_view rays_list) {
  std::vector<std::string> pooled;
  for (const CountedFamily& family : CountedFamilies(snapshot)) {
    if (!family.device_ids.empty() && UnitInstanceSetting({family.resource}, rays_list)) {
      pooled.push_back(family.resource);
    }
  }
  return pooled;
}

absl::StatusOr<std::string> RayStartEnvironment(const NodeSnapshot& snapshot,
                                                const PrepareAllocationFn& prepare,
                                                absl::string_view rays_list, bool managers_on) {
  std::map<std::string, std::string> env;
  for (const CountedFamily& family : CountedFamilies(snapshot)) {
    if (family.visible_devices_env.empty()) continue;
    std::map<std::string, std::string> set;
    if (family.device_ids.empty()) {
      set[family.visible_devices_env] = "";  // Ray would count every device it finds
    } else {
      absl::StatusOr<std::map<std::string, std::string>> prepared =
          prepare(family.device_ids, snapshot.generation);
      if (!prepared.ok()) {
        return absl::Status(prepared.status().code(),
                            absl::StrCat(family.resource, " (", family.plugin,
                                         "): prepare_allocation: ", prepared.status().message()));
      }
      set = *std::move(prepared);
    }
    for (auto& [name, value] : set) {
      // Printed for a shell to read: a name is a shell variable name, or nothing is printed.
      static const std::regex kName("[A-Za-z_][A-Za-z0-9_]*");
      if (!std::regex_match(name, kName)) {
        return absl::InvalidArgumentError(absl::StrCat(
            family.plugin, " sets \"", name, "\", which is not an environment variable name"));
      }
      env[name] = std::move(value);
    }
  }
  // Ray's own settings win over anything a plugin sets.
  std::vector<std::string> pooled = ResourcesRayDoesNotCountByDevice(snapshot, rays_list);
  if (!pooled.empty()) {
    env[kRayUnitInstanceVariable] = *UnitInstanceSetting(pooled, rays_list);
    if (!managers_on) env["RAYACCEL_RAY_MANAGERS"] = "1";
  }
  std::vector<std::string> pairs;
  for (const auto& [name, value] : env) pairs.push_back(name + "=" + present::ShellQuote(value));
  return pairs.empty() ? "" : absl::StrJoin(pairs, " ") + "\n";
}

}  // namespace rayaccel::cli
