// The HTTP view's server (`rayaccel serve --http`, `rayaccel sink --http`): read-only routes
// and server-sent event streams on a TCP address, served by cpp-httplib on threads of its own.
// The same rules as the gRPC listener: TLS with the same certificate files (and client
// certificates when a client CA is given), plain TCP only on loopback unless the operator allows
// it, and the bearer token, when there is one, on every route. A browser cannot add an
// Authorization header to a page load: it opens any page once with `?token=TOKEN`, gets the
// token back as an HttpOnly, SameSite=Strict cookie named after the port, and is sent to the
// same page without it. Without a token, a loopback listener answers only requests addressed
// to a loopback name (no DNS rebinding).
#ifndef RAYACCEL_WEB_HTTP_SERVER_H_
#define RAYACCEL_WEB_HTTP_SERVER_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "rpc/server.h"

namespace httplib {
class Server;
}

namespace rayaccel::web {

struct Request {
  std::vector<std::string> captures;         // a route's regular expression groups, in order
  std::map<std::string, std::string> query;  // ?name=value (the last value of a repeated one)
};

struct Response {
  std::string content_type;
  std::string body;
  int status = 200;
};

// One connection's event stream. Called again and again on that connection's thread: waits at
// most `wait` for the next event and returns its data (one line: JSON, say), "" when nothing
// happened in that time, or nullopt to end the stream.
using EventSource = std::function<std::optional<std::string>(std::chrono::milliseconds wait)>;

struct Routes {
  // Keys are cpp-httplib patterns: a literal path, or a regular expression such as
  // "/api/node/([0-9a-f]{56})".
  std::map<std::string, std::function<Response(const Request&)>> pages;
  // Server-sent events (text/event-stream); the function makes a connection's source, or
  // says there is no such stream (404).
  std::map<std::string, std::function<std::optional<EventSource>(const Request&)>> events;
};

struct HttpOptions {
  std::string listen;  // tcp://HOST:PORT (port 0: any free one)
  bool allow_insecure_tcp = false;
  std::string tls_cert_file, tls_key_file, tls_client_ca_file;  // PEM; empty: plain HTTP
  const rpc::BearerToken* token = nullptr;  // must outlive the server; null: none required
  // Streams open at once; one more is answered 503 (each holds a thread while it is open).
  size_t max_event_streams = 32;
};

class HttpServer {
 public:
  // Returns once it listens.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpOptions& options,
                                                           const Routes& routes);
  ~HttpServer();  // stops listening, ends event streams, waits for requests in progress
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  const std::string& address() const { return address_; }  // "HOST:PORT", the port bound
  const char* scheme() const { return tls_ ? "https" : "http"; }

 private:
  HttpServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::string address_;
  bool tls_ = false;
  // Shared with the streams' callbacks, which may run until the server has stopped.
  struct Streams {
    std::atomic<bool> stopping{false};
    std::atomic<size_t> open{0};
  };
  std::shared_ptr<Streams> streams_ = std::make_shared<Streams>();
};

}  // namespace rayaccel::web

#endif  // RAYACCEL_WEB_HTTP_SERVER_H_
