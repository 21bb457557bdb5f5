// The CLI as a client of a running agent (`--agent ADDRESS`): what `rayaccel serve` holds,
// rather than a fresh discovery, so an operator sees exactly what the raylet is told.
#ifndef RAYACCEL_CLI_AGENT_CLIENT_H_
#define RAYACCEL_CLI_AGENT_CLIENT_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rayaccel/registry.h"

namespace rayaccel::cli {

struct AgentClientOptions {
  std::string address;              // unix:PATH, an absolute path, or tcp://HOST:PORT
  std::string token_file;           // a bearer token to send; empty: none
  std::string tls_ca_file;          // connect with TLS, trusting this CA; empty: plain
  bool allow_insecure_tcp = false;  // plain TCP to a non-loopback agent (refused otherwise)
};

// The agent's current snapshot (GetSnapshot, 10 s deadline), checked as any peer's message is.
absl::StatusOr<std::shared_ptr<const NodeSnapshot>> FetchSnapshot(
    const AgentClientOptions& options);

// What the agent's plugin sets for a worker given these devices (PrepareAllocation).
absl::StatusOr<std::map<std::string, std::string>> PrepareAllocationAt(
    const AgentClientOptions& options, const std::vector<std::string>& device_ids,
    uint64_t generation);

}  // namespace rayaccel::cli

#endif  // RAYACCEL_CLI_AGENT_CLIENT_H_
