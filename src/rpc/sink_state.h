// The raylet side's record of what each node's agent last published, checked the way Ray
// checks what it is given. Transport-free, so that the gRPC sink (issue 4) stays a thin shell
// and the rules are tested on their own.
#ifndef RAYACCEL_RPC_SINK_STATE_H_
#define RAYACCEL_RPC_SINK_STATE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ray/node_publication.h"
#include "rayaccel/registry.h"
#include "rayaccel/v1/snapshot.pb.h"

namespace rayaccel::rpc {

// The rules (ray/node_publication.h), for the wire's maps as for any other.
using ::rayaccel::CheckNodeId;
using ::rayaccel::CheckNodeLabels;
using ::rayaccel::CheckNodeResources;

// One current snapshot per node. Thread-safe.
//
// Ordering: within one agent session (an id the agent picks at start), generations only move
// forward; an older or equal generation is acknowledged but not applied, so a late retry never
// rolls a node back. A new session (the agent restarted, its generations start over) replaces
// the node's state whole.
class SinkState {
 public:
  struct Applied {
    bool applied = false;     // false: stale, the current state stands
    uint64_t generation = 0;  // the generation now current for the node
  };

  // Validates everything first; on error nothing changes.
  absl::StatusOr<Applied> Apply(const std::string& node_id, const std::string& session,
                                const v1::NodeSnapshot& snapshot);

  // A node's telemetry sample from the agent whose snapshot is current (`session`; another
  // session's is ignored): checked (FromProto, an error when malformed), samples of devices
  // not in that snapshot dropped, kept with the node's last kTelemetryKept. The node's
  // snapshot and the sink's version are untouched: pages read samples when they refresh.
  static constexpr size_t kTelemetryKept = 60;
  absl::Status ApplyTelemetry(const std::string& node_id, const std::string& session,
                              const v1::Telemetry& telemetry);
  // The node's kept samples, oldest first; empty for a node that sent none.
  std::vector<Telemetry> TelemetryOf(const std::string& node_id) const;
  // The same, each summed over the node's devices: what the cluster page charts per node.
  struct Load {
    int64_t unix_ms = 0;
    int utilization_percent = -1;  // the mean over devices that say; -1: none does
    uint64_t memory_used_bytes = 0, memory_total_bytes = 0;  // devices that say
    uint64_t power_mw = 0;
    bool memory_known = false, power_known = false;
  };
  std::vector<Load> LoadOf(const std::string& node_id) const;

  std::optional<v1::NodeSnapshot> Current(const std::string& node_id) const;
  size_t node_count() const;

  // A node as it stands, for views of the cluster: what it published, decoded, and when.
  struct NodeEntry {
    std::string node_id;
    std::shared_ptr<const NodeSnapshot> snapshot;
    // When the node's agent last published: a change, or its current snapshot again (the
    // publisher's heartbeat, every 2 s by default).
    std::chrono::system_clock::time_point updated;
    uint64_t version = 0;  // version() when this node last changed
  };
  std::vector<NodeEntry> Nodes() const;  // by node id; shares the snapshots, copies nothing big
  std::optional<NodeEntry> Find(const std::string& node_id) const;

  // Counts the updates applied, sink-wide: a view that saw version V has seen every change up
  // to it. Waits until the version passes `seen` or `timeout` passes; returns the version then.
  uint64_t version() const;
  uint64_t WaitForChange(uint64_t seen, std::chrono::milliseconds timeout) const;
  uint64_t stale_updates() const;  // acknowledged but not applied (a retry, a late stream)

 private:
  struct Node {
    std::string session;
    v1::NodeSnapshot snapshot;
    std::shared_ptr<const NodeSnapshot> decoded;
    std::chrono::system_clock::time_point updated;
    uint64_t version = 0;
    std::deque<Telemetry> telemetry;  // oldest first
    std::deque<Load> load;            // the same, summed
  };
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  PublicationOrder order_;  // which publications apply
  std::map<std::string, Node> nodes_;
  uint64_t version_ = 0;
  uint64_t stale_ = 0;
};

}  // namespace rayaccel::rpc

#endif  // RAYACCEL_RPC_SINK_STATE_H_
