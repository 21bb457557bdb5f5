#include "ray/node_publication.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "model/validate.h"
#include "ray/ray_mapping.h"

namespace rayaccel {

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

absl::Status CheckAgentSession(const std::string& session) {
  if (session.empty()) return absl::InvalidArgumentError("agent session id is empty");
  return CheckText(session, "agent session id");
}

absl::Status CheckNodeResource(const std::string& name, double quantity) {
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
  return absl::OkStatus();
}

absl::Status CheckNodeLabel(const std::string& key, const std::string& value) {
  if (absl::Status st = CheckLabelKey(key); !st.ok()) return st;
  if (absl::Status st = CheckLabelValue(value); !st.ok()) return st;
  if (absl::StartsWith(key, "ray.io/") && !IsRayDefinedLabelKey(key)) {
    return absl::InvalidArgumentError(
        absl::StrCat("label \"", key, "\" is under ray.io/ but not one Ray defines for agents"));
  }
  return absl::OkStatus();
}

PublicationOrder::Decision PublicationOrder::Admit(const std::string& node_id,
                                                   const std::string& session,
                                                   uint64_t generation) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(node_id);
  if (it != nodes_.end() && it->second.first == session && generation <= it->second.second) {
    return {false, it->second.second};
  }
  nodes_[node_id] = {session, generation};
  return {true, generation};
}

}  // namespace rayaccel
