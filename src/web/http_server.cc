#include "web/http_server.h"

#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdarg>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "rpc/listen_address.h"
#include "util/log_line.h"
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
// Text a stream's client has not taken yet; past this it is not reading, and the stream ends.
constexpr size_t kStreamBacklog = 64 * 1024;
constexpr size_t kStreamBlock = 4096;
// A request line and its headers must fit (and a response's head): larger ones get 431.
constexpr size_t kConnectionMemory = 32 * 1024;
// Event-loop threads, each with its share of the connections: a slow page render on one still
// leaves the other answering.
constexpr unsigned kLoopThreads = 2;
// Descriptors left to the rest of the process (gRPC, plugins' hosts, files) when the limit
// on connections is fitted under RLIMIT_NOFILE.
constexpr size_t kReservedDescriptors = 256;

// Headers every answer carries: nothing here is embedded elsewhere, cached, or guessed at.
void AddCommonHeaders(MHD_Response* response) {
  MHD_add_response_header(response, "X-Content-Type-Options", "nosniff");
  MHD_add_response_header(response, "Cache-Control", "no-store");
  MHD_add_response_header(response, "Referrer-Policy", "no-referrer");
  MHD_add_response_header(response, "Content-Security-Policy",
                          "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                          "img-src 'self' data:; frame-ancestors 'self'");
}

MHD_Result Send(MHD_Connection* connection, int status, const std::string& body,
                const std::string& content_type,
                const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  AddCommonHeaders(response);
  if (!content_type.empty())
    MHD_add_response_header(response, "Content-Type", content_type.c_str());
  for (const auto& [name, value] : headers) {
    MHD_add_response_header(response, name.c_str(), value.c_str());
  }
  const MHD_Result queued = MHD_queue_response(connection, static_cast<unsigned>(status), response);
  MHD_destroy_response(response);
  return queued;
}

MHD_Result Refuse(MHD_Connection* connection, int status, const std::string& why,
                  const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  return Send(connection, status, why + "\n", "text/plain; charset=utf-8", headers);
}

std::string Header(MHD_Connection* connection, const char* name) {
  const char* value = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, name);
  return value == nullptr ? std::string() : std::string(value);
}

// The token a browser sent in its cookie, as an Authorization header's value; empty if none.
std::string CookieToken(MHD_Connection* connection, const std::string& cookie) {
  for (absl::string_view part : absl::StrSplit(Header(connection, "Cookie"), ';')) {
    part = absl::StripAsciiWhitespace(part);
    if (absl::ConsumePrefix(&part, cookie) && absl::ConsumePrefix(&part, "=")) {
      return absl::StrCat("Bearer ", part);
    }
  }
  return "";
}

bool HasBody(MHD_Connection* connection) {
  const std::string length = Header(connection, "Content-Length");
  return !Header(connection, "Transfer-Encoding").empty() || (!length.empty() && length != "0");
}

// ?name=value pairs, decoded; the last value of a repeated name; "" for a name without '='.
std::map<std::string, std::string> Query(MHD_Connection* connection) {
  std::map<std::string, std::string> query;
  MHD_get_connection_values(
      connection, MHD_GET_ARGUMENT_KIND,
      [](void* cls, MHD_ValueKind, const char* key, const char* value) {
        (*static_cast<std::map<std::string, std::string>*>(cls))[key] =
            value == nullptr ? "" : value;
        return MHD_YES;
      },
      &query);
  return query;
}

absl::StatusOr<std::string> ReadPem(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--http: cannot read ", path));
  return text.str();
}

