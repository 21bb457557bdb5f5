#include "rpc/listen_address.h"

#include <arpa/inet.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace rayaccel::rpc {
namespace {

// Numeric 127.0.0.0/8 or [::1], or the name localhost; not a name that merely starts "127.".
bool IsLoopback(absl::string_view host) {
  if (host == "localhost" || host == "[::1]") return true;
  in_addr v4{};
  return inet_pton(AF_INET, std::string(host).c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

}  // namespace

absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view text) {
  ListenAddress out;
  if (absl::StartsWith(text, "/") || absl::StartsWith(text, "unix:")) {
    absl::string_view path = text;
    absl::ConsumePrefix(&path, "unix:");
    if (path.empty()) return absl::InvalidArgumentError("unix: needs a socket path");
    out.unix_path = std::string(path);
    out.grpc_uri = absl::StrCat("unix:", path);
    return out;
  }
  absl::string_view rest = text;
  if (!absl::ConsumePrefix(&rest, "tcp://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" is not unix:PATH, an absolute path, or tcp://HOST:PORT"));
  }
  size_t colon = rest.rfind(':');
  uint32_t port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(rest.substr(colon + 1), &port) || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" needs HOST:PORT"));
  }
  out.loopback = IsLoopback(rest.substr(0, colon));
  out.grpc_uri = std::string(rest);
  return out;
}

absl::Status CheckPlainTcp(const ListenAddress& address, bool tls, bool allow_insecure_tcp) {
  if (!address.unix_path.empty() || address.loopback || tls || allow_insecure_tcp) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "plain TCP on ", address.grpc_uri,
      " is refused: anyone on the network could call it or read what it carries; use TLS, a "
      "loopback address, or allow it explicitly"));
}

}  // namespace rayaccel::rpc
