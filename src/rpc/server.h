// Starting a gRPC server the way every rayaccel endpoint does (the agent's AcceleratorRegistry,
// the standalone sink): where it listens, how a Unix socket is created, and who may call.
//
// Security model (docs/cli.md "Security"): a Unix socket is the default and is guarded by its
// file mode (0660: the agent's user and group). TCP is loopback unless TLS is configured or
// the operator explicitly allows plain TCP elsewhere. A bearer token, when configured, is
// required on every call, whatever the transport.
#ifndef RAYACCEL_RPC_SERVER_H_
#define RAYACCEL_RPC_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rpc/listen_address.h"
#include "rpc/server_options.h"

namespace rayaccel::rpc {

// The contents of a credentials file (a PEM certificate or key), or why it cannot be read.
absl::StatusOr<std::string> ReadCredentialFile(const std::string& path, const char* what);

// A bearer token from a file: surrounding whitespace dropped; an empty file is an error.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// A bearer token ("authorization: Bearer <token>" metadata), compared in constant time.
class BearerToken {
 public:
  static absl::StatusOr<BearerToken> FromFile(const std::string& path);
  explicit BearerToken(std::string token) : token_(std::move(token)) {}

  // OK, or UNAUTHENTICATED saying what was wrong (never echoing what the client sent).
  grpc::Status Check(const grpc::ServerContextBase& context) const;
  // The same check on an Authorization header's value ("Bearer <token>"); empty when it
  // passes, else why not. For the HTTP view, which has no gRPC context.
  std::string Refusal(absl::string_view authorization) const;

 private:
  std::string token_;
};

// Checks that the options make sense together, before anything starts: the address parses,
// TLS files come as a pair, and plain TCP on a non-loopback address is explicitly allowed.
absl::StatusOr<ListenAddress> CheckServerOptions(const ServerOptions& options);

// Keeps the gRPC library initialised until the process exits. A server process calls it once:
// otherwise the last gRPC object's destructor shuts the library down on the way out, which can
// wait up to ~10 s for gRPC's executor thread to leave its poll.
void HoldGrpcUntilExit();

class Server {
 public:
  // Builds and starts a server for `services` (which must outlive it). A Unix socket is
  // created with mode 0660; a stale socket file in its place is removed, any other file is not.
  static absl::StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options,
                                                       const std::vector<grpc::Service*>& services);
  ~Server();

  // The address clients use: the socket's unix: URI, or HOST:PORT with the port bound.
  const std::string& target() const { return target_; }

  // Calls in progress get until `deadline`, then are cancelled; the socket file is removed.
  void Shutdown(std::chrono::system_clock::time_point deadline);

 private:
  Server() = default;
  std::unique_ptr<grpc::Server> server_;
  std::string unix_path_;
  std::string target_;
  bool stopped_ = false;
};

}  // namespace rayaccel::rpc

#endif  // RAYACCEL_RPC_SERVER_H_
