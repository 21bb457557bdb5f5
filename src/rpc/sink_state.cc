#include "rpc/sink_state.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ray/ray_mapping.h"
#include "registry/validate.h"
#include "rpc/snapshot_proto.h"

namespace rayaccel::rpc {

absl::Status CheckNodeId(const std::string& node_id) {
  constexpr size_t kNodeIdHexDigits = 56;
  bool hex = node_id.size() == kNodeIdHexDigits;
  for (char c : node_id) hex = hex && (absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f'));
  if (!hex) {
    return absl::InvalidArgumentError(
        "node id must be Ray's NodeID: 56 lower-case hex digits (28 bytes)");
  }
  return absl::OkStatus();
}

absl::Status CheckNodeResources(const google::protobuf::Map<std::string, double>& resources) {
  if (resources.size() > kMaxNodeResources) {
    return absl::InvalidArgumentError(
        absl::StrCat(resources.size(), " resources, more than ", kMaxNodeResources));
  }
  for (const auto& [name, quantity] : resources) {
    if (absl::Status st = CheckText(name, "resource name"); !st.ok()) return st;
    bool spaced = false;
    for (char c : name) spaced = spaced || absl::ascii_isspace(static_cast<unsigned char>(c));
    if (name.empty() || spaced) {
      return absl::InvalidArgumentError(
          absl::StrCat("resource name \"", name, "\" is empty or has whitespace"));
    }
    if (IsReservedRayResource(name) && !absl::StartsWith(name, "accelerator_type:")) {
      return absl::InvalidArgumentError(
          absl::StrCat("resource \"", name, "\" is Ray's own; an agent may not set it"));
    }
    if (!std::isfinite(quantity) || quantity < 0 || quantity > kMaxNodeResourceQuantity ||
        quantity != std::floor(quantity)) {
      return absl::InvalidArgumentError(
          absl::StrCat("resource \"", name, "\": ", quantity,
                       " is not a node total Ray accepts (a whole number from 0 to ",
                       kMaxNodeResourceQuantity, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckNodeLabels(const google::protobuf::Map<std::string, std::string>& labels) {
  if (labels.size() > kMaxNodeLabels) {
    return absl::InvalidArgumentError(
        absl::StrCat(labels.size(), " labels, more than ", kMaxNodeLabels));
  }
  for (const auto& [key, value] : labels) {
    if (absl::Status st = CheckLabelKey(key); !st.ok()) return st;
    if (absl::Status st = CheckLabelValue(value); !st.ok()) return st;
    if (absl::StartsWith(key, "ray.io/") && !IsRayDefinedLabelKey(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("label \"", key, "\" is under ray.io/ but not one Ray defines for agents"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SinkState::Applied> SinkState::Apply(const std::string& node_id,
                                                    const std::string& session,
                                                    const v1::NodeSnapshot& snapshot) {
  if (absl::Status st = CheckNodeId(node_id); !st.ok()) return st;
  if (session.empty()) return absl::InvalidArgumentError("agent session id is empty");
  if (absl::Status st = CheckText(session, "agent session id"); !st.ok()) return st;
  if (absl::Status st = CheckNodeResources(snapshot.resources_total()); !st.ok()) return st;
  if (absl::Status st = CheckNodeLabels(snapshot.labels()); !st.ok()) return st;
  // The rest of the snapshot must be well formed too (positions in range, known enums).
  absl::StatusOr<NodeSnapshot> parsed = FromProto(snapshot);
  if (!parsed.ok()) return parsed.status();
  auto decoded = std::make_shared<const NodeSnapshot>(*std::move(parsed));

  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(node_id);
  if (it != nodes_.end() && it->second.session == session &&
      snapshot.generation() <= it->second.snapshot.generation()) {
    ++stale_;
    it->second.updated = std::chrono::system_clock::now();  // heard from: an agent's heartbeat
    return Applied{false, it->second.snapshot.generation()};
  }
  Node& node = nodes_[node_id];
  node.session = session;
  node.snapshot = snapshot;
  node.decoded = std::move(decoded);
  node.updated = std::chrono::system_clock::now();
  node.version = ++version_;
  changed_.notify_all();
  return Applied{true, snapshot.generation()};
}

std::vector<SinkState::NodeEntry> SinkState::Nodes() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<NodeEntry> out;
  out.reserve(nodes_.size());
  for (const auto& [id, node] : nodes_) {
    out.push_back({id, node.decoded, node.updated, node.version});
  }
  return out;
}

std::optional<SinkState::NodeEntry> SinkState::Find(const std::string& node_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return std::nullopt;
  return NodeEntry{it->first, it->second.decoded, it->second.updated, it->second.version};
}

uint64_t SinkState::version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_;
}

uint64_t SinkState::WaitForChange(uint64_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait_for(lock, timeout, [&] { return version_ > seen; });
  return version_;
}

uint64_t SinkState::stale_updates() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stale_;
}

std::optional<v1::NodeSnapshot> SinkState::Current(const std::string& node_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return std::nullopt;
  return it->second.snapshot;
}

size_t SinkState::node_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return nodes_.size();
}

}  // namespace rayaccel::rpc
