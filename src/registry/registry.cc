// The public Registry (rayaccel/registry.h) over Registry::Impl (registry_impl.h).
#include "rayaccel/registry.h"

#include <memory>
#include <utility>

#include "isolation/report_codec.h"
#include "registry/registry_impl.h"
#include "util/log.h"

namespace rayaccel {

void PluginHandle::AppendAnswerKey(const PluginReport& report, std::string* key) const {
  isolation::EncodeReport(report, key);
}

absl::Status PluginHandle::QueryShared(std::shared_ptr<const PluginReport>* report) {
  auto fresh = std::make_shared<PluginReport>();
  absl::Status st = Query(fresh.get());
  *report = std::move(fresh);
  return st;
}

Registry::Registry(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Registry::~Registry() { impl_->Shutdown(); }

void Registry::Shutdown() { impl_->Shutdown(); }
RegistryStats Registry::stats() const { return impl_->stats(); }

Registry::Subscription::~Subscription() {
  if (std::shared_ptr<Impl> impl = impl_.lock()) impl->Unsubscribe(id_);
}

std::unique_ptr<Registry::Subscription> Registry::Subscribe(
    std::function<void(std::shared_ptr<const NodeSnapshot>)> on_snapshot) {
  std::unique_ptr<Subscription> s(new Subscription());
  s->impl_ = impl_;
  s->id_ = impl_->Subscribe(std::move(on_snapshot));
  return s;
}

absl::StatusOr<std::unique_ptr<Registry>> Registry::Create(RegistryOptions options) {
  if (!options.sole_plugin_config.empty() && options.plugins.size() != 1) {
    return absl::InvalidArgumentError(
        "configuration without a plugin name needs exactly one plugin: name it (PLUGIN.KEY)");
  }
  const uint64_t log_token = SetLogSink(options.log_level, options.log_callback);
  auto impl = std::make_shared<Impl>(std::move(options));
  impl->set_log_token(log_token);
  if (absl::Status st = impl->Load(); !st.ok()) return st;
  impl->StartPlugins();
  std::unique_ptr<Registry> registry(new Registry(std::move(impl)));
  registry->Rescan();
  registry->impl_->StartWatching();
  return registry;
}

std::shared_ptr<const NodeSnapshot> Registry::snapshot() const { return impl_->snapshot(); }
absl::StatusOr<CapturedNode> Registry::Capture() const { return impl_->Capture(); }
std::shared_ptr<const NodeSnapshot> Registry::Rescan() { return impl_->Rescan(); }

std::shared_ptr<const NodeSnapshot> Registry::WaitForNewer(
    uint64_t generation, std::chrono::milliseconds timeout) const {
  return impl_->WaitForNewer(generation, timeout);
}

absl::Status Registry::ValidateQuantity(const std::string& resource, uint32_t quantity) const {
  return impl_->ValidateQuantity(resource, quantity);
}

Telemetry Registry::SampleTelemetry() const { return impl_->SampleTelemetry(); }

absl::StatusOr<Allocation> Registry::PreferredAllocation(
    const std::vector<std::string>& available, const std::vector<std::string>& must_include,
    size_t size, const std::string& resource) const {
  return impl_->PreferredAllocation(available, must_include, size, resource);
}

absl::StatusOr<std::map<std::string, std::string>> Registry::PrepareAllocation(
    const std::vector<std::string>& device_ids, uint64_t generation) const {
  return impl_->PrepareAllocation(device_ids, generation);
}

absl::StatusOr<std::map<std::string, std::string>> Registry::PrepareAllocationAt(
    const std::vector<size_t>& positions, uint64_t generation) const {
  return impl_->PrepareAllocationAt(positions, generation);
}

}  // namespace rayaccel
