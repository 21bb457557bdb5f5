// The other process of the transport checks: a peer forked from the check's child, with its
// own endpoint of the plugin, told what to do over a pipe pair. Internal to the suite.
#ifndef RAYACCEL_CONFORMANCE_TRANSPORT_PEER_H_
#define RAYACCEL_CONFORMANCE_TRANSPORT_PEER_H_

#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "conformance/check_support.h"
#include "rayaccel/transport.h"

namespace rayaccel::conformance {

// Line-based messages between the check and its peer process over a pipe pair.
struct Channel {
  int in = -1, out = -1;
  bool Send(const std::string& line) {
    WriteAll(out, line + "\n");
    return true;
  }
  // The next line, or "" after `seconds` or when the other side is gone.
  std::string Receive(int seconds = 5) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (buffer.find('\n') == std::string::npos) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{in, POLLIN, 0};
      if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) return "";
      char chunk[4096];
      ssize_t n = read(in, chunk, sizeof(chunk));
      if (n <= 0) return "";
      buffer.append(chunk, static_cast<size_t>(n));
    }
    std::string line = buffer.substr(0, buffer.find('\n'));
    buffer.erase(0, line.size() + 1);
    return line;
  }
  std::string buffer;
};

constexpr size_t kRoundTripBytes = 1 << 20;

// The bytes of a test pattern: `seed` tells one pattern from another.
char PatternByte(size_t i, int seed);

// The endpoint options of every process of a transport check: the peer timeout a quarter of
// the check's (at least 1 s).
TransportOptions RoundTripOptions(const Options& o);

// A round-trip peer in a forked child, and what it published.
struct Peer {
  pid_t pid = -1;
  Channel ch;
  std::string address, src, dst;
  bool Alive() const { return pid > 0 && waitpid(pid, nullptr, WNOHANG) == 0; }
  void Kill() {
    if (pid <= 0) return;
    kill(pid, SIGCONT);
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    pid = -1;
  }
  ~Peer() {
    Kill();
    close(ch.in);
    close(ch.out);
  }
};

// Starts the peer; returns why not on failure.
absl::StatusOr<std::unique_ptr<Peer>> StartPeer(const Options& o);

absl::Status WaitFor(absl::StatusOr<Request> r, absl::Duration limit = absl::Seconds(5));

Outcome FailStep(const std::string& step, const absl::Status& s);

// Runs `body` for a plugin that claims a usable transport, with a peer process serving.
Outcome WithPeer(
    const Options& o,
    const std::function<Outcome(Peer&, Transport&, std::vector<char>&, uint64_t)>& body);

}  // namespace rayaccel::conformance

#endif  // RAYACCEL_CONFORMANCE_TRANSPORT_PEER_H_