// The listening socket, bound and listening; MHD takes it over.
absl::StatusOr<int> Listen(const std::string& host, int port, int* bound, bool* ipv6) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
      rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http: cannot resolve ", host, ": ", gai_strerror(rc)));
  }
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
      sockaddr_storage local{};
      socklen_t size = sizeof(local);
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &size);
      *ipv6 = local.ss_family == AF_INET6;
      *bound = ntohs(*ipv6 ? reinterpret_cast<sockaddr_in6*>(&local)->sin6_port
                           : reinterpret_cast<sockaddr_in*>(&local)->sin_port);
      freeaddrinfo(found);
      return fd;
    }
    why = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(found);
  return absl::UnavailableError(
      absl::StrCat("--http: cannot listen on ", host, ":", port, " (", why, ")"));
}

// True when the other end of `fd` has closed or reset the connection.
bool PeerGone(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLRDHUP, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

void LogFromMhd(void*, const char* format, va_list args) {
  char line[512];
  std::vsnprintf(line, sizeof(line), format, args);
  absl::string_view text = absl::StripTrailingAsciiWhitespace(line);
  LogAt(LogLevel::kDebug, "http: {}", std::string(text));
}

}  // namespace

struct HttpServer::State {
  struct Route {
    std::regex pattern;
    std::function<Response(const Request&)> page;                    // or
    std::function<std::optional<EventSource>(const Request&)> open;  // an event stream
  };
  // One event stream: its source runs on a thread of its own (the pump) and leaves text here;
  // MHD's loop takes it when the socket can be written, and suspends the connection while
  // there is none, so a quiet stream costs neither the loop nor a busy wait.
  struct Stream {
    State* server = nullptr;
    MHD_Connection* connection = nullptr;
    int fd = -1;  // the connection's socket: MHD keeps it open while the stream is suspended
    EventSource source;
    std::mutex mu;
    std::string pending;
    bool ended = false;      // no more text: the source ended, the client stalled, or we stop
    bool suspended = false;  // MHD waits for a resume before it asks for text again
    bool released = false;   // MHD is done with the response (the connection is gone)
  };

  // A connection waiting for a request's head, since when (the reaper closes late ones).
  struct Waiting {
    int fd = -1;
    std::chrono::steady_clock::time_point since;
    bool waiting = true;
    bool reaped = false;
  };

  std::vector<Route> routes;
  const rpc::BearerToken* token = nullptr;
  bool check_host = false;
  bool secure_cookie = false;
  bool require_client_certificate = false;
  std::string cookie;
  size_t max_streams = 0;
  MHD_Daemon* daemon = nullptr;

  std::chrono::seconds head_timeout{30};
  std::mutex connections_mu;
  std::condition_variable reaper_wake;
  bool reaper_stop = false;
  std::map<MHD_Connection*, Waiting> connections;  // every open one
  std::thread reaper;

  std::mutex mu;
  std::condition_variable pumps_done;
  bool stopping = false;
  size_t open_streams = 0;    // from the 200 until MHD frees the response
  size_t pumps = 0;           // pump threads still running
  std::set<Stream*> streams;  // those MHD still holds, to be resumed at stop

