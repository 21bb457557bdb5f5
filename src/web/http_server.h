// The HTTP view's server (`rayaccel serve --http`, `rayaccel sink --http`): read-only routes
// and server-sent event streams on a TCP address, served by libmicrohttpd's event loop, so an
// idle or slow client holds a connection slot, never a thread: a scraper and a page still get
// their answer while hundreds of connections sit idle (docs/web.md, "Under load").
// The same rules as the gRPC listener: TLS with the same certificate files (and client
// certificates when a client CA is given), plain TCP only on loopback unless the operator allows
// it, and the bearer token, when there is one, on every route. A browser cannot add an
// Authorization header to a page load: it opens any page once with `?token=TOKEN`, gets the
// token back as an HttpOnly, SameSite=Strict cookie named after the port, and is sent to the
// same page without it. Without a token, a loopback listener answers only requests addressed
// to a loopback name (no DNS rebinding).
#ifndef RAYACCEL_WEB_HTTP_SERVER_H_
#define RAYACCEL_WEB_HTTP_SERVER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rpc/server.h"

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

// One connection's event stream. Called again and again on a thread of that stream's own: waits at
// most `wait` for the next event and returns its data (one line: JSON, say), "" when nothing
// happened in that time, or nullopt to end the stream.
using EventSource = std::function<std::optional<std::string>(std::chrono::milliseconds wait)>;

struct Routes {
  // Keys are ECMAScript regular expressions the whole decoded path must match: a literal path,
  // or a pattern such as "/api/node/([0-9a-f]{56})".
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
  // Streams open at once; one more is answered 503 (each has a thread waiting for its events).
  size_t max_event_streams = 32;
  // Connections held at once, in all and from one client address; one more is closed as it is
  // accepted. The total is lowered to what the process's descriptor limit leaves room for.
  size_t max_connections = 4096;
  size_t max_connections_per_address = 2048;
  // A connection that sends and takes nothing for this long is closed (keep-alive included).
  std::chrono::seconds idle_timeout{30};
  // Each request's line and headers must be in within this long of the connection opening or
  // of the previous answer, however slowly they trickle in; else the connection is closed.
  std::chrono::seconds request_head_timeout{30};
};

// Raises this process's soft limit on open files (RLIMIT_NOFILE), up to its hard limit, so that
// `options.max_connections` fit beside what else the process opens; returns the soft limit now.
// For a command that owns its process (serve, sink), before Start; an embedder manages its own.
uint64_t RaiseOpenFilesLimitFor(const HttpOptions& options);

class HttpServer {
 public:
  // Returns once it listens.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpOptions& options,
                                                           const Routes& routes);
  // Stops listening, ends event streams, closes every connection, and returns once no route
  // or event source runs any more.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  const std::string& address() const { return address_; }  // "HOST:PORT", the port bound
  const char* scheme() const { return tls_ ? "https" : "http"; }
  size_t max_connections() const { return max_connections_; }  // after the descriptor limit

  struct State;  // the daemon, the routes and the open streams (http_server.cc)

 private:
  HttpServer();
  std::unique_ptr<State> state_;
  std::string address_;
  bool tls_ = false;
  size_t max_connections_ = 0;
};

}  // namespace rayaccel::web

#endif  // RAYACCEL_WEB_HTTP_SERVER_H_
