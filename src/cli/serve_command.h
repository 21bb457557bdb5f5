// `rayaccel serve`: the node agent. Today it publishes to a raylet sink (--raylet); serving
// AcceleratorRegistry to local clients (--listen) is still to come (issue 4).
#ifndef RAYACCEL_CLI_SERVE_COMMAND_H_
#define RAYACCEL_CLI_SERVE_COMMAND_H_

#include <string>

#include "rayaccel/registry.h"

namespace rayaccel::cli {

struct ServeArgs {
  RegistryOptions options;
  std::string raylet;                // unix:PATH or tcp://HOST:PORT
  std::string node_id;               // Ray's NodeID
  long long rescan_interval_s = 60;  // 0: only on SIGHUP and health changes
};

// Runs until SIGINT or SIGTERM; returns the process exit code.
int RunServe(ServeArgs args);

}  // namespace rayaccel::cli

#endif  // RAYACCEL_CLI_SERVE_COMMAND_H_
