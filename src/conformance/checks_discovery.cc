// What the plugin reports: devices, their ids, PCI bus ids and types, node labels, topology,
// health, and the health watch.
#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "conformance/check_support.h"
#include "conformance/checks.h"
#include "loader/telemetry.h"
#include "model/validate.h"
#include "ray/accelerator_type.h"

namespace rayaccel::conformance {

Outcome AnswersValid(const Options& o) {
  return RunIn(o, [&o](const LoadedPlugin& p) {
    Discovery d = Discover(p, false, false, true);
    if (!d.error.empty()) return Outcome::Fail(d.error);
    if (!d.report.problems.empty()) return Outcome::Fail(Problems(d.report));
    if (o.expect_no_devices && !d.report.devices.empty()) {
      return Outcome::Fail(absl::StrCat(d.report.devices.size(),
                                        " devices found, and --expect-no-devices says this "
                                        "machine has none"));
    }
    return Outcome::Pass(absl::StrCat(d.report.devices.size(), " devices"));
  });
}

Outcome NoneExplained(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    Discovery d = Discover(p, false, false, false);
    if (!d.error.empty()) return Outcome::Fail(d.error);
    if (!d.report.devices.empty()) {
      return Outcome::Skip(absl::StrCat(d.report.devices.size(),
                                        " devices found: run where there are none "
                                        "(--expect-no-devices) to check the reason"));
    }
    if (!d.report.no_devices_reason.empty()) {
      return Outcome::Pass("explain_no_devices: " + d.report.no_devices_reason);
    }
    if (std::string line = p.zero_devices_reason(); !line.empty()) {
      return Outcome::Pass("log line: " + line);
    }
    return Outcome::Fail(
        "no device, and no word why: call the sink's explain_no_devices (1.6), or log a line "
        "starting \"0 devices:\" for older hosts");
  });
}

Outcome IdsStable(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    Discovery a = Discover(p, false, false, false);
    Discovery b = Discover(p, false, false, false);
    if (!a.error.empty() || !b.error.empty()) return Outcome::Fail(a.error + b.error);
    auto ids = [](const PluginReport& r) {
      std::set<std::pair<uint32_t, std::string>> s;
      for (const Device& d : r.devices) s.insert({d.index, d.id});
      return s;
    };
    if (ids(a.report) != ids(b.report)) {
      return Outcome::Fail("two discoveries in a row gave different (index, id) pairs");
    }
    return Outcome::Pass();
  });
}

Outcome PciNormalised(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    Discovery d = Discover(p, false, false, false);
    if (!d.error.empty()) return Outcome::Fail(d.error);
    // The registry's own rule (NormalizePciBusId): a malformed id fails; another accepted form
    // passes, with what the host makes of it, so the suite and the registry cannot disagree.
    std::string note;
    for (const std::string& raw : d.raw_pci) {
      if (raw.empty()) continue;
      std::optional<std::string> normal = NormalizePciBusId(raw);
      if (!normal) {
        return Outcome::Fail(absl::StrCat("pci_bus_id \"", EscapeControl(raw),
                                          "\" is not of the form dddd:bb:dd.f"));
      }
      if (*normal != raw && note.empty()) {
        note = absl::StrCat("accepted: the host reads \"", raw, "\" as ", *normal);
      }
    }
    return Outcome::Pass(note);
  });
}

Outcome AcceleratorTypes(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    Discovery d = Discover(p, false, false, false);
    if (!d.error.empty()) return Outcome::Fail(d.error);
    absl::StatusOr<PluginProperties> props = p.GetProperties();
    if (!props.ok()) return Outcome::Fail(std::string(props.status().message()));
    const std::string& vendor = props->vendor;
    for (const Device& dev : d.report.devices) {
      auto raw = d.raw_types.find(dev.index);
      if (raw == d.raw_types.end() || raw->second.empty()) continue;
      const std::string& type = raw->second;
      if (!CheckLabelValue(type).ok()) {
        return Outcome::Fail(
            absl::StrCat("accelerator_type \"", type, "\" cannot be a Ray label value"));
      }
      std::string ray =
          DeriveAcceleratorType(vendor, dev.name, dev.pci_vendor_id, dev.pci_device_id);
      if (!ray.empty() && ray != type) {
        return Outcome::Fail(absl::StrCat("device ", dev.index, ": accelerator_type \"", type,
                                          "\" but Ray derives \"", ray,
                                          "\": leave it empty and the host applies Ray's rule"));
      }
    }
    return Outcome::Pass();
  });
}

