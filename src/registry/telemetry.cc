// SampleTelemetry: each plugin with get_telemetry asked once, under its slot's lock (one caller
// into a plugin at a time), its samples named by the devices of its newest answer.
#include <chrono>
#include <map>

#include "absl/strings/str_cat.h"
#include "registry/registry_impl.h"

namespace rayaccel {

Telemetry Registry::Impl::SampleTelemetry() const {
  Telemetry out;
  out.unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  for (const std::unique_ptr<Slot>& owned : slots_) {
    Slot* slot = owned.get();
    if (!slot->loaded || (slot->capabilities & RAYACCEL_CAP_TELEMETRY) == 0 || slot->starting) {
      continue;
    }
    PluginTelemetry part;
    part.plugin = slot->name;
    std::lock_guard<std::mutex> lock(slot->mu);
    if (slot->plugin == nullptr || !slot->plugin->alive()) {
      part.error = absl::StrCat("down: ", slot->status.message);
      out.plugins.push_back(std::move(part));
      continue;
    }
    TelemetryReport report;
    const auto started = std::chrono::steady_clock::now();
    absl::Status st = slot->plugin->Telemetry(&report);
    part.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (!slot->plugin->alive()) MarkCrashed(slot, st);
    if (absl::IsUnimplemented(st)) continue;  // negotiated below 1.6: no hook to ask
    if (!st.ok()) {
      part.error = std::string(st.message());
      out.plugins.push_back(std::move(part));
      continue;
    }
    std::map<uint32_t, const Device*> by_index;
    if (slot->answer != nullptr) {
      for (const Device& d : slot->answer->devices) by_index.emplace(d.index, &d);
    }
    for (DeviceSample& s : report.samples) {
      auto it = by_index.find(s.index);
      if (it == by_index.end()) continue;  // reported since the last scan: next time
      s.device_id = it->second->id;
      s.plugin = slot->name;
      out.devices.push_back(std::move(s));
    }
    part.unknown = std::move(report.unknown);
    part.problems = std::move(report.problems);
    out.plugins.push_back(std::move(part));
  }
  return out;
}

}  // namespace rayaccel
