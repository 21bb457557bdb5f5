// NodeSnapshot <-> its protobuf form (proto/rayaccel/v1/snapshot.proto).
#ifndef RAYACCEL_RPC_SNAPSHOT_PROTO_H_
#define RAYACCEL_RPC_SNAPSHOT_PROTO_H_

#include "absl/status/statusor.h"
#include "rayaccel/registry.h"
#include "rayaccel/v1/agent.pb.h"
#include "rayaccel/v1/snapshot.pb.h"

namespace rayaccel::rpc {

v1::NodeSnapshot ToProto(const NodeSnapshot& snapshot);
v1::Telemetry ToProto(const Telemetry& telemetry);

// Checks what it reads (positions in range, known enum values), since the bytes may come
// from a peer: a malformed message is an error, never a crash.
absl::StatusOr<NodeSnapshot> FromProto(const v1::NodeSnapshot& proto);

// The same for a telemetry sample from a peer: at most kMaxTelemetryDevices samples and 256
// plugins, ids and names printable and short, utilization a percent, memory in use within
// the total, only known field bits; an error names the first thing wrong.
inline constexpr int kMaxTelemetryDevices = 4096;
absl::StatusOr<Telemetry> FromProto(const v1::Telemetry& proto);

}  // namespace rayaccel::rpc

#endif  // RAYACCEL_RPC_SNAPSHOT_PROTO_H_