Outcome LabelsValid(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    if (p.api().get_labels == nullptr) return Outcome::Skip("no get_labels hook");
    Discovery d = Discover(p, true, false, false);
    if (!d.error.empty()) return Outcome::Fail(d.error);
    if (!d.report.problems.empty()) return Outcome::Fail(ProblemsAfterDiscover(d));
    return Outcome::Pass(absl::StrCat(d.report.labels.size(), " labels"));
  });
}

Outcome TopologyValid(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    if (p.api().get_topology == nullptr) return Outcome::Fail("no get_topology hook");
    Discovery d = Discover(p, false, true, false);
    if (!d.error.empty()) return Outcome::Fail(d.error);
    if (!d.report.problems.empty()) return Outcome::Fail(ProblemsAfterDiscover(d));
    return Outcome::Pass(
        absl::StrCat(d.report.links.size(), " links, ", d.report.domains.size(), " domains"));
  });
}

Outcome TelemetryValid(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    if ((p.capabilities() & RAYACCEL_CAP_TELEMETRY) == 0 || p.api().get_telemetry == nullptr) {
      return Outcome::Skip("no get_telemetry");
    }
    Discovery d = Discover(p, false, false, false);
    if (!d.error.empty()) return Outcome::Fail(d.error);
    std::set<uint32_t> reported;
    for (const Device& dev : d.report.devices) reported.insert(dev.index);
    // Three samples, a second apart: values in range for reported devices (the host's own
    // checks), counters that never go down, and every field either sampled or explained.
    std::vector<TelemetryReport> samples(3);
    double slowest = 0;
    for (size_t i = 0; i < samples.size(); ++i) {
      if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
      const auto started = std::chrono::steady_clock::now();
      absl::Status st = p.SampleDevices(reported, &samples[i]);
      slowest = std::max(
          slowest,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
      if (!st.ok()) return Outcome::Fail(std::string(st.message()));
      if (!samples[i].problems.empty()) {
        return Outcome::Fail(absl::StrJoin(samples[i].problems, "; "));
      }
    }
    std::map<uint32_t, const DeviceSample*> before;
    for (const DeviceSample& s : samples[0].samples) before[s.index] = &s;
    for (size_t i = 1; i < samples.size(); ++i) {
      for (const DeviceSample& s : samples[i].samples) {
        auto it = before.find(s.index);
        if (it != before.end()) {
          const DeviceSample& b = *it->second;
          const std::pair<uint32_t, std::pair<uint64_t, uint64_t>> counters[] = {
              {RAYACCEL_SAMPLE_ECC, {b.ecc_corrected, s.ecc_corrected}},
              {RAYACCEL_SAMPLE_ECC, {b.ecc_uncorrected, s.ecc_uncorrected}},
              {RAYACCEL_SAMPLE_RETIRED_PAGES, {b.retired_pages, s.retired_pages}},
              {RAYACCEL_SAMPLE_LINK_ERRORS, {b.link_errors, s.link_errors}}};
          for (const auto& [bit, values] : counters) {
            if ((b.known & s.known & bit) != 0 && values.second < values.first) {
              return Outcome::Fail(absl::StrCat("device ", s.index, ": a counter went down, ",
                                                values.first, " then ", values.second));
            }
          }
        }
        before[s.index] = &s;
      }
    }
    uint32_t said = 0;
    for (const DeviceSample& s : samples.back().samples) said |= s.known;
    for (const auto& [fields, why] : samples.back().unknown) said |= fields;
    if (!reported.empty() && (said & kAllSampleFields) != kAllSampleFields) {
      return Outcome::Fail(absl::StrCat(
          "fields neither sampled nor explained (RAYACCEL_SAMPLE_* bits ", kAllSampleFields & ~said,
          "): call explain_unknown with the driver's reason"));
    }
    return Outcome::Pass(absl::StrCat(samples.back().samples.size(), " of ", reported.size(),
                                      " devices sampled, ", absl::StrFormat("%.2f", slowest * 1e3),
                                      " ms a call at most"));
  });
}

Outcome HealthValid(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    Discovery d = Discover(p, false, false, true);
    if (!d.error.empty()) return Outcome::Fail(d.error);
    if (!d.report.problems.empty()) return Outcome::Fail(ProblemsAfterDiscover(d));
    for (const auto& [index, health] : d.report.health) {
      bool known = std::any_of(d.report.devices.begin(), d.report.devices.end(),
                               [&](const Device& dev) { return dev.index == index; });
      if (!known) return Outcome::Fail(absl::StrCat("health for unknown device ", index));
    }
    return Outcome::Pass();
  });
}

