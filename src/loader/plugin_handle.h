// What the registry needs from a plugin, wherever it runs: in this process (LoadedPlugin) or
// in a child process of its own (RemotePlugin, docs/conformance.md "isolation").
#ifndef RAYACCEL_LOADER_PLUGIN_HANDLE_H_
#define RAYACCEL_LOADER_PLUGIN_HANDLE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "loader/collector.h"
#include "loader/telemetry.h"

namespace rayaccel {

// get_properties, checked (bounded UTF-8 strings).
struct PluginProperties {
  std::string vendor;
  std::string resource_name;
  std::string visible_devices_env;
  std::string plugin_version;
};

using EnvList = std::vector<std::pair<std::string, std::string>>;

class PluginHandle {
 public:
  virtual ~PluginHandle() = default;

  virtual const std::string& name() const = 0;
  virtual std::string abi_version() const = 0;
  virtual uint64_t capabilities() const = 0;
  virtual bool has_prepare_allocation() const = 0;
  // Whether ValidateQuantity asks the plugin (it has the hook); without it every quantity is
  // allowed, and the registry does not call.
  virtual bool has_validate_quantity() const = 0;

  virtual absl::Status Initialize(const std::map<std::string, std::string>& config) = 0;
  virtual absl::StatusOr<PluginProperties> GetProperties() const = 0;
  // discover, then get_labels, get_topology and get_health where offered, into `report`
  // (every item checked by a Collector). An error means discover itself failed.
  virtual absl::Status Query(PluginReport* report) = 0;
  // The same answer, shared: for a caller that may only compare it with the last one
  // (Registry::Rescan). An isolated plugin whose answer did not change hands back the one it
  // holds, uncopied. By default, Query into a new report.
  virtual absl::Status QueryShared(std::shared_ptr<const PluginReport>* report);
  // OK when the plugin has no validate_quantity hook.
  virtual absl::Status ValidateQuantity(uint32_t quantity) const = 0;
  virtual absl::StatusOr<EnvList> PrepareAllocation(const std::vector<uint32_t>& indices) const = 0;
  // Why the plugin found no device, as "0 devices: <reason>": its latest sink.explain_no_devices
  // (1.6), else its latest log line starting so; empty when it said neither.
  virtual std::string zero_devices_reason() const = 0;
  // Blocks up to `timeout_ms` for health changes (wait_health_events), reporting them into
  // `report->health`. OK with changes, DeadlineExceeded without, Unimplemented when the
  // plugin cannot watch. Thread-safe with the other calls, as the ABI requires of the hook.
  virtual absl::Status WaitHealthEvents(uint32_t /*timeout_ms*/, PluginReport* /*report*/) {
    return absl::UnimplementedError("not watched in this mode");
  }

  // get_telemetry for the devices of the last Query, every sample checked (SampleCollector).
  // Unimplemented when the plugin has no such hook (or negotiated below 1.6).
  virtual absl::Status Telemetry(TelemetryReport* /*report*/) {
    return absl::UnimplementedError("the plugin has no get_telemetry");
  }

  // Appends bytes that identify `report`, the last Query's answer: equal bytes mean equal
  // answers (Registry::Rescan skips its work when nothing changed). By default, its encoding.
  virtual void AppendAnswerKey(const PluginReport& report, std::string* key) const;

  // False for an isolated plugin whose process died; it must be started again.
  virtual bool alive() const { return true; }
};

}  // namespace rayaccel

#endif  // RAYACCEL_LOADER_PLUGIN_HANDLE_H_
