// Where a server listens, as operators write it: `unix:PATH` (or a bare absolute path) or
// `tcp://HOST:PORT`. Whether a TCP address may be used without TLS is the server's or client's
// decision (server.h), from `loopback`.
#ifndef RAYACCEL_RPC_LISTEN_ADDRESS_H_
#define RAYACCEL_RPC_LISTEN_ADDRESS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rayaccel::rpc {

struct ListenAddress {
  std::string grpc_uri;   // what grpc::ServerBuilder::AddListeningPort takes
  std::string unix_path;  // the socket file, empty for TCP
  bool loopback = false;  // TCP on 127.0.0.0/8, ::1 or localhost
};

absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view text);

// The one rule for every endpoint, served or dialled: a Unix socket or a loopback address may
// be plain; any other TCP address needs TLS, or the operator's explicit permission.
absl::Status CheckPlainTcp(const ListenAddress& address, bool tls, bool allow_insecure_tcp);

}  // namespace rayaccel::rpc

#endif  // RAYACCEL_RPC_LISTEN_ADDRESS_H_
