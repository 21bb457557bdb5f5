// Leases: ValidateQuantity, PreferredAllocation and PrepareAllocation, each against one
// snapshot and at most one plugin.
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/validate.h"
#include "registry/registry_impl.h"
#include "topology/allocation.h"

namespace rayaccel {

absl::Status Registry::Impl::ValidateQuantity(const std::string& resource,
                                              uint32_t quantity) const {
  if (quantity == 0) return absl::InvalidArgumentError("quantity must be at least 1");
  Slot* slot = SlotForResource(resource, *snapshot());
  if (slot == nullptr) {
    return absl::NotFoundError(absl::StrCat("no active plugin provides resource ", resource));
  }
  if (!slot->validates_quantity) return absl::OkStatus();  // no hook: nothing to ask
  std::lock_guard<std::mutex> lock(slot->mu);
  if (slot->plugin == nullptr || !slot->plugin->alive()) {
    return absl::UnavailableError(
        absl::StrCat("plugin ", slot->name, " is down: ", slot->status.message));
  }
  absl::Status st = slot->plugin->ValidateQuantity(quantity);
  if (!slot->plugin->alive()) MarkCrashed(slot, st);
  return st;
}

absl::StatusOr<Allocation> Registry::Impl::PreferredAllocation(
    const std::vector<std::string>& available_in, const std::vector<std::string>& must_in,
    size_t size, std::string resource) const {
  std::shared_ptr<const NodeSnapshot> snap = snapshot();
  absl::StatusOr<std::vector<size_t>> available = Resolve(*snap, available_in);
  if (!available.ok()) return available.status();
  absl::StatusOr<std::vector<size_t>> must = Resolve(*snap, must_in);
  if (!must.ok()) return must.status();
  // The family: named, else that of the given devices, else the first with devices.
  for (const std::vector<size_t>* list : {&*must, &*available}) {
    for (size_t p : *list) {
      const std::string& r = snap->devices[p].resource;
      if (resource.empty()) resource = r;
      if (r != resource) {
        return absl::InvalidArgumentError(
            absl::StrCat("device ", snap->devices[p].id, " is a ", r, ", not a ", resource,
                         ": one allocation takes devices of one family"));
      }
    }
  }
  if (resource.empty() && !snap->devices.empty()) resource = snap->devices[0].resource;
  // Only the plugin that gives this resource to Ray can be allocated from (two plugins may
  // both call their devices "GPU"; docs/ray-integration.md).
  auto owner = snap->resource_owners.find(resource);
  for (const std::vector<size_t>* list : {&*must, &*available}) {
    for (size_t p : *list) {
      if (owner == snap->resource_owners.end() || snap->devices[p].plugin != owner->second) {
        return absl::InvalidArgumentError(
            absl::StrCat("device ", snap->devices[p].id, " of plugin ", snap->devices[p].plugin,
                         " is not given to Ray as ", resource, ", so it cannot be allocated"));
      }
    }
  }
  if (available_in.empty() && owner != snap->resource_owners.end()) {
    std::set<std::string> parents;
    for (const Device& d : snap->devices) {
      if (!d.parent_id.empty()) parents.insert(d.parent_id);
    }
    for (size_t p = 0; p < snap->devices.size(); ++p) {
      const Device& d = snap->devices[p];
      if (d.plugin == owner->second && d.health != Health::kUnhealthy && parents.count(d.id) == 0) {
        available->push_back(p);
      }
    }
  }
  Allocation none;
  none.generation = snap->generation;
  if (size > 1) {
    // A device its plugin marks "lease_alone" (a MIG instance: CUDA enumerates one per
    // process) is offered only in a set of one.
    auto alone = [&](size_t p) {
      for (const Attribute& a : snap->devices[p].attributes) {
        if (a.name == "lease_alone" && a.kind == Attribute::Kind::kBool && a.int_value != 0) {
          return true;
        }
      }
      return false;
    };
    for (size_t m : *must) {
      if (alone(m)) {
        none.reason = absl::StrCat("device ", snap->devices[m].id,
                                   " is leased alone (lease_alone), not in a set of ", size);
        return none;
      }
    }
    available->erase(std::remove_if(available->begin(), available->end(), alone), available->end());
  }
  for (size_t m : *must) {
    if (std::find(available->begin(), available->end(), m) == available->end()) {
      none.reason = absl::StrCat("must-include device ", snap->devices[m].id, " is not available");
      return none;
    }
  }
  if (size == 0) {
    none.reason = "size must be at least 1";
  } else if (must->size() > size) {
    none.reason =
        absl::StrCat(must->size(), " devices must be included, more than the size ", size);
  } else if (available->size() < size) {
    none.reason = absl::StrCat("only ", available->size(), resource.empty() ? "" : " ", resource,
                               " devices available, ", size, " requested");
  } else if (absl::Status st = ValidateQuantity(resource, static_cast<uint32_t>(size)); !st.ok()) {
    none.reason = std::string(st.message());
  }
  if (!none.reason.empty()) return none;
  Allocation chosen =
      ChoosePreferred(*snap, *available, *must, size, options_.allocation_objective);
  for (size_t p : chosen.devices) chosen.device_ids.push_back(snap->devices[p].id);
  chosen.generation = snap->generation;
  return chosen;
}

absl::StatusOr<std::map<std::string, std::string>> Registry::Impl::PrepareAllocation(
    const std::vector<std::string>& ids, uint64_t generation) const {
  std::shared_ptr<const NodeSnapshot> snap = snapshot();
  if (ids.empty()) return absl::InvalidArgumentError("no devices given");
  if (generation > snap->generation) {
    return absl::InvalidArgumentError(
        absl::StrCat("no snapshot ", generation, " yet: the current one is ", snap->generation));
  }
  const bool stale = generation != 0 && generation != snap->generation;
  absl::StatusOr<std::vector<size_t>> positions = Resolve(*snap, ids);
  if (!positions.ok() && stale && positions.status().code() == absl::StatusCode::kNotFound) {
    // Named in an older snapshot and gone since: the lease is stale, not malformed.
    return absl::FailedPreconditionError(
        absl::StrCat(positions.status().message(), " any more; snapshot ", generation,
                     " is stale, the current one is ", snap->generation));
  }
  if (!positions.ok()) return positions.status();
  if (stale) {
    for (size_t p : *positions) {
      const Device& d = snap->devices[p];
      if (d.health == Health::kUnhealthy) {
        return absl::FailedPreconditionError(
            absl::StrCat("device ", d.id, " is unhealthy now (", d.health_reason, "); snapshot ",
                         generation, " is stale, the current one is ", snap->generation));
      }
    }
  }
  return Prepare(*snap, *positions);
}

absl::StatusOr<std::map<std::string, std::string>> Registry::Impl::PrepareAllocationAt(
    const std::vector<size_t>& positions, uint64_t generation) const {
  std::shared_ptr<const NodeSnapshot> snap = snapshot();
  if (generation != snap->generation) {
    return absl::FailedPreconditionError(
        absl::StrCat("positions refer to snapshot ", generation, "; the current one is ",
                     snap->generation, " (name devices by id to lease across snapshots)"));
  }
  if (positions.empty()) return absl::InvalidArgumentError("no devices given");
  for (size_t i = 0; i < positions.size(); ++i) {
    if (positions[i] >= snap->devices.size()) {
      return absl::NotFoundError(absl::StrCat("no device at position ", positions[i]));
    }
    if (std::find(positions.begin(), positions.begin() + i, positions[i]) !=
        positions.begin() + i) {
      return absl::InvalidArgumentError(absl::StrCat("position ", positions[i], " given twice"));
    }
  }
  return Prepare(*snap, positions);
}

absl::StatusOr<std::map<std::string, std::string>> Registry::Impl::Prepare(
    const NodeSnapshot& snap, const std::vector<size_t>& positions) const {
  std::vector<const Device*> devices;
  for (size_t p : positions) devices.push_back(&snap.devices[p]);
  const std::string& plugin_name = devices.front()->plugin;
  for (const Device* d : devices) {
    if (d->plugin != plugin_name) {
      return absl::InvalidArgumentError(
          "devices of one allocation must come from one plugin (one accelerator family)");
    }
  }
  Slot* slot = SlotNamed(plugin_name);
  if (slot == nullptr) return absl::FailedPreconditionError("plugin is no longer loaded");
  std::lock_guard<std::mutex> lock(slot->mu);
  if (slot->plugin == nullptr || !slot->plugin->alive()) {
    return absl::UnavailableError(absl::StrCat(
        "plugin ", plugin_name,
        " is down: ", closing_ ? std::string("the registry is shut down") : slot->status.message));
  }
  if (slot->answer == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("plugin ", plugin_name, " failed its last discover"));
  }
  std::vector<uint32_t> indices;
  indices.reserve(devices.size());
  for (const Device* d : devices) {
    auto it = std::find_if(slot->answer->devices.begin(), slot->answer->devices.end(),
                           [&](const Device& r) { return r.id == d->id; });
    if (it == slot->answer->devices.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("device ", d->id, " is no longer reported by plugin ", plugin_name));
    }
    indices.push_back(it->index);
  }
  std::map<std::string, std::string> env;
  if (!slot->plugin->has_prepare_allocation()) {
    if (slot->status.visible_devices_env.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("plugin ", plugin_name,
                       " has no prepare_allocation hook and no visible-devices variable"));
    }
    env[slot->status.visible_devices_env] = absl::StrJoin(indices, ",");
    return env;
  }
  auto set = slot->plugin->PrepareAllocation(indices);
  if (!slot->plugin->alive()) MarkCrashed(slot, set.status());
  if (!set.ok()) return set.status();
  for (auto& [name, value] : *set) {
    // A worker's environment is the plugin's to shape only for its devices: a variable
    // outside the family (LD_PRELOAD, PATH, ...) would run the worker differently.
    if (!InVisibleDevicesFamily(name, slot->status.visible_devices_env)) {
      return absl::PermissionDeniedError(
          absl::StrCat("plugin ", plugin_name, " set ", EscapeControl(name),
                       " for an allocation; only variables of its visible-devices family (",
                       slot->status.visible_devices_env.empty()
                           ? std::string("it declares none")
                           : slot->status.visible_devices_env.substr(
                                 0, slot->status.visible_devices_env.find('_') + 1) +
                                 "*",
                       ") may be set"));
    }
    env[name] = value;
  }
  return env;
}

