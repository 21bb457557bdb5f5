// The web front's connection handling over real loopback sockets: keep-alive, methods, request
// bodies, the limits on connections (in all and per client address), the idle timeout, and
// event streams that wait, stall, or are open when the server stops.
#include "web/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace rayaccel::web {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class Socket {
 public:
  // Connects to 127.0.0.1:port from `source` (any address in 127/8 is this host's).
  Socket(int port, const char* source = "127.0.0.1") {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    inet_pton(AF_INET, source, &from.sin_addr);
    bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof(from));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0;
  }
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  Socket(Socket&& other) noexcept : fd_(other.fd_), connected_(other.connected_) { other.fd_ = -1; }

  bool connected() const { return connected_; }
  void Send(const std::string& data) {
    ASSERT_EQ(send(fd_, data.data(), data.size(), MSG_NOSIGNAL), static_cast<ssize_t>(data.size()));
  }
  // What arrives within `wait` (until `until` is in it, or the peer closes).
  std::string Receive(milliseconds wait, const std::string& until = "") {
    std::string got;
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (!closed_) {
      const auto left =
          std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      char buf[4096];
      const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      got.append(buf, static_cast<size_t>(n));
      if (!until.empty() && got.find(until) != std::string::npos) break;
    }
    return got;
  }
  // True once the server has closed this connection (within `wait`).
  bool ClosedWithin(milliseconds wait) {
    Receive(wait);
    return closed_;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
};

std::string Get(const std::string& path, const std::string& extra = "") {
  return absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\n", extra, "\r\n");
}

int PortOf(const HttpServer& server) {
  int port = 0;
  EXPECT_TRUE(absl::SimpleAtoi(server.address().substr(server.address().rfind(':') + 1), &port));
  return port;
}

// One whole answer's status line on a fresh connection from `source`; "" when none came.
std::string StatusLine(int port, const std::string& path, const char* source = "127.0.0.1") {
  Socket s(port, source);
  if (!s.connected()) return "";
  s.Send(Get(path, "Connection: close\r\n"));
  std::string answer = s.Receive(seconds(10));
  return answer.substr(0, answer.find("\r\n"));
}

Routes PageRoutes() {
  Routes routes;
  routes.pages["/hello"] = [](const Request&) { return Response{"text/plain", "hello\n"}; };
  routes.pages["/item/([0-9]+)"] = [](const Request& request) {
    return Response{"text/plain", absl::StrCat("item ", request.captures.at(0), "\n")};
  };
  return routes;
}

