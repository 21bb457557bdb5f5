// Where and to whom an RPC server listens: plain data, so that the command line can hold it
// without the RPC stack (src/cli/main.cc).
#ifndef RAYACCEL_RPC_SERVER_OPTIONS_H_
#define RAYACCEL_RPC_SERVER_OPTIONS_H_

#include <string>

namespace rayaccel::rpc {

struct ServerOptions {
  std::string listen;  // unix:PATH, an absolute path, or tcp://HOST:PORT
  // TLS for TCP: the server's certificate chain and key (PEM); with a client CA, clients must
  // present a certificate it signed (mutual TLS).
  std::string tls_cert_file, tls_key_file, tls_client_ca_file;
  std::string token_file;           // a bearer token every call must carry; empty: none
  bool allow_insecure_tcp = false;  // plain TCP on a non-loopback address
  // A Unix socket is created with this mode (the owner must keep read and write) and, when a
  // group is named (a name or a number), given to that group: the Ray user's group, say, for an
  // agent run as root. Changing the group needs root or membership of the group.
  unsigned socket_mode = 0660;
  std::string socket_group;
  int max_receive_message_bytes = 4 << 20;
};

}  // namespace rayaccel::rpc

#endif  // RAYACCEL_RPC_SERVER_OPTIONS_H_
