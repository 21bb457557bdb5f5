// The transport between two processes of the plugin, on host memory: the round trip, the
// owner's bounds against forged descriptors, authentication, and a peer that stops.
#include <signal.h>

#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "conformance/checks.h"
#include "conformance/transport_peer.h"
#include "transport/descriptor.h"

namespace rayaccel::conformance {

// --- transport.round_trip: two processes, each with its own endpoint of the plugin.

Outcome RoundTrip(const Options& o) {
  return WithPeer(
      o, [&o](Peer& peer, rayaccel::Transport& t, std::vector<char>& local, uint64_t mine) {
        auto conn = t.Connect(peer.address);
        if (!conn.ok()) return FailStep("connect", conn.status());
        if (absl::Status s = WaitFor(t.Read(*conn, mine, 0, peer.src, 0, local.size())); !s.ok()) {
          return FailStep("read", s);
        }
        for (size_t i = 0; i < local.size(); ++i) {
          if (local[i] != PatternByte(i, 1)) {
            return Outcome::Fail(absl::StrCat("read: byte ", i, " differs from the peer's memory"));
          }
        }
        for (size_t i = 0; i < local.size(); ++i) local[i] = PatternByte(i, 2);
        auto w = t.Write(*conn, mine, 0, peer.dst, 0, local.size());
        if (!w.ok()) return FailStep("write", w.status());
        if (absl::Status s = WaitFor(t.Notify(*conn, "landed")); !s.ok())
          return FailStep("notify", s);
        if (absl::Status s = w->Wait(absl::Now() + absl::Seconds(5)); !s.ok()) {
          return FailStep("write", s);
        }
        peer.ch.Send("notified?");
        if (std::string answer = peer.ch.Receive(10); answer != "ok") {
          return Outcome::Fail("write and notify: the peer says: " + answer);
        }
        if (absl::Status s = WaitFor(t.Flush(*conn)); !s.ok()) return FailStep("flush", s);

        // Malformed descriptors are refused; an invalidated one is refused as stale.
        absl::Status bad =
            t.Read(*conn, mine, 0, peer.src.substr(0, peer.src.size() - 1), 0, 16).status();
        if (!absl::IsInvalidArgument(bad))
          return FailStep("a truncated descriptor must be refused", bad);
        peer.ch.Send("invalidate");
        if (std::string answer = peer.ch.Receive(10); answer != "ok") {
          return Outcome::Fail("deregister_memory in the peer: " + answer);
        }
        absl::Status stale = WaitFor(t.Read(*conn, mine, 0, peer.src, 0, 16));
        if (!IsStale(stale)) {
          return FailStep("a read with a deregistered region's descriptor must fail STALE", stale);
        }

        // The peer dies: the next transfers fail PEER_LOST within the peer timeout.
        peer.Kill();
        absl::Time until = absl::Now() + RoundTripOptions(o).peer_timeout + absl::Seconds(2);
        absl::Status lost;
        while (absl::Now() < until) {
          lost = WaitFor(t.Read(*conn, mine, 0, peer.dst, 0, 16));
          if (!lost.ok()) break;
          absl::SleepFor(absl::Milliseconds(50));
        }
        if (!IsPeerLost(lost)) return FailStep("a killed peer must be reported as PEER_LOST", lost);
        if (absl::Status s = t.Close(*conn); !s.ok()) return FailStep("close", s);
        if (absl::Status s = t.Deregister(mine); !s.ok()) return FailStep("deregister_memory", s);
        return Outcome::Pass("read, write, notify, flush, stale and lost-peer detection");
      });
}

// --- transport.owner_bounds: forged descriptors, checksums recomputed, reach nothing.

Outcome OwnerBounds(const Options& o) {
  return WithPeer(
      o, [](Peer& peer, rayaccel::Transport& t, std::vector<char>& /*local*/, uint64_t mine) {
        auto conn = t.Connect(peer.address);
        if (!conn.ok()) return FailStep("connect", conn.status());
        absl::StatusOr<transport::Envelope> genuine = transport::Decode(peer.src);
        if (!genuine.ok()) return FailStep("the peer's descriptor", genuine.status());
        auto forge = [&](uint64_t length, const std::string& payload) {
          DescriptorInfo info = genuine->info;
          info.length = length;
          absl::StatusOr<std::string> d = transport::Encode(info, payload);
          return d.ok() ? *d : std::string();
        };
        const std::string payload(genuine->payload);
        // The envelope claims twice the region: the host's own check passes, the owner must not.
        const std::string doubled = forge(2 * kRoundTripBytes, payload);
        for (bool write : {false, true}) {
          for (uint64_t offset : {kRoundTripBytes - 16, kRoundTripBytes, kRoundTripBytes + 4096}) {
            absl::Status s = write ? WaitFor(t.Write(*conn, mine, 0, doubled, offset, 4096))
                                   : WaitFor(t.Read(*conn, mine, 0, doubled, offset, 4096));
            if (s.ok()) {
              return Outcome::Fail(absl::StrCat(
                  write ? "a write" : "a read", " of 4096 bytes at ", offset,
                  ", past the region's end, through a descriptor whose length was doubled, "
                  "succeeded: the owner must refuse a range outside the region it registered"));
            }
          }
        }
        // The plugin's own bytes: wherever they hold the region's length (a little-endian 64- or
        // 32-bit field), it is doubled, so that a reader-side check passes; then the end of the
        // region and past it must still be refused, by the owner.
        const uint64_t length = genuine->info.length;
        for (size_t at = 0; at + 4 <= payload.size(); ++at) {
          for (size_t width : {size_t{8}, size_t{4}}) {
            if (at + width > payload.size()) continue;
            uint64_t v = 0;
            for (size_t i = 0; i < width; ++i) {
              v |= static_cast<uint64_t>(static_cast<uint8_t>(payload[at + i])) << (8 * i);
            }
            if (v != length) continue;
            std::string p = payload;
            for (size_t i = 0; i < width; ++i)
              p[at + i] = static_cast<char>((2 * length) >> (8 * i));
            const std::string d = forge(2 * length, p);
            absl::Status s = WaitFor(t.Read(*conn, mine, 0, d, length, 4096));
            if (s.ok()) {
              return Outcome::Fail(absl::StrCat(
                  "a read past the region's end, through a descriptor whose length field (byte ",
                  at, " of the plugin's bytes) was doubled, succeeded: the owner must refuse it"));
            }
          }
        }
        // Random damage to the plugin's bytes, checksum recomputed, read around the region's end.
        std::mt19937_64 random(7);
        for (int i = 0; i < 200 && peer.Alive(); ++i) {
          std::string p = payload;
          for (int flips = 1 + static_cast<int>(random() % 3); flips > 0 && !p.empty(); --flips) {
            p[random() % p.size()] ^= static_cast<char>(1 << (random() % 8));
          }
          const std::string d = forge(2 * length, p);
          if (d.empty()) continue;
          const uint64_t offset = length - 4096 + random() % 8192;
          absl::Status s =
              WaitFor(t.Read(*conn, mine, 0, d, offset, 1 + random() % 4096), absl::Seconds(10));
          if (absl::IsDeadlineExceeded(s)) return Outcome::Fail("a forged descriptor's read hung");
        }
        if (!peer.Alive()) {
          return Outcome::Fail(
              "the peer died serving forged descriptors (a transfer strayed outside "
              "its region into a guard page, or its parser crashed)");
        }
        peer.ch.Send("canary?");
        if (std::string answer = peer.ch.Receive(10); answer != "ok") {
          return Outcome::Fail("the peer's unregistered memory was changed: " + answer);
        }
        if (absl::Status s = WaitFor(t.Read(*conn, mine, 0, peer.src, 0, 4096)); !s.ok()) {
          return FailStep("after the forgeries, the genuine descriptor", s);
        }
        return Outcome::Pass(
            "doubled lengths (envelope and plugin bytes) refused by the owner, 200 damaged "
            "descriptors harmless");
      });
}

// --- transport.authentication: a peer without the key is refused.

Outcome Authentication(const Options& o) {
  return WithPeer(
      o, [&o](Peer& peer, rayaccel::Transport& t, std::vector<char>& local, uint64_t mine) {
        TransportOptions wrong = RoundTripOptions(o);
        wrong.key = std::string(32, '\x5a');
        auto stranger = Transport::Open(wrong);
        if (!stranger.ok()) return FailStep("open_endpoint with another key", stranger.status());
        auto refused = (*stranger)->Connect(peer.address);
        if (refused.ok() || !IsUnauthenticatedPeer(refused.status())) {
          return Outcome::Fail(
              "a peer with another key must be refused with UNAUTHENTICATED: " +
              (refused.ok() ? std::string("it was admitted") : refused.status().ToString()));
        }
        auto conn = t.Connect(peer.address);
        if (!conn.ok()) return FailStep("connect with the key", conn.status());
        if (absl::Status s = WaitFor(t.Read(*conn, mine, 0, peer.src, 0, local.size())); !s.ok()) {
          return FailStep("read with the key", s);
        }
        return Outcome::Pass("another key refused (UNAUTHENTICATED), the shared key admitted");
      });
}

// --- transport.stopped_peer: a peer that stops without dying is lost within the timeout.

Outcome StoppedPeer(const Options& o) {
  return WithPeer(
      o, [&o](Peer& peer, rayaccel::Transport& t, std::vector<char>& local, uint64_t mine) {
        auto conn = t.Connect(peer.address);
        if (!conn.ok()) return FailStep("connect", conn.status());
        if (absl::Status s = WaitFor(t.Read(*conn, mine, 0, peer.src, 0, local.size())); !s.ok()) {
          return FailStep("read", s);
        }
        kill(peer.pid, SIGSTOP);
        // Delivered asynchronously: wait until the kernel shows it stopped (state T).
        for (int i = 0; i < 500; ++i) {
          std::string stat;
          std::getline(std::ifstream(absl::StrCat("/proc/", peer.pid, "/stat")), stat);
          const size_t close = stat.rfind(')');
          if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'T')
            break;
          absl::SleepFor(absl::Milliseconds(2));
        }
        const absl::Duration timeout = RoundTripOptions(o).peer_timeout;
        const absl::Time stopped = absl::Now();
        absl::Status s = WaitFor(t.Read(*conn, mine, 0, peer.src, 0, local.size()), 3 * timeout);
        const absl::Duration took = absl::Now() - stopped;
        kill(peer.pid, SIGCONT);
        if (!IsPeerLost(s)) {
          return FailStep(absl::StrCat("a stopped peer must be reported PEER_LOST within the peer "
                                       "timeout (",
                                       absl::FormatDuration(timeout), ")"),
                          s);
        }
        if (took > timeout + absl::Seconds(2)) {
          return Outcome::Fail(
              absl::StrCat("a stopped peer was reported lost after ", absl::FormatDuration(took),
                           ", past the peer timeout of ", absl::FormatDuration(timeout)));
        }
        return Outcome::Pass(absl::StrCat(
            "lost after ", absl::FormatDuration(absl::Trunc(took, absl::Milliseconds(100)))));
      });
}

}  // namespace rayaccel::conformance
