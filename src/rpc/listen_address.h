// Where a server listens, as operators write it: `unix:PATH` (or a bare absolute path) or
// `tcp://HOST:PORT`. Plain TCP is limited to loopback: the channel carries no credentials yet.
#ifndef RAYACCEL_RPC_LISTEN_ADDRESS_H_
#define RAYACCEL_RPC_LISTEN_ADDRESS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rayaccel::rpc {

struct ListenAddress {
  std::string grpc_uri;   // what grpc::ServerBuilder::AddListeningPort takes
  std::string unix_path;  // the socket file, empty for TCP
};

absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view text);

}  // namespace rayaccel::rpc

#endif  // RAYACCEL_RPC_LISTEN_ADDRESS_H_
