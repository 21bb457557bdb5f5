// Capture: each plugin's answers as they crossed the ABI, and hwloc's view, for replay.
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "isolation/report_codec.h"
#include "registry/registry_impl.h"

namespace rayaccel {

absl::StatusOr<CapturedNode> Registry::Impl::Capture() const {
  std::lock_guard<std::mutex> scan_lock(scan_mu_);
  std::shared_ptr<const NodeSnapshot> snap = snapshot();
  CapturedNode node;
  node.host_topology = snap->host_topology;
  if (host_ != nullptr) {
    absl::StatusOr<std::string> xml = host_->ExportXml();
    if (!xml.ok()) return xml.status();
    node.hwloc_xml = *std::move(xml);
  }
  for (const std::unique_ptr<Slot>& s : slots_) {
    Slot& slot = *s;
    CapturedPlugin c;
    std::unique_lock<std::mutex> slot_lock(slot.mu, std::defer_lock);
    if (slot.starting) {  // as the snapshot shows it; not waited for
      c.status.name = slot.name;
      c.status.path = slot.path;
      c.status.state = PluginStatus::State::kFailed;
    } else {
      slot_lock.lock();
      c.status = slot.status;
    }
    for (const PluginStatus& p : snap->plugins) {
      if (p.name == slot.name && p.path == slot.path) c.status = p;
    }
    const bool answered = c.status.state == PluginStatus::State::kActive ||
                          c.status.state == PluginStatus::State::kDegraded;
    if (answered && slot_lock.owns_lock() && slot.plugin != nullptr && slot.plugin->alive()) {
      PluginHandle& plugin = *slot.plugin;
      c.has_prepare_allocation = plugin.has_prepare_allocation();
      PluginReport report;
      if (absl::Status st = plugin.Query(&report); !st.ok()) {
        return absl::UnavailableError(
            absl::StrCat("capture: plugin ", c.status.name, ": ", st.message()));
      }
      c.zero_devices_reason = plugin.zero_devices_reason();
      isolation::EncodeReport(report, &c.report);
      std::vector<uint32_t> indices;
      for (const Device& d : report.devices) indices.push_back(d.index);
      std::sort(indices.begin(), indices.end());
      const size_t n = indices.size();
      for (uint32_t q = 1; q <= std::min<size_t>(n, 64); ++q) {
        absl::Status st = plugin.ValidateQuantity(q);
        c.quantities[q] = st.ok() ? "" : std::string(st.message());
      }
      if (c.has_prepare_allocation && n > 0) {
        std::vector<std::vector<uint32_t>> sets;
        for (uint32_t i : indices) sets.push_back({i});
        for (size_t a = 0; n <= 16 && a < n; ++a) {
          for (size_t b = a + 1; b < n; ++b) sets.push_back({indices[a], indices[b]});
        }
        if (n > 2) sets.push_back(indices);
        // Every device but the parents of partitions (a GPU in MIG mode): a whole-node lease
        // where partitions exist.
        std::set<std::string> parents;
        for (const Device& d : report.devices) {
          if (!d.parent_id.empty()) parents.insert(d.parent_id);
        }
        std::vector<uint32_t> leaves;
        for (const Device& d : report.devices) {
          if (parents.count(d.id) == 0) leaves.push_back(d.index);
        }
        std::sort(leaves.begin(), leaves.end());
        if (leaves.size() > 1 && std::find(sets.begin(), sets.end(), leaves) == sets.end()) {
          sets.push_back(leaves);
        }
        for (const std::vector<uint32_t>& set : sets) {
          CapturedPlugin::AllocationAnswer answer;
          answer.indices = set;
          absl::StatusOr<EnvList> env = plugin.PrepareAllocation(set);
          if (env.ok()) {
            answer.env.insert(env->begin(), env->end());
          } else {
            answer.error = std::string(env.status().message());
            if (answer.error.empty()) answer.error = "refused";
          }
          c.allocations.push_back(std::move(answer));
        }
      }
      if (!plugin.alive()) {
        return absl::UnavailableError(absl::StrCat("capture: plugin ", c.status.name,
                                                   " died while its answers were recorded"));
      }
    }
    node.plugins.push_back(std::move(c));
  }
  return node;
}

}  // namespace rayaccel