  // MHD_OPTION_NOTIFY_CONNECTION: called before MHD closes the socket, so that the reaper,
  // under the same lock, never shuts down a descriptor a newer connection has been given.
  static void Connections(void* cls, MHD_Connection* connection, void**,
                          MHD_ConnectionNotificationCode code) {
    State& state = *static_cast<State*>(cls);
    std::lock_guard<std::mutex> lock(state.connections_mu);
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
      state.connections.erase(connection);
      return;
    }
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (info == nullptr) return;
    state.connections[connection] = {info->connect_fd, std::chrono::steady_clock::now()};
  }
  // Whether a request's head is awaited on `connection` (from now).
  void SetWaiting(MHD_Connection* connection, bool waiting) {
    std::lock_guard<std::mutex> lock(connections_mu);
    auto it = connections.find(connection);
    if (it == connections.end()) return;
    it->second.waiting = waiting;
    it->second.since = std::chrono::steady_clock::now();
  }
  static void Completed(void* cls, MHD_Connection* connection, void**, MHD_RequestTerminationCode) {
    static_cast<State*>(cls)->SetWaiting(connection, true);
  }
  void Reap() {
    std::unique_lock<std::mutex> lock(connections_mu);
    while (!reaper_wake.wait_for(lock, std::chrono::seconds(1), [this] { return reaper_stop; })) {
      const auto now = std::chrono::steady_clock::now();
      for (auto& [connection, entry] : connections) {
        if (entry.waiting && !entry.reaped && now - entry.since > head_timeout) {
          entry.reaped = true;
          shutdown(entry.fd, SHUT_RDWR);  // MHD sees the end and closes it as usual
        }
      }
    }
  }

  // MHD calls this once the headers are in, and again once the body is: the answer is given
  // at the second call, so that the connection can carry the next request. A request with a
  // body is answered at the first, which closes the connection unread: no route takes one.
  static MHD_Result Answer(void* cls, MHD_Connection* connection, const char* url,
                           const char* method, const char*, const char*, size_t* upload_size,
                           void** request_state) {
    static int headers_seen;
    if (*request_state == nullptr) {
      *request_state = &headers_seen;
      static_cast<State*>(cls)->SetWaiting(connection, false);
      if (!HasBody(connection)) return MHD_YES;
    }
    if (*upload_size != 0) *upload_size = 0;  // not reached: answered at the first call
    return static_cast<State*>(cls)->Handle(connection, url, method);
  }
  MHD_Result Handle(MHD_Connection* connection, const char* url, const char* method);
  MHD_Result Authorize(MHD_Connection* connection, const std::string& path, bool* handled);
  MHD_Result OpenStream(MHD_Connection* connection, const Route& route, const Request& request);
  static void Pump(std::shared_ptr<Stream> stream);
  static ssize_t ReadStream(void* cls, uint64_t, char* buf, size_t max);
  static void ReleaseStream(void* cls);
};

MHD_Result HttpServer::State::Authorize(MHD_Connection* connection, const std::string& path,
                                        bool* handled) {
  *handled = true;
  // A client certificate was asked for in the handshake: without one the CA signed, the
  // connection closes before anything is read, as gRPC's listener refuses it.
  if (require_client_certificate) {
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    unsigned int verdict = 0;
    if (info == nullptr ||
        gnutls_certificate_verify_peers2(static_cast<gnutls_session_t>(info->tls_session),
                                         &verdict) != GNUTLS_E_SUCCESS ||
        verdict != 0) {
      return MHD_NO;
    }
  }
  // Without a token, a loopback listener answers only requests addressed to a loopback name:
  // a page elsewhere cannot rebind its own name to 127.0.0.1 and read the view.
  if (check_host && !IsLoopbackHost(Header(connection, "Host"))) {
    return Refuse(connection, 421, "this view answers requests for localhost or 127.0.0.1 only");
  }
  if (token == nullptr) {
    *handled = false;
    return MHD_YES;
  }
  // A page opened with ?token=: the token becomes a cookie, and the address loses it.
  if (const char* given = MHD_lookup_connection_value(connection, MHD_GET_ARGUMENT_KIND, "token");
      given != nullptr && token->Refusal(absl::StrCat("Bearer ", given)).empty()) {
    if (!CookieSafe(given)) {
      return Refuse(connection, 400,
                    "this token has characters a cookie cannot carry: send it as "
                    "\"Authorization: Bearer TOKEN\"");
    }
    return Send(
        connection, 303, "", "",
        {{"Set-Cookie", absl::StrCat(cookie, "=", given, "; Path=/; HttpOnly; SameSite=Strict",
                                     secure_cookie ? "; Secure" : "")},
         {"Location", SameSiteRedirect(path)}});
  }
  std::string authorization = Header(connection, "Authorization");
  if (authorization.empty()) authorization = CookieToken(connection, cookie);
  const std::string why = token->Refusal(authorization);
  if (why.empty()) {
    *handled = false;
    return MHD_YES;
  }
  return Refuse(connection, 401, why + " (a browser: open the page once with ?token=TOKEN)",
                {{"WWW-Authenticate", "Bearer realm=\"rayaccel\""}});
}

