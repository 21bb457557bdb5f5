// A plugin that answers as a captured one did (RegistryOptions::replay): its answer is decoded
// through the registry's own Collector, so a replay passes the same checks as the capture.
#ifndef RAYACCEL_REGISTRY_REPLAYED_PLUGIN_H_
#define RAYACCEL_REGISTRY_REPLAYED_PLUGIN_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loader/plugin_handle.h"
#include "rayaccel/registry.h"

namespace rayaccel {

class ReplayedPlugin : public PluginHandle {
 public:
  explicit ReplayedPlugin(CapturedPlugin captured) : captured_(std::move(captured)) {}

  const std::string& name() const override { return captured_.status.name; }
  std::string abi_version() const override { return captured_.status.abi_version; }
  uint64_t capabilities() const override { return captured_.status.capabilities; }
  bool has_prepare_allocation() const override { return captured_.has_prepare_allocation; }
  bool has_validate_quantity() const override { return true; }  // answers from the capture
  absl::Status Initialize(const std::map<std::string, std::string>&) override {
    return absl::OkStatus();
  }
  absl::StatusOr<PluginProperties> GetProperties() const override;
  absl::Status Query(PluginReport* report) override;
  absl::Status ValidateQuantity(uint32_t quantity) const override;
  absl::StatusOr<EnvList> PrepareAllocation(const std::vector<uint32_t>& indices) const override;
  std::string zero_devices_reason() const override { return captured_.zero_devices_reason; }

 private:
  CapturedPlugin captured_;
};

}  // namespace rayaccel

#endif  // RAYACCEL_REGISTRY_REPLAYED_PLUGIN_H_