absl::StatusOr<std::vector<size_t>> Registry::Impl::Resolve(const NodeSnapshot& snap,
                                                            const std::vector<std::string>& ids) {
  std::vector<size_t> out;
  out.reserve(ids.size());
  for (const std::string& id : ids) {
    size_t position = snap.devices.size();
    for (size_t p = 0; p < snap.devices.size() && position == snap.devices.size(); ++p) {
      if (snap.devices[p].id == id) position = p;
    }
    if (position == snap.devices.size()) {
      return absl::NotFoundError(absl::StrCat("no device \"", id, "\""));
    }
    if (std::find(out.begin(), out.end(), position) != out.end()) {
      return absl::InvalidArgumentError(absl::StrCat("device \"", id, "\" given twice"));
    }
    out.push_back(position);
  }
  return out;
}

Registry::Impl::Slot* Registry::Impl::SlotForResource(const std::string& resource,
                                                      const NodeSnapshot& snap) const {
  if (auto owner = snap.resource_owners.find(resource); owner != snap.resource_owners.end()) {
    return SlotNamed(owner->second);
  }
  for (const PluginStatus& p : snap.plugins) {
    if (p.state != PluginStatus::State::kFailed && p.state != PluginStatus::State::kRefused &&
        p.resource_name == resource) {
      return SlotNamed(p.name);
    }
  }
  return nullptr;
}

Registry::Impl::Slot* Registry::Impl::SlotNamed(const std::string& name) const {
  for (const std::unique_ptr<Slot>& s : slots_) {
    if (s->loaded && s->name == name) return s.get();
  }
  return nullptr;
}

}  // namespace rayaccel