MHD_Result HttpServer::State::Handle(MHD_Connection* connection, const char* url,
                                     const char* method) {
  const std::string path = url == nullptr ? "" : url;  // MHD has decoded it
  bool handled = false;
  const MHD_Result authorized = Authorize(connection, path, &handled);
  if (handled) return authorized;
  if (std::strcmp(method, "GET") != 0 && std::strcmp(method, "HEAD") != 0) {
    return Refuse(connection, 405, "this view answers GET and HEAD only", {{"Allow", "GET, HEAD"}});
  }
  for (const Route& route : routes) {
    std::smatch match;
    if (!std::regex_match(path, match, route.pattern)) continue;
    Request request;
    for (size_t i = 1; i < match.size(); ++i) request.captures.push_back(match[i].str());
    request.query = Query(connection);
    if (route.open) return OpenStream(connection, route, request);
    const Response answer = route.page(request);
    return Send(connection, answer.status, answer.body, answer.content_type);
  }
  return Refuse(connection, 404, "no such page");
}

MHD_Result HttpServer::State::OpenStream(MHD_Connection* connection, const Route& route,
                                         const Request& request) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (stopping) return Refuse(connection, 503, "stopping");
    // A stream's place is back once its pump has stopped too: no more threads than streams.
    if (open_streams >= max_streams || pumps >= max_streams) {
      return Refuse(connection, 503, absl::StrCat("already ", max_streams, " event streams open"));
    }
    ++open_streams;
  }
  std::optional<EventSource> source = route.open(request);
  if (!source.has_value()) {
    std::lock_guard<std::mutex> lock(mu);
    --open_streams;
    return Refuse(connection, 404, "no such stream");
  }
  auto stream = std::make_shared<Stream>();
  stream->server = this;
  stream->connection = connection;
  if (const MHD_ConnectionInfo* info =
          MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD)) {
    stream->fd = info->connect_fd;
  }
  stream->source = *std::move(source);
  {
    std::lock_guard<std::mutex> lock(mu);
    streams.insert(stream.get());
  }
  // From here ReleaseStream gives back the stream's place: MHD calls it when it is done with
  // the response (a response it could not queue included); one it could not create, we do.
  auto* held = new std::shared_ptr<Stream>(stream);
  MHD_Response* response = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, kStreamBlock,
                                                             &ReadStream, held, &ReleaseStream);
  if (response == nullptr) {
    ReleaseStream(held);
    return MHD_NO;
  }
  AddCommonHeaders(response);
  MHD_add_response_header(response, "Content-Type", "text/event-stream");
  const MHD_Result queued = MHD_queue_response(connection, 200, response);
  MHD_destroy_response(response);
  if (queued != MHD_YES) return queued;
  {
    std::lock_guard<std::mutex> lock(mu);
    ++pumps;
  }
  std::thread(&State::Pump, std::move(stream)).detach();
  return MHD_YES;
}

void HttpServer::State::Pump(std::shared_ptr<Stream> stream) {
  int idle = 0;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(stream->mu);
      if (stream->ended || stream->released) break;
    }
    const std::optional<std::string> event = stream->source(kEventWait);
    std::string text;
    if (event.has_value() && !event->empty()) {
      text = absl::StrCat("data: ", *event, "\n\n");
      idle = 0;
    } else if (event.has_value() && ++idle >= kKeepAliveEvery) {
      text = ": keep-alive\n\n";  // a comment: proxies and the browser see it is alive
      idle = 0;
    }
    std::lock_guard<std::mutex> lock(stream->mu);
    if (stream->released) break;
    stream->pending += text;
    // A client that takes nothing while events pile up is not reading: end its stream. One
    // that has gone is noticed here too: MHD does not look at a suspended connection.
    if (!event.has_value() || stream->pending.size() > kStreamBacklog ||
        (stream->suspended && PeerGone(stream->fd))) {
      stream->ended = true;
    }
    if (stream->suspended && (stream->ended || !text.empty())) {
      stream->suspended = false;
      MHD_resume_connection(stream->connection);
    }
  }
  State* server = stream->server;
  stream.reset();
  std::lock_guard<std::mutex> lock(server->mu);
  --server->pumps;
  server->pumps_done.notify_all();
}