namespace {

// One wait_health_events call into `report`; the plugin's message lands in `err`.
rayaccel_status WaitHealthOnce(const LoadedPlugin& p, uint32_t timeout_ms, PluginReport* report,
                               ErrorBuffer* err) {
  Collector collector(report);
  rayaccel_health_wait_args args{};
  args.struct_size = sizeof(args);
  args.timeout_ms = timeout_ms;
  args.sink = collector.sink();
  return CallPlugin(
      err, [&](rayaccel_error* e) { return p.api().wait_health_events(p.instance(), &args, e); });
}

// OK without a report tells the host "rescan: something changed that only discover reads". A
// wait that says so at once, again and again, while discover shows the same devices in the same
// health, keeps the host's health watch rescanning in a loop. Empty when the wait is honest.
std::string BusyHealthWait(const LoadedPlugin& p, const Discovery& before, uint32_t timeout_ms) {
  constexpr int kWaits = 4;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kWaits; ++i) {
    PluginReport report;
    ErrorBuffer err;
    const rayaccel_status rc = WaitHealthOnce(p, timeout_ms, &report, &err);
    if (rc != RAYACCEL_STATUS_OK || !report.health.empty()) return "";
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  if (ms >= static_cast<int64_t>(timeout_ms) * kWaits / 2) return "";  // it did wait
  Discovery after = Discover(p, false, false, false);
  if (!after.error.empty()) return "";  // something did change: discover now fails
  auto same = [](const Device& a, const Device& b) {
    return a.id == b.id && a.health == b.health && a.health_reason == b.health_reason;
  };
  if (!std::equal(before.report.devices.begin(), before.report.devices.end(),
                  after.report.devices.begin(), after.report.devices.end(), same)) {
    return "";
  }
  return absl::StrCat(
      "wait_health_events returned OK ", kWaits + 1, " times in a row within ", ms,
      " ms without reporting a change (set_health), and discover shows the same devices in the "
      "same health: a host would rescan in a loop. Return TIMEOUT when nothing changed within "
      "args->timeout_ms; OK only after set_health, or when a rescan would read something new");
}

}  // namespace

// wait_health_events returns within its timeout (a host in-process would otherwise wait on it
// forever) and reports only devices of the last discover.
Outcome HealthWaitBounded(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    if ((p.capabilities() & RAYACCEL_CAP_HEALTH_EVENTS) == 0 ||
        p.api().wait_health_events == nullptr) {
      return Outcome::Skip("no health events");
    }
    Discovery d = Discover(p, false, false, false);
    if (!d.error.empty()) return Outcome::Fail(d.error);
    constexpr uint32_t kTimeoutMs = 200;
    PluginReport report;
    ErrorBuffer err;
    auto start = std::chrono::steady_clock::now();
    rayaccel_status rc = WaitHealthOnce(p, kTimeoutMs, &report, &err);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - start)
                  .count();
    if (ms > kTimeoutMs + 1000) {
      return Outcome::Fail(absl::StrCat("took ", ms, " ms with a ", kTimeoutMs, " ms timeout"));
    }
    if (rc == RAYACCEL_STATUS_UNSUPPORTED || rc == RAYACCEL_STATUS_UNAVAILABLE) {
      return Outcome::Skip(absl::StrCat("cannot watch here: ", EscapeControl(err.text)));
    }
    if (rc != RAYACCEL_STATUS_OK && rc != RAYACCEL_STATUS_TIMEOUT) {
      return Outcome::Fail(absl::StrCat("status ", rc, ": ", EscapeControl(err.text)));
    }
    if (!report.problems.empty()) return Outcome::Fail(Problems(report));
    for (const auto& [index, health] : report.health) {
      bool known = std::any_of(d.report.devices.begin(), d.report.devices.end(),
                               [&](const Device& dev) { return dev.index == index; });
      if (!known) return Outcome::Fail(absl::StrCat("health event for unknown device ", index));
    }
    if (rc == RAYACCEL_STATUS_OK && report.health.empty()) {
      if (std::string busy = BusyHealthWait(p, d, kTimeoutMs); !busy.empty()) {
        return Outcome::Fail(busy);
      }
    }
    return Outcome::Pass(rc == RAYACCEL_STATUS_OK ? "reported a change"
                                                  : absl::StrCat("no change in ", ms, " ms"));
  });
}

}  // namespace rayaccel::conformance
