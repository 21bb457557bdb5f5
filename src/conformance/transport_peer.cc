#include "conformance/transport_peer.h"

#include <fcntl.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "transport/table.h"

namespace rayaccel::conformance {

char PatternByte(size_t i, int seed) { return static_cast<char>((i * 131 + seed) ^ (i >> 9)); }

TransportOptions RoundTripOptions(const Options& o) {
  TransportOptions t;
  t.plugin = o.plugin_path;
  t.config = o.config;
  t.check_permissions = false;
  t.peer_timeout = absl::Seconds(std::max(1, o.timeout_seconds / 4));
  return t;
}

namespace {

constexpr size_t kGuard = 4096;
constexpr char kCanaryByte = '\xc5';

// `size` bytes between two PROT_NONE guard pages: a transfer that strays outside a region
// kills the process that serves it.
char* GuardedBuffer(size_t size) {
  const size_t inner = (size + kGuard - 1) / kGuard * kGuard;
  void* area =
      mmap(nullptr, inner + 2 * kGuard, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (area == MAP_FAILED) return nullptr;
  char* base = static_cast<char*>(area);
  mprotect(base, kGuard, PROT_NONE);
  mprotect(base + kGuard + inner, kGuard, PROT_NONE);
  return base + kGuard;
}

// The peer: serves a source and a target region (each between guard pages, with a canary
// page it never registers), checks the target when notified, and deregisters the source when
// asked. Runs in a forked child until killed.
[[noreturn]] void RoundTripPeer(const Options& o, Channel ch) {
  auto t = Transport::Open(RoundTripOptions(o));
  if (!t.ok()) {
    ch.Send("error " + std::string(t.status().message()));
    _exit(1);
  }
  char* source = GuardedBuffer(kRoundTripBytes);
  char* target = GuardedBuffer(kRoundTripBytes);
  char* canary = GuardedBuffer(kGuard);
  if (source == nullptr || target == nullptr || canary == nullptr) {
    ch.Send("error mmap failed");
    _exit(1);
  }
  for (size_t i = 0; i < kRoundTripBytes; ++i) source[i] = PatternByte(i, 1);
  std::memset(target, 0, kRoundTripBytes);
  std::memset(canary, kCanaryByte, kGuard);
  auto src = (*t)->Register(source, kRoundTripBytes);
  auto dst = (*t)->Register(target, kRoundTripBytes);
  if (!src.ok() || !dst.ok()) {
    ch.Send("error register: " + std::string((!src.ok() ? src : dst).status().message()));
    _exit(1);
  }
  ch.Send(absl::StrCat("ready ", absl::WebSafeBase64Escape((*t)->address()), " ",
                       absl::WebSafeBase64Escape(*(*t)->Describe(*src)), " ",
                       absl::WebSafeBase64Escape(*(*t)->Describe(*dst))));
  while (true) {
    std::string cmd = ch.Receive(120);
    if (cmd.empty()) _exit(0);
    if (cmd == "notified?") {
      auto got = (*t)->TakeNotifications(1, absl::Now() + absl::Seconds(5));
      bool landed = true;
      for (size_t i = 0; i < kRoundTripBytes; ++i)
        landed = landed && target[i] == PatternByte(i, 2);
      ch.Send(!got.ok() || got->empty() ? "no notification"
              : (*got)[0] != "landed"   ? "wrong notification " + (*got)[0]
              : landed                  ? "ok"
                                        : "the notification came before the data");
    } else if (cmd == "invalidate") {
      absl::Status s = (*t)->Deregister(*src);
      ch.Send(s.ok() ? "ok" : "error " + std::string(s.message()));
    } else if (cmd == "canary?") {
      bool intact = true;
      for (size_t i = 0; i < kGuard; ++i) intact = intact && canary[i] == kCanaryByte;
      ch.Send(intact ? "ok" : "changed");
    }
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Peer>> StartPeer(const Options& o) {
  int to_peer[2], from_peer[2];
  if (pipe2(to_peer, O_CLOEXEC) != 0 || pipe2(from_peer, O_CLOEXEC) != 0) {
    return absl::InternalError("suite: pipe failed");
  }
  pid_t pid = fork();
  if (pid == 0) RoundTripPeer(o, Channel{to_peer[0], from_peer[1], ""});
  close(to_peer[0]);
  close(from_peer[1]);
  auto peer = std::make_unique<Peer>();
  peer->pid = pid;
  peer->ch = Channel{from_peer[0], to_peer[1], ""};
  std::vector<std::string> ready = absl::StrSplit(peer->ch.Receive(10), ' ');
  if (ready.size() != 4 || ready[0] != "ready" ||
      !absl::WebSafeBase64Unescape(ready[1], &peer->address) ||
      !absl::WebSafeBase64Unescape(ready[2], &peer->src) ||
      !absl::WebSafeBase64Unescape(ready[3], &peer->dst)) {
    return absl::InternalError("the peer process did not open an endpoint: " +
                               absl::StrJoin(ready, " "));
  }
  return peer;
}

absl::Status WaitFor(absl::StatusOr<Request> r, absl::Duration limit) {
  return r.ok() ? r->Wait(absl::Now() + limit) : r.status();
}

Outcome FailStep(const std::string& step, const absl::Status& s) {
  return Outcome::Fail(absl::StrCat(step, ": ", s.ToString()));
}

Outcome WithPeer(
    const Options& o,
    const std::function<Outcome(Peer&, Transport&, std::vector<char>&, uint64_t)>& body) {
  return RunIn(o, [&](const LoadedPlugin& p) {
    if ((p.api().capabilities & RAYACCEL_CAP_TRANSPORT) == 0) {
      return Outcome::Skip("RAYACCEL_CAP_TRANSPORT not claimed");
    }
    absl::StatusOr<rayaccel_transport_api> table = transport::TransportTable(p);
    if (!table.ok()) return Outcome::Fail(std::string(table.status().message()));
    absl::StatusOr<std::unique_ptr<Peer>> peer = StartPeer(o);
    if (!peer.ok()) return Outcome::Fail(std::string(peer.status().message()));
    std::vector<char> local(kRoundTripBytes, 0);  // outlives the endpoint that registers it
    auto t = Transport::Open(RoundTripOptions(o));
    if (!t.ok()) return FailStep("open_endpoint", t.status());
    auto mine = (*t)->Register(local.data(), local.size());
    if (!mine.ok()) return FailStep("register_memory", mine.status());
    return body(**peer, **t, local, *mine);
  });
}

}  // namespace rayaccel::conformance
