// `rayaccel serve`: the node agent. It serves AcceleratorRegistry to local clients (the raylet,
// workers, tools) and, with --raylet, publishes each snapshot to a raylet sink.
#ifndef RAYACCEL_CLI_SERVE_COMMAND_H_
#define RAYACCEL_CLI_SERVE_COMMAND_H_

#include <string>

#include "absl/status/statusor.h"
#include "rayaccel/registry.h"
#include "rpc/server.h"
#include "web/http_server.h"

namespace rayaccel::cli {

inline constexpr char kDefaultAgentSocket[] = "unix:/run/rayaccel/agent.sock";

// Where `serve` listens without --listen: kDefaultAgentSocket as root. For another user: the
// service's runtime folder when systemd made one ($RUNTIME_DIRECTORY), or /run/rayaccel when
// this user may write it; else $XDG_RUNTIME_DIR/rayaccel/agent.sock (the user's runtime
// folder, which systemd makes for a login or a lingering user), else
// /tmp/rayaccel-UID/agent.sock in a folder of the user's own (mode 0700, refused when someone
// else made it).
absl::StatusOr<std::string> DefaultAgentSocket();

// The HTTP view's settings (--http): its address, and the TLS files, token and permission for
// plain TCP that the gRPC listener has (the same rules for both).
web::HttpOptions HttpOptionsFor(const std::string& listen, const rpc::ServerOptions& server,
                                const rpc::BearerToken* token);

struct ServeArgs {
  RegistryOptions options;
  rpc::ServerOptions server;  // where and to whom AcceleratorRegistry is served
  std::string raylet;         // the sink to publish to: unix:PATH or tcp://HOST:PORT; empty: none
  std::string node_id;        // Ray's NodeID (with raylet)
  std::string raylet_token_file;       // a bearer token to present to the sink
  std::string raylet_tls_ca_file;      // connect to the sink with TLS, trusting this CA
  long long rescan_interval_s = 60;    // 0: only on SIGHUP and health changes
  std::string http;                    // tcp://HOST:PORT for the HTTP view; empty: none
  std::string conformance_reports;     // the folder of conformance reports the page shows
  long long telemetry_interval_s = 5;  // with http: sampling period; 0: none
  bool drain_on_device_loss = false;   // --on-device-loss drain (else report)
  std::string gcs_address;             // Ray's GCS, HOST:PORT (with drain)
  std::string gcs_token_file;          // its token; empty: Ray's own lookup
};

// Runs until SIGINT or SIGTERM; returns the process exit code.
int RunServe(ServeArgs args);

}  // namespace rayaccel::cli

#endif  // RAYACCEL_CLI_SERVE_COMMAND_H_
