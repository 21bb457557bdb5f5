// Tier 4, with --perf: figures a vendor's CI records for every driver and firmware update,
// and compares with the last good run (--baseline). Each is the median of repeated
// measurements, over at most about a second, so that one slow moment on a shared machine does
// not move it.
#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "conformance/check_support.h"
#include "conformance/checks.h"
#include "conformance/transport_peer.h"

namespace rayaccel::conformance {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs `once` (returning seconds, or a negative number on failure) at least 3 and at most
// `most` times, stopping once a second has passed; the median, or why it failed.
absl::StatusOr<double> Measure(int most, const std::function<absl::StatusOr<double>()>& once) {
  std::vector<double> seconds;
  const absl::Time until = absl::Now() + absl::Seconds(1);
  while (seconds.size() < 3 || (static_cast<int>(seconds.size()) < most && absl::Now() < until)) {
    absl::StatusOr<double> s = once();
    if (!s.ok()) return s.status();
    seconds.push_back(*s);
  }
  return Median(seconds);
}

double SecondsSince(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

Outcome NotAsked() { return Outcome::Skip("measured with --perf"); }

}  // namespace

Outcome PerfDiscovery(const Options& o) {
  if (!o.perf) return NotAsked();
  return Isolated(o, false, [&o] {
    const absl::Time start = absl::Now();
    Loaded l = Load(o);
    if (l.plugin == nullptr) return Outcome::Fail(l.error);
    Discovery first = Discover(*l.plugin, true, true, false);
    const double cold = SecondsSince(start);
    if (!first.error.empty()) return Outcome::Fail(first.error);
    absl::StatusOr<double> rescan = Measure(200, [&]() -> absl::StatusOr<double> {
      const absl::Time t = absl::Now();
      Discovery d = Discover(*l.plugin, false, true, false);
      if (!d.error.empty()) return absl::InternalError(d.error);
      return SecondsSince(t);
    });
    if (!rescan.ok()) return Outcome::Fail(std::string(rescan.status().message()));
    Outcome out = Outcome::Pass(
        absl::StrFormat("%d devices: load, initialize and first scan %.2f ms; a rescan %.1f us",
                        first.report.devices.size(), cold * 1e3, *rescan * 1e6));
    out.figures = {{"discovery.cold_start_ms", cold * 1e3}, {"discovery.rescan_us", *rescan * 1e6}};
    std::shared_ptr<LoadedPlugin> plugin = std::move(l.plugin);
    g_after_verdict = [plugin]() mutable { plugin.reset(); };
    return out;
  });
}

Outcome PerfAllocation(const Options& o) {
  if (!o.perf) return NotAsked();
  return RunIn(o, [](const LoadedPlugin& p) {
    Discovery d = Discover(p, false, false, false);
    if (!d.error.empty()) return Outcome::Fail(d.error);
    if (d.report.devices.empty()) return Outcome::Skip("no devices to allocate");
    if (p.api().prepare_allocation == nullptr) return Outcome::Skip("no prepare_allocation");
    const std::vector<uint32_t> one = {d.report.devices.front().index};
    absl::StatusOr<double> prepare = Measure(1000, [&]() -> absl::StatusOr<double> {
      const absl::Time t = absl::Now();
      auto env = p.PrepareAllocation(one);
      if (!env.ok()) return env.status();
      return SecondsSince(t);
    });
    if (!prepare.ok()) return Outcome::Fail(std::string(prepare.status().message()));
    Outcome out =
        Outcome::Pass(absl::StrFormat("prepare_allocation of one device %.1f us", *prepare * 1e6));
    out.figures = {{"allocation.prepare_us", *prepare * 1e6}};
    return out;
  });
}

Outcome PerfTransport(const Options& o) {
  if (!o.perf) return NotAsked();
  return WithPeer(
      o, [](Peer& peer, rayaccel::Transport& t, std::vector<char>& local, uint64_t mine) {
        auto conn = t.Connect(peer.address);
        if (!conn.ok()) return FailStep("connect", conn.status());
        auto timed = [&](bool write, uint64_t length) -> absl::StatusOr<double> {
          const absl::Time start = absl::Now();
          absl::Status s = WaitFor(write ? t.Write(*conn, mine, 0, peer.dst, 0, length)
                                         : t.Read(*conn, mine, 0, peer.src, 0, length));
          if (!s.ok()) return s;
          return SecondsSince(start);
        };
        std::vector<Figure> figures;
        auto add = [&](const std::string& name, absl::StatusOr<double> seconds, uint64_t bytes) {
          if (!seconds.ok()) return seconds.status();
          if (bytes == 0) {
            figures.push_back({name, *seconds * 1e6});
          } else {
            figures.push_back({name, static_cast<double>(bytes) / *seconds / 1e9});
          }
          return absl::OkStatus();
        };
        for (int i = 0; i < 10; ++i) timed(false, 8).IgnoreError();  // warm: connections, caches
        absl::Status s =
            add("transport.read_8b_latency_us", Measure(2000, [&] { return timed(false, 8); }), 0);
        if (s.ok())
          s = add("transport.read_64kib_gbps", Measure(500, [&] { return timed(false, 64 << 10); }),
                  64 << 10);
        if (s.ok())
          s = add("transport.read_1mib_gbps",
                  Measure(100, [&] { return timed(false, local.size()); }), local.size());
        if (s.ok())
          s = add("transport.write_1mib_gbps",
                  Measure(100, [&] { return timed(true, local.size()); }), local.size());
        // A batch of 64 reads of 4 KiB: what a request's KV-cache blocks cost.
        std::vector<TransferEntry> entries;
        for (uint64_t i = 0; i < 64; ++i)
          entries.push_back({mine, i * 4096, peer.src, i * 4096, 4096});
        absl::StatusOr<PreparedBatch> batch = t.PrepareBatch(TransferOp::kRead, *conn, entries);
        if (s.ok()) s = batch.status();
        if (s.ok()) {
          s = add("transport.batch_64x4kib_gbps",
                  Measure(500,
                          [&]() -> absl::StatusOr<double> {
                            const absl::Time start = absl::Now();
                            absl::StatusOr<BatchRequest> r = t.Post(*batch);
                            if (!r.ok()) return r.status();
                            if (absl::Status w = r->Wait(absl::Now() + absl::Seconds(5)); !w.ok())
                              return w;
                            return SecondsSince(start);
                          }),
                  64 * 4096);
        }
        if (!s.ok()) return FailStep("measuring", s);
        std::vector<std::string> said;
        for (const Figure& f : figures) said.push_back(absl::StrFormat("%s %.3g", f.name, f.value));
        Outcome out = Outcome::Pass(absl::StrJoin(said, ", "));
        out.figures = figures;
        return out;
      });
}

bool Figure::HigherIsBetter() const {
  return absl::EndsWith(name, "_gbps") || absl::EndsWith(name, "_per_s");
}

std::string Regression(const Figure& now, double baseline, double factor) {
  if (baseline <= 0 || now.value <= 0) return "";
  const bool worse =
      now.HigherIsBetter() ? now.value * factor < baseline : now.value > baseline * factor;
  const double slack_us = absl::EndsWith(now.name, "_ms") ? 0.05 : 50;  // in the figure's unit
  if (!worse || (!now.HigherIsBetter() && now.value - baseline < slack_us)) return "";
  return absl::StrFormat(
      "%s is %.3g against %.3g in the baseline: %.1fx worse, past the %.3gx "
      "tolerated",
      now.name, now.value, baseline,
      now.HigherIsBetter() ? baseline / now.value : now.value / baseline, factor);
}

}  // namespace rayaccel::conformance