ssize_t HttpServer::State::ReadStream(void* cls, uint64_t, char* buf, size_t max) {
  Stream& stream = **static_cast<std::shared_ptr<Stream>*>(cls);
  std::lock_guard<std::mutex> lock(stream.mu);
  if (!stream.pending.empty()) {
    const size_t n = std::min(max, stream.pending.size());
    std::memcpy(buf, stream.pending.data(), n);
    stream.pending.erase(0, n);
    return static_cast<ssize_t>(n);
  }
  if (stream.ended) return MHD_CONTENT_READER_END_OF_STREAM;
  stream.suspended = true;  // the pump resumes it with the next text
  MHD_suspend_connection(stream.connection);
  return 0;
}

void HttpServer::State::ReleaseStream(void* cls) {
  auto* held = static_cast<std::shared_ptr<Stream>*>(cls);
  Stream* stream = held->get();
  {
    std::lock_guard<std::mutex> lock(stream->server->mu);
    stream->server->streams.erase(stream);
    --stream->server->open_streams;
  }
  {
    std::lock_guard<std::mutex> lock(stream->mu);
    stream->released = true;
  }
  delete held;
}

uint64_t RaiseOpenFilesLimitFor(const HttpOptions& options) {
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0) return 0;
  const rlim_t wanted = options.max_connections + kReservedDescriptors;
  if (files.rlim_cur != RLIM_INFINITY && files.rlim_cur < wanted) {
    rlimit raised = files;
    raised.rlim_cur = files.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, files.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) files = raised;
  }
  return static_cast<uint64_t>(files.rlim_cur);
}

