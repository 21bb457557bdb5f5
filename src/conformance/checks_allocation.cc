// Allocation requests (validate_quantity, prepare_allocation's environment), and the hooks of a
// plugin that claims to be thread-safe, called from several threads.
#include <algorithm>
#include <atomic>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "conformance/check_support.h"
#include "conformance/checks.h"
#include "model/validate.h"

namespace rayaccel::conformance {

Outcome QuantityConsistent(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    if (p.api().validate_quantity == nullptr) return Outcome::Skip("no validate_quantity hook");
    std::vector<uint32_t> accepted;
    for (uint32_t q = 1; q <= 16; ++q) {
      ErrorBuffer e1, e2;
      rayaccel_status a = p.api().validate_quantity(p.instance(), q, &e1.error);
      rayaccel_status b = p.api().validate_quantity(p.instance(), q, &e2.error);
      if (a != b) return Outcome::Fail(absl::StrCat("quantity ", q, ": answers differ"));
      if (a == RAYACCEL_STATUS_OK) {
        accepted.push_back(q);
      } else if (a != RAYACCEL_STATUS_INVALID_ARGUMENT) {
        return Outcome::Fail(
            absl::StrCat("quantity ", q, ": status ", a, " (expected OK or INVALID_ARGUMENT)"));
      } else if (e1.text[0] == '\0') {
        return Outcome::Fail(absl::StrCat("quantity ", q, " refused without a message"));
      }
    }
    return Outcome::Pass(absl::StrCat("accepts ", absl::StrJoin(accepted, ",")));
  });
}

Outcome EnvNamesTheSet(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    Discovery d = Discover(p, false, false, false);
    if (!d.error.empty()) return Outcome::Fail(d.error);
    absl::StatusOr<PluginProperties> props = p.GetProperties();
    if (!props.ok()) return Outcome::Fail(std::string(props.status().message()));
    const std::string& var = props->visible_devices_env;
    std::set<std::string> parents;
    for (const Device& dev : d.report.devices) {
      if (!dev.parent_id.empty()) parents.insert(dev.parent_id);
    }
    std::vector<const Device*> schedulable;
    for (const Device& dev : d.report.devices) {
      if (parents.count(dev.id) == 0) schedulable.push_back(&dev);
    }
    if (schedulable.empty()) return Outcome::Skip("no devices to allocate");
    if (p.api().prepare_allocation == nullptr) {
      return var.empty()
                 ? Outcome::Fail("neither prepare_allocation nor a visible-devices variable")
                 : Outcome::Pass("the host sets " + var);
    }
    std::vector<std::vector<const Device*>> sets;
    for (const Device* dev : schedulable) sets.push_back({dev});
    sets.push_back(schedulable);
    std::vector<std::string> refused_sets;
    for (const auto& set : sets) {
      std::vector<uint32_t> indices;
      for (const Device* dev : set) indices.push_back(dev->index);
      auto env = p.PrepareAllocation(indices);
      // A set of several holding a device marked lease_alone (CUDA enumerates one MIG device
      // per process) may be refused with the reason; every device alone must work.
      const bool has_lease_alone = std::any_of(set.begin(), set.end(), [](const Device* dev) {
        return std::any_of(dev->attributes.begin(), dev->attributes.end(), [](const Attribute& a) {
          return a.name == "lease_alone" && a.kind == Attribute::Kind::kBool && a.int_value != 0;
        });
      });
      if (!env.ok() && set.size() > 1 && has_lease_alone &&
          env.status().code() == absl::StatusCode::kInvalidArgument &&
          !env.status().message().empty()) {
        refused_sets.push_back(std::string(env.status().message()));
        continue;
      }
      if (!env.ok()) return Outcome::Fail(std::string(env.status().message()));
      std::string value;
      bool found = false;
      for (const auto& [name, v] : *env) {
        if (name == var) value = v, found = true;
        if (!InVisibleDevicesFamily(name, var)) {
          return Outcome::Fail(absl::StrCat("prepare_allocation set ", EscapeControl(name),
                                            ": only variables of the visible-devices family of ",
                                            var.empty() ? std::string("(none declared)") : var,
                                            " may be set (the registry refuses the allocation)"));
        }
      }
      // For every schedulable device, leaving the variable unset means "all" (Ray's TPU path
      // sets nothing for a whole host).
      if (!var.empty() && !found && set.size() == schedulable.size()) continue;
      if (!var.empty() && !found) return Outcome::Fail("prepare_allocation did not set " + var);
      if (var.empty()) continue;
      // oneAPI's selector names its backend before the devices ("level_zero:0,1"); an id
      // holds no such lower-case word and colon at its start.
      absl::string_view list = value;
      if (size_t colon = list.find(':');
          colon != absl::string_view::npos && colon > 0 &&
          std::all_of(list.begin(), list.begin() + colon,
                      [](char c) { return (c >= 'a' && c <= 'z') || c == '_'; })) {
        list.remove_prefix(colon + 1);
      }
      std::vector<std::string> named = absl::StrSplit(list, ',', absl::SkipEmpty());
      std::set<std::string> want_index, want_id;
      for (const Device* dev : set) {
        want_index.insert(std::to_string(dev->index));
        want_id.insert(dev->id);
      }
      std::set<std::string> got(named.begin(), named.end());
      if (got.size() != named.size() || (got != want_index && got != want_id)) {
        return Outcome::Fail(absl::StrCat(var, "=", value, " for devices {",
                                          absl::StrJoin(want_index, ","),
                                          "}: must name exactly that set, by index or by id"));
      }
    }
    if (!refused_sets.empty()) {
      return Outcome::Pass(absl::StrCat(sets.size() - refused_sets.size(), " sets; refused ",
                                        refused_sets.size(), ": ", refused_sets.front()));
    }
    return Outcome::Pass(absl::StrCat(sets.size(), " sets"));
  });
}

Outcome ThreadSafe(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    if ((p.api().capabilities & RAYACCEL_CAP_THREAD_SAFE) == 0) {
      return Outcome::Skip("RAYACCEL_CAP_THREAD_SAFE not claimed");
    }
    Discovery reference = Discover(p, true, true, true);
    if (!reference.error.empty()) return Outcome::Fail(reference.error);
    std::atomic<int> mismatches{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < 20; ++i) {
          Discovery d = Discover(p, true, true, true);
          if (!d.error.empty() || d.report.devices.size() != reference.report.devices.size() ||
              d.report.links.size() != reference.report.links.size()) {
            ++mismatches;
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
    if (mismatches > 0) {
      return Outcome::Fail(
          absl::StrCat(mismatches.load(), " of 80 concurrent discoveries differed"));
    }
    return Outcome::Pass();
  });
}

}  // namespace rayaccel::conformance
