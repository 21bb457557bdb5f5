// `rayaccel serve`: the node agent. It serves AcceleratorRegistry to local clients (the raylet,
// workers, tools) and, with --raylet, publishes each snapshot to a raylet sink.
#ifndef RAYACCEL_CLI_SERVE_COMMAND_H_
#define RAYACCEL_CLI_SERVE_COMMAND_H_

#include <string>

#include "rayaccel/registry.h"
#include "rpc/server.h"

namespace rayaccel::cli {

inline constexpr char kDefaultAgentSocket[] = "unix:/run/rayaccel/agent.sock";

struct ServeArgs {
  RegistryOptions options;
  rpc::ServerOptions server;  // where and to whom AcceleratorRegistry is served
  std::string raylet;         // the sink to publish to: unix:PATH or tcp://HOST:PORT; empty: none
  std::string node_id;        // Ray's NodeID (with raylet)
  std::string raylet_token_file;     // a bearer token to present to the sink
  std::string raylet_tls_ca_file;    // connect to the sink with TLS, trusting this CA
  long long rescan_interval_s = 60;  // 0: only on SIGHUP and health changes
};

// Runs until SIGINT or SIGTERM; returns the process exit code.
int RunServe(ServeArgs args);

}  // namespace rayaccel::cli

#endif  // RAYACCEL_CLI_SERVE_COMMAND_H_