std::unique_ptr<HttpServer> StartServer(const HttpOptions& options, const Routes& routes) {
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(options, routes);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

HttpOptions Loopback() {
  HttpOptions options;
  options.listen = "tcp://127.0.0.1:0";
  return options;
}

TEST(HttpServer, AnswersRequestsOneAfterAnotherOnAKeptAliveConnection) {
  auto server = StartServer(Loopback(), PageRoutes());
  ASSERT_NE(server, nullptr);
  Socket s(PortOf(*server));
  s.Send(Get("/hello"));
  EXPECT_NE(s.Receive(seconds(10), "hello\n").find("HTTP/1.1 200"), std::string::npos);
  s.Send(Get("/item/42"));
  std::string second = s.Receive(seconds(10), "item 42\n");
  EXPECT_NE(second.find("HTTP/1.1 200"), std::string::npos) << second;
  EXPECT_NE(second.find("X-Content-Type-Options: nosniff"), std::string::npos) << second;
  s.Send(Get("/nothing-here"));
  EXPECT_NE(s.Receive(seconds(10), "no such page\n").find("HTTP/1.1 404"), std::string::npos);
}

TEST(HttpServer, AnswersGetAndHeadOnly) {
  auto server = StartServer(Loopback(), PageRoutes());
  ASSERT_NE(server, nullptr);
  Socket s(PortOf(*server));
  s.Send("DELETE /hello HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  const std::string answer = s.Receive(seconds(10), "GET and HEAD only\n");
  EXPECT_NE(answer.find("HTTP/1.1 405"), std::string::npos) << answer;
  EXPECT_NE(answer.find("Allow: GET, HEAD"), std::string::npos) << answer;
  Socket head(PortOf(*server));
  head.Send("HEAD /hello HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  const std::string headers = head.Receive(seconds(10));
  EXPECT_NE(headers.find("HTTP/1.1 200"), std::string::npos) << headers;
  EXPECT_EQ(headers.find("hello\n"), std::string::npos) << headers;
}

TEST(HttpServer, ARequestBodyIsNeverReadTheAnswerComesAtOnceAndTheConnectionCloses) {
  auto server = StartServer(Loopback(), PageRoutes());
  ASSERT_NE(server, nullptr);
  Socket s(PortOf(*server));
  s.Send(Get("/hello", "Content-Length: 1000000000\r\n"));  // and not one byte of it
  const std::string answer = s.Receive(seconds(10), "hello\n");
  EXPECT_NE(answer.find("HTTP/1.1 200"), std::string::npos) << answer;
  EXPECT_TRUE(s.ClosedWithin(seconds(10)));
}

TEST(HttpServer, AHeadTooLargeIsRefusedNotBuffered) {
  auto server = StartServer(Loopback(), PageRoutes());
  ASSERT_NE(server, nullptr);
  Socket big_header(PortOf(*server));
  big_header.Send(Get("/hello", absl::StrCat("X-Big: ", std::string(40000, 'a'), "\r\n")));
  EXPECT_EQ(big_header.Receive(seconds(10), "\r\n").substr(0, 12), "HTTP/1.1 431");
  Socket long_line(PortOf(*server));
  long_line.Send(Get(absl::StrCat("/", std::string(40000, 'a'))));
  EXPECT_EQ(long_line.Receive(seconds(10), "\r\n").substr(0, 12), "HTTP/1.1 414");
}

TEST(HttpServer, OneClientAddressCannotTakeEveryConnection) {
  HttpOptions options = Loopback();
  options.max_connections = 64;
  options.max_connections_per_address = 4;
  auto server = StartServer(options, PageRoutes());
  ASSERT_NE(server, nullptr);
  const int port = PortOf(*server);
  std::vector<Socket> idle;
  for (int i = 0; i < 4; ++i) idle.emplace_back(port, "127.0.0.2");
  // The kernel completes the handshake; the server closes what is over the address's limit.
  Socket over(port, "127.0.0.2");
  EXPECT_TRUE(over.ClosedWithin(seconds(10)));
  EXPECT_EQ(StatusLine(port, "/hello", "127.0.0.3"), "HTTP/1.1 200 OK");
  for (Socket& s : idle) EXPECT_FALSE(s.ClosedWithin(milliseconds(10)));
  idle.clear();
  // Its places come back once its connections close.
  std::string again;
  for (int i = 0; i < 100 && again.empty(); ++i) {
    again = StatusLine(port, "/hello", "127.0.0.2");
    if (again.empty()) std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_EQ(again, "HTTP/1.1 200 OK");
}

TEST(HttpServer, ConnectionsOverTheLimitWaitUntilOneCloses) {
  HttpOptions options = Loopback();
  options.max_connections = 8;
  auto server = StartServer(options, PageRoutes());
  ASSERT_NE(server, nullptr);
  const int port = PortOf(*server);
  std::vector<Socket> idle;
  for (int i = 0; i < 8; ++i) idle.emplace_back(port);
  std::this_thread::sleep_for(milliseconds(200));
  // The ninth waits in the listener's queue, unread: the server holds no more than its limit.
  Socket waiting(port);
  waiting.Send(Get("/hello"));
  EXPECT_EQ(waiting.Receive(milliseconds(1000)), "");
  idle.clear();
  EXPECT_NE(waiting.Receive(seconds(10), "hello\n").find("HTTP/1.1 200"), std::string::npos);
}

TEST(HttpServer, AConnectionThatSendsNothingIsClosedAfterTheIdleTimeout) {
  HttpOptions options = Loopback();
  options.idle_timeout = seconds(1);
  auto server = StartServer(options, PageRoutes());
  ASSERT_NE(server, nullptr);
  Socket silent(PortOf(*server));
  EXPECT_TRUE(silent.ClosedWithin(seconds(10)));
  Socket slow(PortOf(*server));
  slow.Send("GET /hello HTTP/1.1\r\n");  // and then nothing
  EXPECT_TRUE(slow.ClosedWithin(seconds(10)));
}

TEST(HttpServer, AClientTricklingARequestHeadIsClosedAtTheDeadline) {
  HttpOptions options = Loopback();
  options.request_head_timeout = seconds(1);
  auto server = StartServer(options, PageRoutes());
  ASSERT_NE(server, nullptr);
  Socket trickle(PortOf(*server));
  trickle.Send("GET /hello HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ");
  bool closed = false;
  for (int i = 0; i < 100 && !closed; ++i) {  // a byte every 100 ms: never idle, never done
    trickle.Send("a");
    closed = trickle.ClosedWithin(milliseconds(100));
  }
  EXPECT_TRUE(closed);
  // A client that sends its requests whole is served on, however long it stays.
  Socket steady(PortOf(*server));
  for (int i = 0; i < 3; ++i) {
    steady.Send(Get("/hello"));
    EXPECT_NE(steady.Receive(seconds(10), "hello\n").find("HTTP/1.1 200"), std::string::npos);
    std::this_thread::sleep_for(milliseconds(600));
  }
}

// An event source that has nothing to say: each call waits as long as it is allowed to.
struct QuietSources {
  std::atomic<int> running{0};
  Routes routes() {
    Routes r = PageRoutes();
    r.events["/events"] = [this](const Request&) -> std::optional<EventSource> {
      auto first = std::make_shared<bool>(true);
      return EventSource([this, first](milliseconds wait) -> std::optional<std::string> {
        if (*first) {
          *first = false;
          return std::string("{\"first\":true}");
        }
        ++running;
        std::this_thread::sleep_for(wait);
        --running;
        return std::string();
      });
    };
    return r;
  }
};

TEST(HttpServer, StopsWhileStreamsWaitAndNoSourceRunsAfterIt) {
  QuietSources sources;
  auto server = StartServer(Loopback(), sources.routes());
  ASSERT_NE(server, nullptr);
  std::vector<Socket> streams;
  for (int i = 0; i < 3; ++i) {
    streams.emplace_back(PortOf(*server));
    streams.back().Send(Get("/events"));
    EXPECT_NE(streams.back().Receive(seconds(10), "\n\n").find("data: {\"first\":true}"),
              std::string::npos);
  }
  // Every stream is suspended now, waiting for its next event.
  EXPECT_EQ(StatusLine(PortOf(*server), "/hello"), "HTTP/1.1 200 OK");
  server.reset();
  EXPECT_EQ(sources.running.load(), 0);
  for (Socket& s : streams) EXPECT_TRUE(s.ClosedWithin(seconds(10)));
}

TEST(HttpServer, AClosedStreamGivesBackItsPlaceBeforeItsNextEvent) {
  QuietSources sources;
  HttpOptions options = Loopback();
  options.max_event_streams = 1;
  auto server = StartServer(options, sources.routes());
  ASSERT_NE(server, nullptr);
  const int port = PortOf(*server);
  {
    Socket first(port);
    first.Send(Get("/events"));
    ASSERT_NE(first.Receive(seconds(10), "\n\n").find("data: "), std::string::npos);
  }  // closed while the stream waits, suspended, for an event that does not come
  // Noticed at the source's next wait, long before a keep-alive comment (15 s) would be sent.
  std::string reopened;
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (reopened.find("data: ") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    Socket s(port);
    s.Send(Get("/events"));
    reopened = s.Receive(seconds(2), "\n\n");
  }
  EXPECT_NE(reopened.find("HTTP/1.1 200"), std::string::npos) << reopened;
}

TEST(HttpServer, AStreamWhoseClientReadsNothingEndsAndGivesBackItsPlace) {
  HttpOptions options = Loopback();
  options.max_event_streams = 1;
  options.idle_timeout = seconds(1);
  Routes routes = PageRoutes();
  const std::string big(16 * 1024, 'x');
  routes.events["/events"] = [&big](const Request&) -> std::optional<EventSource> {
    // Events faster than a client that reads nothing takes them, once the sockets' buffers
    // are full.
    return EventSource([&big](milliseconds) -> std::optional<std::string> {
      std::this_thread::sleep_for(milliseconds(5));
      return big;
    });
  };
  auto server = StartServer(options, routes);
  ASSERT_NE(server, nullptr);
  const int port = PortOf(*server);
  Socket stalled(port);
  stalled.Send(Get("/events"));  // and never reads
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_EQ(StatusLine(port, "/events"), "HTTP/1.1 503 Service Unavailable");
  std::string reopened;
  for (int i = 0; i < 300 && reopened.find(" 200 ") == std::string::npos; ++i) {
    std::this_thread::sleep_for(milliseconds(100));
    Socket s(port);
    s.Send(Get("/events"));
    reopened = s.Receive(seconds(10), "\r\n");
  }
  EXPECT_NE(reopened.find("HTTP/1.1 200"), std::string::npos) << reopened;
}

}  // namespace
}  // namespace rayaccel::web
