// What a raylet accepts from a node's agent, as Ray checks what it is given: the node id, node
// totals, node labels, and the order of generations within an agent session. Free of any wire
// format, so that the gRPC sink (rpc/sink_state.h) and a raylet with its own gRPC (through
// rayaccel/host.h) apply the same rules.
#ifndef RAYACCEL_RAY_NODE_PUBLICATION_H_
#define RAYACCEL_RAY_NODE_PUBLICATION_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rayaccel {

// Ray keeps quantities in fixed point (1/10000 units in an int64); far below that bound, and
// far above any node, a total past this is refused as absurd.
inline constexpr double kMaxNodeResourceQuantity = 1e12;
inline constexpr size_t kMaxNodeResources = 1024;
inline constexpr size_t kMaxNodeLabels = 1024;

// Ray's node id: 28 bytes, written as 56 lower-case hex digits.
absl::Status CheckNodeId(const std::string& node_id);
// An agent's session id: printable, not empty.
absl::Status CheckAgentSession(const std::string& session);
// One node total: a printable name without whitespace, not one Ray derives itself except
// `accelerator_type:<T>`; a finite, whole, non-negative quantity within bounds.
absl::Status CheckNodeResource(const std::string& name, double quantity);
// One node label: Kubernetes syntax; under `ray.io/` only the keys Ray defines for agents.
absl::Status CheckNodeLabel(const std::string& key, const std::string& value);

// Every (name, quantity) of `resources` and the count; any map of strings to doubles.
template <typename Map>
absl::Status CheckNodeResources(const Map& resources) {
  if (resources.size() > kMaxNodeResources) {
    return absl::InvalidArgumentError(
        absl::StrCat(resources.size(), " resources, more than ", kMaxNodeResources));
  }
  for (const auto& [name, quantity] : resources) {
    if (absl::Status st = CheckNodeResource(name, quantity); !st.ok()) return st;
  }
  return absl::OkStatus();
}

template <typename Map>
absl::Status CheckNodeLabels(const Map& labels) {
  if (labels.size() > kMaxNodeLabels) {
    return absl::InvalidArgumentError(
        absl::StrCat(labels.size(), " labels, more than ", kMaxNodeLabels));
  }
  for (const auto& [key, value] : labels) {
    if (absl::Status st = CheckNodeLabel(key, value); !st.ok()) return st;
  }
  return absl::OkStatus();
}

// The order of publications, per node: within one agent session generations only move
// forward, so an older or equal generation is acknowledged but not applied (a late retry never
// rolls a node back); a new session (the agent restarted) replaces the node whole.
// Thread-safe.
class PublicationOrder {
 public:
  struct Decision {
    bool apply = false;       // false: stale, the current state stands
    uint64_t generation = 0;  // the generation current for the node afterwards
  };
  // Records the publication when it applies.
  Decision Admit(const std::string& node_id, const std::string& session, uint64_t generation);

 private:
  std::mutex mu_;
  std::map<std::string, std::pair<std::string, uint64_t>> nodes_;  // id -> session, generation
};

}  // namespace rayaccel

#endif  // RAYACCEL_RAY_NODE_PUBLICATION_H_
