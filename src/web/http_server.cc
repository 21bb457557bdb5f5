#include "web/http_server.h"

#include <httplib.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "rpc/listen_address.h"
#include "web/request_guard.h"

namespace rayaccel::web {
namespace {

// Browsers scope cookies by host, not port: the cookie is named after the port, so that an
// agent's and a sink's tokens on one host neither overwrite each other nor go to the other.
std::string TokenCookie(int port) { return absl::StrCat("rayaccel_token_", port); }

// A token a cookie can carry as it is (RFC 6265 cookie-octets, without '%' and '+', which URLs
// would change on the way).
bool CookieSafe(absl::string_view token) {
  return !token.empty() && std::all_of(token.begin(), token.end(), [](char c) {
    return c > 0x20 && c < 0x7F && c != '"' && c != ',' && c != ';' && c != '\\' && c != '%' &&
           c != '+';
  });
}

constexpr auto kEventWait = std::chrono::milliseconds(500);
constexpr int kKeepAliveEvery = 30;  // waits (15 s) without an event, then a comment is sent

// The token a browser sent in its cookie, as an Authorization header's value; empty if none.
std::string CookieToken(const httplib::Request& req, const std::string& cookie) {
  for (absl::string_view part : absl::StrSplit(req.get_header_value("Cookie"), ';')) {
    part = absl::StripAsciiWhitespace(part);
    if (absl::ConsumePrefix(&part, cookie) && absl::ConsumePrefix(&part, "=")) {
      return absl::StrCat("Bearer ", part);
    }
  }
  return "";
}

// Headers every answer carries: nothing here is embedded elsewhere, cached, or guessed at.
void SetCommonHeaders(httplib::Response& res) {
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Cache-Control", "no-store");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Content-Security-Policy",
                 "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                 "frame-ancestors 'self'");
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpOptions& options,
                                                              const Routes& routes) {
  absl::StatusOr<rpc::ListenAddress> address = rpc::ParseListenAddress(options.listen);
  if (!address.ok()) return address.status();
  if (!address->unix_path.empty()) {
    return absl::InvalidArgumentError("--http takes tcp://HOST:PORT, not a Unix socket");
  }
  const bool tls = !options.tls_cert_file.empty();
  if (tls && options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate and a key file");
  }
  if (absl::Status st = rpc::CheckPlainTcp(*address, tls, options.allow_insecure_tcp); !st.ok()) {
    return st;
  }
  // gRPC's form "HOST:PORT" or "[V6]:PORT" back to a host and a port.
  const std::string& uri = address->grpc_uri;
  const size_t colon = uri.rfind(':');
  std::string host = uri.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(uri.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(absl::StrCat("--http: no port in ", options.listen));
  }

  std::unique_ptr<HttpServer> out(new HttpServer());
  out->tls_ = tls;
  if (tls) {
    auto ssl = std::make_unique<httplib::SSLServer>(
        options.tls_cert_file.c_str(), options.tls_key_file.c_str(),
        options.tls_client_ca_file.empty() ? nullptr : options.tls_client_ca_file.c_str());
    if (!ssl->is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--http: cannot use the TLS certificate ", options.tls_cert_file, ", key ",
          options.tls_key_file, options.tls_client_ca_file.empty() ? "" : " and client CA ",
          options.tls_client_ca_file, " (unreadable, not PEM, or not a pair)"));
    }
    out->server_ = std::move(ssl);
  } else {
    out->server_ = std::make_unique<httplib::Server>();
  }
  httplib::Server& server = *out->server_;
  const size_t threads = options.max_event_streams + 8;  // streams, and room for pages
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };

  const rpc::BearerToken* token = options.token;
  const bool secure_cookie = tls;
  const bool check_host = token == nullptr && address->loopback;
  auto cookie = std::make_shared<std::string>();  // named once the port is known
  server.set_pre_routing_handler([token, secure_cookie, check_host, cookie](
                                     const httplib::Request& req, httplib::Response& res) {
    SetCommonHeaders(res);
    auto refuse = [&res](int status, const std::string& why) {
      res.status = status;
      res.set_content(why + "\n", "text/plain; charset=utf-8");
      return httplib::Server::HandlerResponse::Handled;
    };
    // Without a token, a loopback listener answers only requests addressed to a loopback
    // name: a page elsewhere cannot rebind its own name to 127.0.0.1 and read the view.
    if (check_host && !IsLoopbackHost(req.get_header_value("Host"))) {
      return refuse(421, "this view answers requests for localhost or 127.0.0.1 only");
    }
    if (token == nullptr) return httplib::Server::HandlerResponse::Unhandled;
    // A page opened with ?token=: the token becomes a cookie, and the address loses it.
    if (req.has_param("token")) {
      const std::string given = req.get_param_value("token");
      if (token->Refusal(absl::StrCat("Bearer ", given)).empty()) {
        if (!CookieSafe(given)) {
          return refuse(400,
                        "this token has characters a cookie cannot carry: send it as "
                        "\"Authorization: Bearer TOKEN\"");
        }
        res.set_header("Set-Cookie",
                       absl::StrCat(*cookie, "=", given, "; Path=/; HttpOnly; SameSite=Strict",
                                    secure_cookie ? "; Secure" : ""));
        res.set_redirect(SameSiteRedirect(req.path), 303);
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    std::string authorization = req.get_header_value("Authorization");
    if (authorization.empty()) authorization = CookieToken(req, *cookie);
    std::string why = token->Refusal(authorization);
    if (why.empty()) return httplib::Server::HandlerResponse::Unhandled;
    res.set_header("WWW-Authenticate", "Bearer realm=\"rayaccel\"");
    return refuse(401, why + " (a browser: open the page once with ?token=TOKEN)");
  });

  auto to_request = [](const httplib::Request& req) {
    Request r;
    for (size_t i = 1; i < req.matches.size(); ++i) r.captures.push_back(req.matches[i].str());
    for (const auto& [name, value] : req.params) r.query[name] = value;
    return r;
  };
  for (const auto& route : routes.pages) {
    server.Get(route.first, [page = route.second, to_request](const httplib::Request& req,
                                                              httplib::Response& res) {
      Response r = page(to_request(req));
      res.status = r.status;
      res.set_content(r.body, r.content_type);
    });
  }
  std::shared_ptr<Streams> streams = out->streams_;
  const size_t max_streams = options.max_event_streams;
  for (const auto& route : routes.events) {
    server.Get(route.first, [open = route.second, to_request, streams, max_streams](
                                const httplib::Request& req, httplib::Response& res) {
      if (streams->open.fetch_add(1) >= max_streams) {
        streams->open.fetch_sub(1);
        res.status = 503;
        res.set_content(absl::StrCat("already ", max_streams, " event streams open\n"),
                        "text/plain; charset=utf-8");
        return;
      }
      std::optional<EventSource> opened = open(to_request(req));
      if (!opened.has_value()) {
        streams->open.fetch_sub(1);
        res.status = 404;
        res.set_content("no such stream\n", "text/plain; charset=utf-8");
        return;
      }
      auto source = std::make_shared<EventSource>(*std::move(opened));
      auto idle = std::make_shared<int>(0);
      res.set_chunked_content_provider(
          "text/event-stream",
          [source, idle, streams](size_t, httplib::DataSink& sink) {
            if (streams->stopping.load()) return false;
            std::optional<std::string> event = (*source)(kEventWait);
            if (!event.has_value()) {
              sink.done();
              return true;
            }
            std::string text;
            if (!event->empty()) {
              text = absl::StrCat("data: ", *event, "\n\n");
              *idle = 0;
            } else if (++*idle >= kKeepAliveEvery) {
              text = ": keep-alive\n\n";  // a comment: proxies and the browser see it is alive
              *idle = 0;
            }
            return text.empty() || sink.write(text.data(), text.size());
          },
          [streams](bool) { streams->open.fetch_sub(1); });
    });
  }

  int bound = -1;
  if (port == 0) {
    bound = server.bind_to_any_port(host);
  } else if (server.bind_to_port(host, port)) {
    bound = port;
  }
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat("--http: cannot listen on ", options.listen));
  }
  out->address_ =
      absl::StrCat(host.find(':') == std::string::npos ? host : "[" + host + "]", ":", bound);
  *cookie = TokenCookie(bound);
  auto ended = std::make_shared<std::atomic<bool>>(false);
  out->thread_ = std::thread([&server, ended] {
    server.listen_after_bind();
    *ended = true;
  });
  // stop() does nothing until the server runs: wait for that, so that a server destroyed at
  // once (a signal right after start) still stops.
  while (!server.is_running() && !*ended) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return out;
}

HttpServer::~HttpServer() {
  streams_->stopping = true;
  if (server_ != nullptr) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace rayaccel::web
