#include "web/http_server.h"

#include <httplib.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "rpc/listen_address.h"

namespace rayaccel::web {

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& listen,
                                                             bool allow_insecure_tcp,
                                                             const rpc::BearerToken* token,
                                                             std::map<std::string, Route> routes) {
  absl::StatusOr<rpc::ListenAddress> address = rpc::ParseListenAddress(listen);
  if (!address.ok()) return address.status();
  if (!address->unix_path.empty()) {
    return absl::InvalidArgumentError("--http takes tcp://HOST:PORT, not a Unix socket");
  }
  if (absl::Status st = rpc::CheckPlainTcp(*address, /*tls=*/false, allow_insecure_tcp);
      !st.ok()) {
    return st;
  }
  // gRPC's form "HOST:PORT" or "[V6]:PORT" back to a host and a port.
  const std::string& uri = address->grpc_uri;
  const size_t colon = uri.rfind(':');
  std::string host = uri.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(uri.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(absl::StrCat("--http: no port in ", listen));
  }

  std::unique_ptr<HttpServer> out(new HttpServer());
  out->server_ = std::make_unique<httplib::Server>();
  httplib::Server& server = *out->server_;
  if (token != nullptr) {
    server.set_pre_routing_handler([token](const httplib::Request& req, httplib::Response& res) {
      std::string why = token->Refusal(req.get_header_value("Authorization"));
      if (why.empty()) return httplib::Server::HandlerResponse::Unhandled;
      res.status = 401;
      res.set_content(why + "\n", "text/plain; charset=utf-8");
      return httplib::Server::HandlerResponse::Handled;
    });
  }
  for (auto& [path, route] : routes) {
    server.Get(path, [route = std::move(route)](const httplib::Request&, httplib::Response& res) {
      Response r = route();
      res.set_content(r.body, r.content_type);
    });
  }
  int bound = -1;
  if (port == 0) {
    bound = server.bind_to_any_port(host);
  } else if (server.bind_to_port(host, port)) {
    bound = port;
  }
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat("--http: cannot listen on ", listen));
  }
  out->address_ = absl::StrCat(host.find(':') == std::string::npos ? host : "[" + host + "]",
                               ":", bound);
  out->thread_ = std::thread([&server] { server.listen_after_bind(); });
  return out;
}

HttpServer::~HttpServer() {
  if (server_ != nullptr) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace rayaccel::web
