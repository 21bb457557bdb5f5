// The agent's HTTP view (`rayaccel serve --http ADDRESS`): a few read-only routes on a TCP
// address, served by cpp-httplib on threads of its own. The same rules as the gRPC listener:
// a non-loopback address needs the operator's explicit permission (no TLS here yet), and a
// bearer token, when the agent has one, is required on every route.
#ifndef RAYACCEL_WEB_HTTP_SERVER_H_
#define RAYACCEL_WEB_HTTP_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "rpc/server.h"

namespace httplib {
class Server;
}

namespace rayaccel::web {

struct Response {
  std::string content_type;
  std::string body;
};

class HttpServer {
 public:
  using Route = std::function<Response()>;
  // `listen`: tcp://HOST:PORT (port 0: any free one). `token`, when not null, must outlive the
  // server. Returns once it listens.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& listen,
                                                           bool allow_insecure_tcp,
                                                           const rpc::BearerToken* token,
                                                           std::map<std::string, Route> routes);
  ~HttpServer();  // stops listening and waits for requests in progress
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  const std::string& address() const { return address_; }  // "HOST:PORT", the port bound

 private:
  HttpServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::string address_;
};

}  // namespace rayaccel::web

#endif  // RAYACCEL_WEB_HTTP_SERVER_H_
