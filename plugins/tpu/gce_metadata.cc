#include "tpu/gce_metadata.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace rayaccel::tpu {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxResponse = 64 * 1024;

struct Url {
  std::string host, port = "80", path;
};

bool ParseUrl(const std::string& url, Url* out) {
  const std::string scheme = "http://";
  if (url.compare(0, scheme.size(), scheme) != 0) return false;
  std::string rest = url.substr(scheme.size());
  size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  out->path = slash == std::string::npos ? "/" : rest.substr(slash);
  if (!authority.empty() && authority[0] == '[') {  // [v6]:port
    size_t close = authority.find(']');
    if (close == std::string::npos) return false;
    out->host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return false;
      out->port = authority.substr(close + 2);
    }
  } else {
    size_t colon = authority.rfind(':');
    out->host = authority.substr(0, colon);
    if (colon != std::string::npos) out->port = authority.substr(colon + 1);
  }
  if (out->host == "metadata.google.internal") out->host = "169.254.169.254";
  return !out->host.empty() && !out->port.empty();
}

int MillisLeft(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(left.count());
}

// Connects without blocking past the deadline; -1 with `error` set on failure.
int ConnectBefore(const Url& url, Clock::time_point deadline, std::string* error) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(url.host.c_str(), url.port.c_str(), &hints, &found); rc != 0) {
    *error = std::string("cannot resolve ") + url.host + ": " + gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  *error = "cannot connect to " + url.host + ":" + url.port;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      *error += std::string(": ") + std::strerror(errno);
      close(fd);
      fd = -1;
      continue;
    }
    pollfd p{fd, POLLOUT, 0};
    int soerr = 0;
    socklen_t len = sizeof(soerr);
    int ready;
    while ((ready = poll(&p, 1, MillisLeft(deadline))) < 0 && errno == EINTR) {
    }
    if (ready <= 0) {
      *error += ": timed out";
      close(fd);
      fd = -1;
    } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0 || soerr != 0) {
      *error += std::string(": ") + std::strerror(soerr);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  return fd;
}

// Whether `response` holds its headers and all the body its Content-Length announces.
bool AnswerComplete(const std::string& response) {
  size_t head_end = response.find("\r\n\r\n");
  if (head_end == std::string::npos) return false;
  std::string head = response.substr(0, head_end);
  for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t at = head.find("\r\ncontent-length:");
  if (at == std::string::npos) return false;
  return response.size() - head_end - 4 >= std::strtoull(head.c_str() + at + 17, nullptr, 10);
}

}  // namespace

MetadataAnswer GetMetadata(const std::string& base_url, const std::string& key,
                           std::chrono::milliseconds timeout) {
  MetadataAnswer answer;
  Url url;
  if (!ParseUrl(base_url, &url)) {
    answer.error = "not an http:// URL: " + base_url;
    return answer;
  }
  Clock::time_point deadline = Clock::now() + timeout;
  int fd = ConnectBefore(url, deadline, &answer.error);
  if (fd < 0) return answer;
  std::string host = url.host.find(':') != std::string::npos ? "[" + url.host + "]" : url.host;
  std::string request = "GET " + url.path + key + " HTTP/1.0\r\nHost: " + host +
                        "\r\nMetadata-Flavor: Google\r\nConnection: close\r\n\r\n";
  std::string response;
  size_t sent = 0;
  bool timed_out = false;
  while (true) {
    pollfd p{fd, static_cast<short>(sent < request.size() ? POLLOUT : POLLIN), 0};
    int left = MillisLeft(deadline);
    int ready = left == 0 ? 0 : poll(&p, 1, left);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      timed_out = true;
      break;
    }
    if (sent < request.size()) {
      ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
      continue;
    }
    char chunk[4096];
    ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
    if (n <= 0) break;  // the server closed: the answer is complete (or cut short)
    response.append(chunk, static_cast<size_t>(n));
    if (AnswerComplete(response)) break;  // a server may keep the connection open
    if (response.size() > kMaxResponse) {
      close(fd);
      answer.error = "answer larger than 64 KiB";
      return answer;
    }
  }
  close(fd);
  if (timed_out) {
    answer.error = "no complete answer within " + std::to_string(timeout.count()) + " ms";
    return answer;
  }
  size_t head_end = response.find("\r\n\r\n");
  if (response.compare(0, 7, "HTTP/1.") != 0 || response.size() < 12 ||
      head_end == std::string::npos) {
    answer.error = "not an HTTP answer";
    return answer;
  }
  std::string status = response.substr(9, 3);
  answer.http_status = std::atoi(status.c_str());
  if (status != "200") {
    answer.error = "HTTP " + status;
    return answer;
  }
  std::string head = response.substr(0, head_end);
  std::string body = response.substr(head_end + 4);
  for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t length_at = head.find("\r\ncontent-length:");
  if (length_at != std::string::npos) {
    unsigned long long want = std::strtoull(head.c_str() + length_at + 17, nullptr, 10);
    if (body.size() < want) {
      answer.http_status = 0;  // a server that cuts answers short is not to be asked again
      answer.error = "answer cut short (" + std::to_string(body.size()) + " of " +
                     std::to_string(want) + " bytes)";
      return answer;
    }
    body.resize(static_cast<size_t>(want));
  }
  if (body.empty()) {
    answer.error = "empty answer";
    return answer;
  }
  answer.value = body;
  return answer;
}

}  // namespace rayaccel::tpu
