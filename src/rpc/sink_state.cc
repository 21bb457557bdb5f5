#include "rpc/sink_state.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "rpc/snapshot_proto.h"

namespace rayaccel::rpc {

absl::StatusOr<SinkState::Applied> SinkState::Apply(const std::string& node_id,
                                                    const std::string& session,
                                                    const v1::NodeSnapshot& snapshot) {
  if (absl::Status st = CheckNodeId(node_id); !st.ok()) return st;
  if (absl::Status st = CheckAgentSession(session); !st.ok()) return st;
  if (absl::Status st = CheckNodeResources(snapshot.resources_total()); !st.ok()) return st;
  if (absl::Status st = CheckNodeLabels(snapshot.labels()); !st.ok()) return st;
  // The rest of the snapshot must be well formed too (positions in range, known enums).
  absl::StatusOr<NodeSnapshot> parsed = FromProto(snapshot);
  if (!parsed.ok()) return parsed.status();
  auto decoded = std::make_shared<const NodeSnapshot>(*std::move(parsed));

  std::lock_guard<std::mutex> lock(mu_);
  const PublicationOrder::Decision decision = order_.Admit(node_id, session, snapshot.generation());
  if (!decision.apply) {
    ++stale_;
    nodes_[node_id].updated = std::chrono::system_clock::now();  // heard from: a heartbeat
    return Applied{false, decision.generation};
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

absl::Status SinkState::ApplyTelemetry(const std::string& node_id, const std::string& session,
                                       const v1::Telemetry& telemetry) {
  absl::StatusOr<Telemetry> parsed = FromProto(telemetry);
  if (!parsed.ok()) return parsed.status();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() || it->second.session != session || it->second.decoded == nullptr) {
    return absl::OkStatus();  // another agent's snapshot is current: not this one's devices
  }
  Node& node = it->second;
  std::set<std::string> ids;
  for (const Device& d : node.decoded->devices) ids.insert(d.id);
  std::vector<DeviceSample>& samples = parsed->devices;
  samples.erase(std::remove_if(samples.begin(), samples.end(),
                               [&](const DeviceSample& s) { return ids.count(s.device_id) == 0; }),
                samples.end());
  Load load;
  load.unix_ms = parsed->unix_ms;
  uint64_t busy = 0, saying = 0;
  for (const DeviceSample& d : samples) {
    if (d.known & RAYACCEL_SAMPLE_UTILIZATION) {
      busy += d.utilization_percent;
      ++saying;
    }
    if (d.known & RAYACCEL_SAMPLE_MEMORY) {
      load.memory_known = true;
      load.memory_used_bytes += d.memory_used_bytes;
      load.memory_total_bytes += d.memory_total_bytes;
    }
    if (d.known & RAYACCEL_SAMPLE_POWER) {
      load.power_known = true;
      load.power_mw += d.power_mw;
    }
  }
  if (saying > 0) load.utilization_percent = static_cast<int>(busy / saying);
  node.telemetry.push_back(*std::move(parsed));
  node.load.push_back(load);
  while (node.telemetry.size() > kTelemetryKept) node.telemetry.pop_front();
  while (node.load.size() > kTelemetryKept) node.load.pop_front();
  return absl::OkStatus();
}

std::vector<SinkState::Load> SinkState::LoadOf(const std::string& node_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return {};
  return {it->second.load.begin(), it->second.load.end()};
}

std::vector<Telemetry> SinkState::TelemetryOf(const std::string& node_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return {};
  return {it->second.telemetry.begin(), it->second.telemetry.end()};
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
