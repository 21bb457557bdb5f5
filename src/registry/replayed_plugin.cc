#include "registry/replayed_plugin.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "isolation/report_codec.h"
#include "model/validate.h"

namespace rayaccel {

absl::StatusOr<PluginProperties> ReplayedPlugin::GetProperties() const {
  // The same checks as a loaded plugin's answer: a bundle is someone else's file.
  const PluginStatus& s = captured_.status;
  for (const auto& [value, field] : {std::pair{&s.vendor, "vendor"},
                                     {&s.resource_name, "resource_name"},
                                     {&s.visible_devices_env, "visible_devices_env"},
                                     {&s.plugin_version, "plugin_version"}}) {
    if (absl::Status st = CheckText(*value, absl::StrCat("get_properties: ", field)); !st.ok()) {
      return st;
    }
  }
  return PluginProperties{s.vendor, s.resource_name, s.visible_devices_env, s.plugin_version};
}

absl::Status ReplayedPlugin::Query(PluginReport* report) {
  *report = PluginReport{};
  return isolation::DecodeReport(captured_.report, report);
}

absl::Status ReplayedPlugin::ValidateQuantity(uint32_t quantity) const {
  auto it = captured_.quantities.find(quantity);
  if (it == captured_.quantities.end()) {
    return absl::FailedPreconditionError(absl::StrCat("validate_quantity(", quantity,
                                                      ") was not captured (1 to the device count, "
                                                      "at most 64, were)"));
  }
  return it->second.empty() ? absl::OkStatus() : absl::InvalidArgumentError(it->second);
}

absl::StatusOr<EnvList> ReplayedPlugin::PrepareAllocation(
    const std::vector<uint32_t>& indices) const {
  std::vector<uint32_t> sorted = indices;
  std::sort(sorted.begin(), sorted.end());
  for (const CapturedPlugin::AllocationAnswer& a : captured_.allocations) {
    if (a.indices != sorted) continue;
    if (!a.error.empty()) return absl::InvalidArgumentError(a.error);
    return EnvList(a.env.begin(), a.env.end());
  }
  return absl::FailedPreconditionError(
      absl::StrCat("prepare_allocation for devices ", absl::StrJoin(sorted, ","),
                   " was not captured (each device alone, pairs on small nodes, all, and all but "
                   "partition parents were)"));
}

}  // namespace rayaccel
