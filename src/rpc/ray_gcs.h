// The two calls of Ray's GCS the agent makes (serve --on-device-loss drain), declared from Ray's
// protos in proto/ray/rpc: draining a node, as `ray drain-node` and autoscaler v2 do
// (AutoscalerStateService.DrainNode; a drained node takes no new tasks or actors, what runs
// there finishes), and finding the agent's own node (NodeInfoGcsService.GetAllNodeInfo).
#ifndef RAYACCEL_RPC_RAY_GCS_H_
#define RAYACCEL_RPC_RAY_GCS_H_

#include <chrono>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rayaccel::rpc {

struct GcsOptions {
  std::string address;  // the GCS, HOST:PORT (Ray's --address), or a gRPC target
  // Sent as "authorization: Bearer <token>" when set: a Ray with token authentication
  // (RAY_AUTH_MODE=token) refuses calls without it. GcsTokenFromEnvironment finds Ray's.
  std::string token;
  std::chrono::milliseconds timeout{10000};  // per call
  // Mutual TLS, as Ray's own clients speak to a GCS started with RAY_USE_TLS: PEM contents,
  // not paths. GcsTlsFromEnvironment finds Ray's. Empty `ca`: plain TCP.
  struct Tls {
    std::string ca, cert_chain, private_key;
  } tls;
};

// Ray's own token, where Ray's clients look for it, in Ray's order: $RAY_AUTH_TOKEN, the file
// $RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token. Empty when there is none (a Ray without token
// authentication needs none); an error when a named file cannot be read.
absl::StatusOr<std::string> GcsTokenFromEnvironment();

// Ray's TLS settings, as Ray's processes read them: RAY_USE_TLS 1 or true (any case) names the
// files in RAY_TLS_CA_CERT, RAY_TLS_SERVER_CERT and RAY_TLS_SERVER_KEY (Ray presents its server
// certificate as a client's too); nothing when RAY_USE_TLS is unset or else. An error naming
// the variable when one is missing or its file cannot be read.
absl::StatusOr<GcsOptions::Tls> GcsTlsFromEnvironment();

// Drains `node_id` (Ray's NodeID, 56 hex digits) for `reason_message`, with reason
// DRAIN_NODE_REASON_PREEMPTION and no deadline: the node is going away whatever runs there.
// OK when the GCS accepted; FailedPrecondition with Ray's words when it refused; the RPC's
// error (Unavailable, Unauthenticated, DeadlineExceeded, ...) naming the GCS otherwise.
absl::Status DrainNode(const GcsOptions& gcs, const std::string& node_id,
                       const std::string& reason_message);

// This host's Ray node, for an agent not told its --node-id: among the live nodes whose raylet
// address is one of this host's, the one whose labels include every one of `labels` (what
// rayaccel gave Ray) when there are several (nodes on one host share its addresses). NotFound
// when none is (Ray has not started here yet); FailedPrecondition when several match.
absl::StatusOr<std::string> FindNodeOnThisHost(const GcsOptions& gcs,
                                               const std::map<std::string, std::string>& labels);

}  // namespace rayaccel::rpc

#endif  // RAYACCEL_RPC_RAY_GCS_H_
