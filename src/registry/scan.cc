// A scan: every plugin asked in turn, the answers merged into one snapshot, enriched with the
// host's topology, mapped to Ray, and published when anything changed.
#include <algorithm>
#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ray/accelerator_type.h"
#include "ray/ray_mapping.h"
#include "registry/registry_impl.h"
#include "topology/enrich.h"
#include "util/log.h"

namespace rayaccel {

namespace {

void AppendMessage(std::string* message, const std::string& text) {
  if (text.empty()) return;
  if (!message->empty()) message->append("; ");
  message->append(text);
}

}  // namespace

std::shared_ptr<const NodeSnapshot> Registry::Impl::Rescan() {
  if (shut_down()) return snapshot();
  std::lock_guard<std::mutex> scan_lock(scan_mu_);
  const auto started = std::chrono::steady_clock::now();
  // Each plugin's answer, and everything else the snapshot is a function of, as bytes: when
  // they equal the last scan's (what an agent sees almost every time), the last snapshot
  // stands, generation and all: merging, enrichment and mapping are skipped, nobody is
  // woken, and leases on it stay valid. A new generation means something changed.
  struct Answer {
    PluginStatus status;
    std::shared_ptr<const PluginReport> report;  // to merge; none when the plugin failed
    std::string zero_devices_reason;
  };
  std::vector<Answer> answers;
  std::string inputs;
  for (const std::unique_ptr<Slot>& s : slots_) {
    Slot& slot = *s;
    if (closing_) return snapshot();  // Shutdown has begun: no restart, no new snapshot
    if (slot.starting) {
      // Not waited for: it joins a later snapshot when it answers (StartOne rescans).
      PluginStatus status;
      status.name = slot.name;
      status.path = slot.path;
      status.capabilities = slot.capabilities;
      status.state = PluginStatus::State::kFailed;
      status.message = absl::StrCat(
          "starting: initialize or the first discover did not return within the start "
          "deadline (",
          options_.start_deadline_ms, " ms); its devices join when it answers");
      answers.push_back({status, nullptr, ""});
      continue;
    }
    std::lock_guard<std::mutex> lock(slot.mu);
    PluginStatus status = slot.status;
    // The first discover, asked while starting, is judged here like any other answer.
    const bool first = slot.has_first_answer;
    if (first && (slot.plugin == nullptr || !slot.plugin->alive())) {
      // Its host died in the first discover or since; once recorded (a health watch may have
      // recorded it already), with the cause when there is one.
      slot.has_first_answer = false;
      slot.first_answer = nullptr;
      if (slot.status.state != PluginStatus::State::kFailed) {
        MarkCrashed(&slot,
                    slot.first_status.ok()
                        ? absl::UnavailableError("the plugin host ended after its first discover")
                        : slot.first_status);
      }
      slot.answer = nullptr;
      answers.push_back({slot.status, nullptr, ""});
      continue;
    }
    if (!first && slot.restartable && (slot.plugin == nullptr || !slot.plugin->alive())) {
      Restart(&slot);
      status = slot.status;
    }
    if (!first && (slot.plugin == nullptr || !slot.plugin->alive() ||
                   status.state == PluginStatus::State::kFailed)) {
      slot.answer = nullptr;
      answers.push_back({status, nullptr, ""});
      continue;
    }
    std::shared_ptr<const PluginReport> report;
    absl::Status st;
    if (first) {
      slot.has_first_answer = false;
      report = std::move(slot.first_answer);
      st = std::move(slot.first_status);
    } else {
      st = slot.plugin->QueryShared(&report);
    }
    if (!slot.plugin->alive()) {
      // Isolation did its job: the plugin's process is gone, the cause is in `st`.
      MarkCrashed(&slot, st);
      slot.answer = nullptr;
      answers.push_back({slot.status, nullptr, ""});
      continue;
    }
    slot.failures_in_a_row = 0;
    slot.answer = st.ok() && report != nullptr && !report->over_limit ? report : nullptr;
    if (!st.ok() || report == nullptr || report->over_limit) {
      status.state = PluginStatus::State::kFailed;
      status.message =
          !st.ok() || report == nullptr
              ? std::string(st.message())
              : absl::StrCat("answers refused as absurd: ", absl::StrJoin(report->problems, "; "));
      Log().warn("plugin {} failed: {}", status.name, status.message);
      answers.push_back({status, nullptr, ""});
      continue;
    }
    slot.plugin->AppendAnswerKey(*report, &inputs);
    answers.push_back({status, std::move(report), slot.plugin->zero_devices_reason()});
  }
  for (const Answer& a : answers) AppendInputs(a.status, a.zero_devices_reason, &inputs);
  const size_t answers_size = inputs.size();
  inputs.append(host_description_);

  auto snap = std::make_shared<NodeSnapshot>();
  std::shared_ptr<const NodeSnapshot> last = snapshot();
  const bool same = last != nullptr && inputs == last_inputs_;
  auto count = [&] {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.scans;
    if (!same) ++stats_.changes;
    stats_.scan_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
  if (same) {
    count();
    return last;
  }
  last_inputs_ = std::move(inputs);
  last_inputs_.resize(answers_size);  // the host's description is added once it is settled
  snap->generation = ++generation_;
  absl::flat_hash_set<std::string> ids;
  for (Answer& a : answers) {
    if (a.report) {
      Merge(*a.report, &ids, snap.get(), &a.status);
      if (a.status.device_count == 0 && a.status.message.empty()) {
        a.status.message = a.zero_devices_reason;
      }
      if (std::string w = ForeignResourceWarning(a.status.resource_name, a.status.vendor);
          !w.empty()) {
        a.status.message = a.status.message.empty() ? w : absl::StrCat(a.status.message, "; ", w);
      }
    }
    snap->plugins.push_back(std::move(a.status));
  }
  LoadHostTopologyIfNeeded(*snap);
  snap->host_topology = host_description_;
  // As it reads after this scan (hwloc loads on the first scan that finds a PCI device), so
  // that the next scan of the same node compares equal.
  last_inputs_.append(host_description_);
  if (host_ != nullptr) EnrichWithHostTopology(*host_, snap.get());
  RayMapping mapping = MapToRay(*snap);
  snap->ray = std::move(mapping.view);
  snap->resource_owners = std::move(mapping.owners);
  // A configured rack is the operator's word, over any plugin's rack domain.
  if (!rack_.empty()) snap->ray.labels["rayaccel.io/rack"] = rack_;
  for (PluginStatus& p : snap->plugins) {
    auto it = mapping.notes.find(p.name);
    if (it == mapping.notes.end()) continue;
    for (const std::string& note : it->second) AppendMessage(&p.message, note);
    if (p.state == PluginStatus::State::kActive) p.state = PluginStatus::State::kDegraded;
  }
  count();
  Publish(snap);
  return snap;
}

void Registry::Impl::AppendInputs(const PluginStatus& p, const std::string& zero_devices_reason,
                                  std::string* out) {
  for (const std::string* f :
       {&p.name, &p.path, &p.message, &p.abi_version, &p.vendor, &p.plugin_version,
        &p.resource_name, &p.visible_devices_env, &zero_devices_reason}) {
    absl::StrAppend(out, f->size(), ":", *f);
  }
  absl::StrAppend(out, static_cast<int>(p.state), ",", p.capabilities, ";");
}

void Registry::Impl::LoadHostTopologyIfNeeded(const NodeSnapshot& snap) {
  if (!options_.host_topology || host_attempted_) return;
  bool any_pci = std::any_of(snap.devices.begin(), snap.devices.end(),
                             [](const Device& d) { return !d.pci_bus_id.empty(); });
  if (!any_pci) return;
  host_attempted_ = true;
  if (options_.replay != nullptr) {
    // The captured view: hwloc reads the captured XML, described as the capture described it.
    const CapturedNode& node = *options_.replay;
    constexpr absl::string_view kHwloc = "hwloc, ";
    if (node.hwloc_xml.empty() || !absl::StartsWith(node.host_topology, kHwloc)) {
      host_description_ = node.host_topology;
      return;
    }
    // Described as the capture described it (what the node printed, byte for byte).
    const std::string described = node.host_topology.substr(kHwloc.size());
    absl::StatusOr<std::unique_ptr<HostTopology>> host =
        HostTopology::LoadXml(node.hwloc_xml, described);
    if (!host.ok()) {
      host_description_ = absl::StrCat("unavailable: the captured hwloc XML (", described,
                                       "): ", host.status().message());
      Log().warn("host topology {}", host_description_);
      return;
    }
    host_ = *std::move(host);
    host_description_ = node.host_topology;
    return;
  }
  absl::StatusOr<std::unique_ptr<HostTopology>> host = HostTopology::Load(options_.hwloc_xml);
  if (host.ok()) {
    host_ = *std::move(host);
    host_description_ = "hwloc, " + host_->source();
  } else {
    host_description_ = "unavailable: " + std::string(host.status().message());
    Log().warn("host topology {}", host_description_);
  }
}

void Registry::Impl::Merge(const PluginReport& report, absl::flat_hash_set<std::string>* ids,
                           NodeSnapshot* snap, PluginStatus* status) {
  std::vector<std::string> problems = report.problems;
  problems.insert(problems.end(), report.hook_failures.begin(), report.hook_failures.end());
  absl::flat_hash_map<uint32_t, size_t> position;  // plugin index -> snapshot position
  snap->devices.reserve(snap->devices.size() + report.devices.size());
  snap->links.reserve(snap->links.size() + report.links.size());
  for (Device d : report.devices) {
    if (!ids->insert(d.id).second) {
      problems.push_back(absl::StrCat("device ", d.index, ": id \"", d.id,
                                      "\" already reported by another plugin"));
      continue;
    }
    d.plugin = status->name;
    d.resource = status->resource_name;
    d.vendor = status->vendor;
    if (auto h = report.health.find(d.index); h != report.health.end()) {
      d.health = h->second.first;
      d.health_reason = h->second.second;
    }
    if (d.accelerator_type.empty()) {
      d.accelerator_type = AcceleratorTypeOf(status->vendor, d);
    }
    position[d.index] = snap->devices.size();
    snap->devices.push_back(std::move(d));
  }
  status->device_count = position.size();
  const std::string source = "plugin:" + status->name;
  for (const ReportedLink& l : report.links) {
    auto a = position.find(l.a), b = position.find(l.b);
    if (a == position.end() || b == position.end()) continue;  // device refused above
    snap->links.push_back(Link{std::min(a->second, b->second), std::max(a->second, b->second),
                               l.type, l.count, l.bandwidth_mbps, l.pcie_path, source, l.weight,
                               l.hops, l.min_bandwidth_mbps, l.type_name});
  }
  for (const ReportedDomain& r : report.domains) {
    Domain dom{status->name, r.kind, r.id, {}};
    for (uint32_t index : r.devices) {
      if (auto p = position.find(index); p != position.end()) dom.devices.push_back(p->second);
    }
    snap->domains.push_back(std::move(dom));
  }
  for (const auto& [key, value] : report.labels) {
    auto [it, inserted] = snap->plugin_labels.emplace(key, value);
    if (!inserted && it->second != value) {
      problems.push_back(absl::StrCat("label ", key, "=", value,
                                      " conflicts with another plugin's value ", it->second));
    }
  }
  if (!problems.empty()) {
    status->state = PluginStatus::State::kDegraded;
    status->message = absl::StrJoin(problems, "; ");
    Log().warn("plugin {} degraded: {}", status->name, status->message);
  }
}

const std::string& Registry::Impl::AcceleratorTypeOf(const std::string& vendor, const Device& d) {
  std::string key = absl::StrCat(vendor, "\n", d.name, "\n", d.pci_vendor_id, ":", d.pci_device_id);
  auto it = accelerator_types_.find(key);
  if (it != accelerator_types_.end()) return it->second;
  if (accelerator_types_.size() >= 4096) accelerator_types_.clear();  // plugins name them
  return accelerator_types_
      .emplace(std::move(key),
               DeriveAcceleratorType(vendor, d.name, d.pci_vendor_id, d.pci_device_id))
      .first->second;
}

}  // namespace rayaccel
