// The transport on the plugin's device memory, where it offers any: within one process's two
// endpoints, and between two processes.
#include <fcntl.h>

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "conformance/checks.h"
#include "conformance/transport_peer.h"

namespace rayaccel::conformance {
namespace {

// Runs `body` with the plugin's first device, for a plugin that claims a transport.
Outcome WithFirstDevice(const Options& o, const std::function<Outcome(uint32_t device)>& body) {
  return RunIn(o, [&](const LoadedPlugin& p) {
    if ((p.api().capabilities & RAYACCEL_CAP_TRANSPORT) == 0) {
      return Outcome::Skip("RAYACCEL_CAP_TRANSPORT not claimed");
    }
    Discovery d = Discover(p, false, false, false);
    if (!d.error.empty()) return Outcome::Fail(d.error);
    if (d.report.devices.empty()) return Outcome::Skip("no devices");
    return body(d.report.devices[0].index);
  });
}

}  // namespace

// --- transport.device_memory: the round trip on the plugin's device memory, where it offers any.
//
// Two endpoints of the plugin: bytes written from host memory into device memory, read back,
// copied from one device region into another and read back again; the owner's bounds and
// invalidation hold for device regions too. The suite never touches device memory itself.

Outcome DeviceMemory(const Options& o) {
  return WithFirstDevice(o, [&](uint32_t device) {
    auto a = Transport::Open(RoundTripOptions(o));
    auto b = Transport::Open(RoundTripOptions(o));
    if (!a.ok() || !b.ok()) return FailStep("open_endpoint", (!a.ok() ? a : b).status());
    auto owner = (*a)->Allocate(kRoundTripBytes, MemoryKind::kDevice, device);
    if (absl::IsUnimplemented(owner.status())) {
      return Outcome::Skip(absl::StrCat("no device memory: ", owner.status().message()));
    }
    if (!owner.ok()) return FailStep("register_memory (device, allocated)", owner.status());
    auto copy = (*b)->Allocate(kRoundTripBytes, MemoryKind::kDevice, device);
    if (!copy.ok()) return FailStep("register_memory (device, allocated)", copy.status());
    std::vector<char> host(kRoundTripBytes), back(kRoundTripBytes);  // outlive the endpoints
    for (size_t i = 0; i < host.size(); ++i) host[i] = PatternByte(i, 3);
    auto host_region = (*b)->Register(host.data(), host.size());
    auto back_region = (*a)->Register(back.data(), back.size());
    if (!host_region.ok() || !back_region.ok()) {
      return FailStep("register_memory (host)",
                      (!host_region.ok() ? host_region : back_region).status());
    }
    auto ab = (*b)->Connect((*a)->address());
    auto ba = (*a)->Connect((*b)->address());
    if (!ab.ok() || !ba.ok()) return FailStep("connect", (!ab.ok() ? ab : ba).status());
    const std::string owner_desc = *(*a)->Describe(owner->region);
    const std::string copy_desc = *(*b)->Describe(copy->region);
    // host (b) -> device (a); device (a) -> device (b); device (b) -> host (a).
    if (absl::Status s = WaitFor((*b)->Write(*ab, *host_region, 0, owner_desc, 0, kRoundTripBytes));
        !s.ok()) {
      return FailStep("write into device memory", s);
    }
    if (absl::Status s = WaitFor((*b)->Read(*ab, copy->region, 0, owner_desc, 0, kRoundTripBytes));
        !s.ok()) {
      return FailStep("read device memory into device memory", s);
    }
    if (absl::Status s = WaitFor((*a)->Read(*ba, *back_region, 0, copy_desc, 0, kRoundTripBytes));
        !s.ok()) {
      return FailStep("read device memory into host memory", s);
    }
    for (size_t i = 0; i < back.size(); ++i) {
      if (back[i] != host[i]) {
        return Outcome::Fail(
            absl::StrCat("byte ", i, " differs after host -> device -> device -> host"));
      }
    }
    absl::Status past = WaitFor((*b)->Read(*ab, copy->region, 0, owner_desc, 1, kRoundTripBytes));
    if (!absl::IsInvalidArgument(past)) {
      return FailStep("a read past a device region's end must be refused", past);
    }
    if (absl::Status s = (*a)->Deregister(owner->region); !s.ok()) {
      return FailStep("deregister_memory (device)", s);
    }
    absl::Status stale = WaitFor((*b)->Read(*ab, copy->region, 0, owner_desc, 0, 16));
    if (!IsStale(stale)) {
      return FailStep("a read of a deregistered device region must fail STALE", stale);
    }
    return Outcome::Pass(absl::StrCat("device ", device,
                                      ": host to device, device to device, device to host; "
                                      "bounds and invalidation"));
  });
}

// --- transport.device_two_process: another process's device memory, both ways.
//
// A peer process allocates a region of the plugin's first device; this one writes into it from
// host memory and from device memory of its own and reads it back into both, so that whatever
// path the plugin takes (its fabric, its driver's IPC, staging) carries the bytes between two
// processes. Then the owner's bounds, and its deregistration, which must finish within the
// peer timeout even while this process maps the region, and leave it STALE.

namespace {

// The device peer: one allocated device region; deregisters it when asked ("invalidate").
[[noreturn]] void DevicePeer(const Options& o, uint32_t device, Channel ch) {
  auto t = Transport::Open(RoundTripOptions(o));
  if (!t.ok()) {
    ch.Send("error " + std::string(t.status().message()));
    _exit(1);
  }
  auto region = (*t)->Allocate(kRoundTripBytes, MemoryKind::kDevice, device);
  if (!region.ok()) {
    ch.Send(absl::StrCat(absl::IsUnimplemented(region.status()) ? "unsupported " : "error ",
                         region.status().message()));
    _exit(1);
  }
  ch.Send(absl::StrCat("ready ", absl::WebSafeBase64Escape((*t)->address()), " ",
                       absl::WebSafeBase64Escape(*(*t)->Describe(region->region))));
  while (true) {
    std::string cmd = ch.Receive(120);
    if (cmd.empty()) _exit(0);
    if (cmd == "invalidate") {
      absl::Status s = (*t)->Deregister(region->region);
      ch.Send(s.ok() ? "ok" : "error " + std::string(s.message()));
    }
  }
}

}  // namespace

Outcome DeviceMemoryBetweenProcesses(const Options& o) {
  return WithFirstDevice(o, [&](uint32_t device) {
    // The peer is forked before this process touches the device (a driver may not survive a
    // fork after its initialization).
    int to_peer[2], from_peer[2];
    if (pipe2(to_peer, O_CLOEXEC) != 0 || pipe2(from_peer, O_CLOEXEC) != 0) {
      return Outcome::Fail("suite: pipe failed");
    }
    pid_t pid = fork();
    if (pid == 0) DevicePeer(o, device, Channel{to_peer[0], from_peer[1], ""});
    close(to_peer[0]);
    close(from_peer[1]);
    Peer peer;
    peer.pid = pid;
    peer.ch = Channel{from_peer[0], to_peer[1], ""};
    const std::string hello = peer.ch.Receive(10);
    if (absl::StartsWith(hello, "unsupported ")) {
      return Outcome::Skip("no device memory: " + hello.substr(12));
    }
    std::vector<std::string> ready = absl::StrSplit(hello, ' ');
    if (ready.size() != 3 || ready[0] != "ready" ||
        !absl::WebSafeBase64Unescape(ready[1], &peer.address) ||
        !absl::WebSafeBase64Unescape(ready[2], &peer.src)) {
      return Outcome::Fail("the peer process did not allocate device memory: " + hello);
    }
    const std::string& theirs = peer.src;
    auto t = Transport::Open(RoundTripOptions(o));
    if (!t.ok()) return FailStep("open_endpoint", t.status());
    auto mine = (*t)->Allocate(kRoundTripBytes, MemoryKind::kDevice, device);
    if (!mine.ok()) return FailStep("register_memory (device, allocated)", mine.status());
    std::vector<char> pattern(kRoundTripBytes), zeros(kRoundTripBytes, 0), back(kRoundTripBytes);
    for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = PatternByte(i, 5);
    auto pattern_region = (*t)->Register(pattern.data(), pattern.size());
    auto zeros_region = (*t)->Register(zeros.data(), zeros.size());
    auto back_region = (*t)->Register(back.data(), back.size());
    if (!pattern_region.ok() || !zeros_region.ok() || !back_region.ok()) {
      return FailStep("register_memory (host)", !pattern_region.ok() ? pattern_region.status()
                                                : !zeros_region.ok() ? zeros_region.status()
                                                                     : back_region.status());
    }
    auto conn = (*t)->Connect(peer.address);
    if (!conn.ok()) return FailStep("connect", conn.status());
    std::vector<std::string> paths;
    // One transfer of the whole region; its path is kept for the verdict.
    auto move = [&](bool write, uint64_t local, const std::string& step) -> absl::Status {
      absl::StatusOr<Request> r = write ? (*t)->Write(*conn, local, 0, theirs, 0, kRoundTripBytes)
                                        : (*t)->Read(*conn, local, 0, theirs, 0, kRoundTripBytes);
      if (!r.ok()) return r.status();
      const TransferPath path = r->path();
      absl::Status s = WaitFor(std::move(r));
      if (s.ok()) paths.push_back(absl::StrCat(step, " ", TransferPathName(path)));
      return s;
    };
    auto expect = [&](const std::vector<char>& want, const std::string& after) -> Outcome {
      std::fill(back.begin(), back.end(), '\x5a');
      if (absl::Status s = move(false, *back_region, "device to host"); !s.ok()) {
        return FailStep("read the peer's device memory into host memory", s);
      }
      for (size_t i = 0; i < back.size(); ++i) {
        if (back[i] != want[i]) {
          return Outcome::Fail(
              absl::StrCat("byte ", i, " of the peer's device memory differs ", after));
        }
      }
      return Outcome::Pass();
    };
    if (absl::Status s = move(true, *pattern_region, "host to device"); !s.ok()) {
      return FailStep("write host memory into the peer's device memory", s);
    }
    if (Outcome r = expect(pattern, "after a write from host memory");
        r.status != Outcome::Status::kPass)
      return r;
    if (absl::Status s = move(false, mine->region, "device to device"); !s.ok()) {
      return FailStep("read the peer's device memory into device memory", s);
    }
    if (absl::Status s = move(true, *zeros_region, "host to device"); !s.ok()) {
      return FailStep("write host memory into the peer's device memory", s);
    }
    if (Outcome r = expect(zeros, "after a write of zeros"); r.status != Outcome::Status::kPass)
      return r;
    if (absl::Status s = move(true, mine->region, "device to device"); !s.ok()) {
      return FailStep("write device memory into the peer's device memory", s);
    }
    if (Outcome r = expect(pattern, "after a write from device memory (read from it before)");
        r.status != Outcome::Status::kPass) {
      return r;
    }
    absl::Status past = WaitFor((*t)->Read(*conn, mine->region, 0, theirs, 1, kRoundTripBytes));
    if (!absl::IsInvalidArgument(past)) {
      return FailStep("a read past the peer's device region must be refused", past);
    }
    const absl::Time asked = absl::Now();
    peer.ch.Send("invalidate");
    const int limit_s = std::max(1, o.timeout_seconds / 4) * 2 + 5;
    if (std::string answer = peer.ch.Receive(limit_s); answer != "ok") {
      return Outcome::Fail(absl::StrCat(
          "deregister_memory of device memory this process has read from did not finish within ",
          limit_s, " s (", answer.empty() ? "no answer" : answer,
          "): the owner must not wait past its peer timeout for a reader"));
    }
    const absl::Duration took = absl::Now() - asked;
    absl::Status stale = WaitFor((*t)->Read(*conn, mine->region, 0, theirs, 0, 16));
    if (!IsStale(stale)) {
      return FailStep("a read of the peer's deregistered device region must fail STALE", stale);
    }
    return Outcome::Pass(absl::StrCat("device ", device, ": ", absl::StrJoin(paths, ", "),
                                      "; bounds; deregistered in ", absl::FormatDuration(took),
                                      " while read from, then STALE"));
  });
}

}  // namespace rayaccel::conformance