HttpServer::HttpServer() : state_(std::make_unique<State>()) {}

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
  std::string key, cert, client_ca;
  if (tls) {
    for (auto [path, into] :
         {std::pair{&options.tls_key_file, &key}, std::pair{&options.tls_cert_file, &cert},
          std::pair{&options.tls_client_ca_file, &client_ca}}) {
      if (path->empty()) continue;
      absl::StatusOr<std::string> pem = ReadPem(*path);
      if (!pem.ok()) return pem.status();
      *into = *std::move(pem);
    }
  }

  std::unique_ptr<HttpServer> out(new HttpServer());
  State& state = *out->state_;
  for (const auto& [pattern, page] : routes.pages)
    state.routes.push_back({std::regex(pattern), page, {}});
  for (const auto& [pattern, open] : routes.events)
    state.routes.push_back({std::regex(pattern), {}, open});
  state.token = options.token;
  state.check_host = options.token == nullptr && address->loopback;
  state.secure_cookie = tls;
  state.require_client_certificate = tls && !client_ca.empty();
  state.max_streams = options.max_event_streams;
  state.head_timeout = options.request_head_timeout;

  // As many connections as the descriptor limit leaves room for.
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  size_t max_connections = options.max_connections;
  if (files.rlim_cur != RLIM_INFINITY) {
    const size_t room = files.rlim_cur > kReservedDescriptors + 16
                            ? static_cast<size_t>(files.rlim_cur) - kReservedDescriptors
                            : 16;
    if (room < max_connections) {
      LogAt(LogLevel::kWarning,
            "http: {} connections at most (the open-files limit is {}; raise it for the {} "
            "wanted)",
            room, static_cast<uint64_t>(files.rlim_cur), max_connections);
      max_connections = room;
    }
  }
  max_connections = std::max<size_t>(max_connections, kLoopThreads);
  out->max_connections_ = max_connections;

  int bound = 0;
  bool ipv6 = false;
  absl::StatusOr<int> listener = Listen(host, port, &bound, &ipv6);
  if (!listener.ok()) return listener.status();
  state.cookie = TokenCookie(bound);

  unsigned int flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
  if (tls) flags |= MHD_USE_TLS;
  if (ipv6) flags |= MHD_USE_IPv6;
  std::vector<MHD_OptionItem> items = {
      {MHD_OPTION_LISTEN_SOCKET, *listener, nullptr},
      {MHD_OPTION_THREAD_POOL_SIZE, kLoopThreads, nullptr},
      {MHD_OPTION_CONNECTION_LIMIT, static_cast<intptr_t>(max_connections), nullptr},
      {MHD_OPTION_PER_IP_CONNECTION_LIMIT,
       static_cast<intptr_t>(std::min(options.max_connections_per_address, max_connections)),
       nullptr},
      {MHD_OPTION_CONNECTION_TIMEOUT, static_cast<intptr_t>(options.idle_timeout.count()), nullptr},
      {MHD_OPTION_CONNECTION_MEMORY_LIMIT, static_cast<intptr_t>(kConnectionMemory), nullptr},
      {MHD_OPTION_EXTERNAL_LOGGER, reinterpret_cast<intptr_t>(&LogFromMhd), nullptr},
      {MHD_OPTION_NOTIFY_CONNECTION, reinterpret_cast<intptr_t>(&State::Connections), &state},
      {MHD_OPTION_NOTIFY_COMPLETED, reinterpret_cast<intptr_t>(&State::Completed), &state},
  };
  if (tls) {
    items.push_back({MHD_OPTION_HTTPS_MEM_KEY, 0, key.data()});
    items.push_back({MHD_OPTION_HTTPS_MEM_CERT, 0, cert.data()});
    if (!client_ca.empty()) items.push_back({MHD_OPTION_HTTPS_MEM_TRUST, 0, client_ca.data()});
  }
  items.push_back({MHD_OPTION_END, 0, nullptr});
  state.daemon = MHD_start_daemon(flags, 0, nullptr, nullptr, &State::Answer, &state,
                                  MHD_OPTION_ARRAY, items.data(), MHD_OPTION_END);
  if (state.daemon == nullptr) {  // MHD has closed the listener, as it does at stop
    if (tls) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--http: cannot use the TLS certificate ", options.tls_cert_file, ", key ",
          options.tls_key_file, options.tls_client_ca_file.empty() ? "" : " and client CA ",
          options.tls_client_ca_file, " (unreadable, not PEM, or not a pair)"));
    }
    return absl::UnavailableError(absl::StrCat("--http: cannot serve on ", options.listen));
  }
  state.reaper = std::thread([&state] { state.Reap(); });
  out->tls_ = tls;
  out->address_ =
      absl::StrCat(host.find(':') == std::string::npos ? host : "[" + host + "]", ":", bound);
  return out;
}

HttpServer::~HttpServer() {
  State& state = *state_;
  if (state.daemon == nullptr) return;
  {
    // MHD must not be stopped with a connection suspended: every stream ends and is resumed.
    std::lock_guard<std::mutex> lock(state.mu);
    state.stopping = true;
    for (State::Stream* stream : state.streams) {
      std::lock_guard<std::mutex> stream_lock(stream->mu);
      stream->ended = true;
      if (stream->suspended) {
        stream->suspended = false;
        MHD_resume_connection(stream->connection);
      }
    }
  }
  MHD_stop_daemon(state.daemon);  // closes the listener and every connection
  {
    std::lock_guard<std::mutex> lock(state.connections_mu);
    state.reaper_stop = true;
  }
  state.reaper_wake.notify_all();
  state.reaper.join();
  std::unique_lock<std::mutex> lock(state.mu);
  state.pumps_done.wait(lock, [&state] { return state.pumps == 0; });
}

}  // namespace rayaccel::web
