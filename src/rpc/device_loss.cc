#include "rpc/device_loss.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "util/log_line.h"

namespace rayaccel::rpc {

absl::StatusOr<OnDeviceLoss> ParseOnDeviceLoss(const std::string& text) {
  if (text == "report") return OnDeviceLoss::kReport;
  if (text == "drain") return OnDeviceLoss::kDrain;
  return absl::InvalidArgumentError(
      absl::StrCat("--on-device-loss takes report or drain, not \"", text, "\""));
}

const char* OnDeviceLossName(OnDeviceLoss policy) {
  return policy == OnDeviceLoss::kDrain ? "drain" : "report";
}

namespace {

// Whether the plugin that owns `resource` still answers in `snap` (its devices are then what
// it found, and a missing one is gone; a plugin that failed hides nothing on purpose).
bool OwnerAnswers(const NodeSnapshot& snap, const Device& device) {
  for (const PluginStatus& p : snap.plugins) {
    if (p.name != device.plugin) continue;
    return p.state == PluginStatus::State::kActive || p.state == PluginStatus::State::kDegraded;
  }
  return false;
}

std::string Describe(const LostDevice& d) {
  return absl::StrCat(d.resource, " ", d.id, d.name.empty() ? "" : absl::StrCat(" (", d.name, ")"),
                      ": ", d.reason);
}

}  // namespace

DeviceLossWatch::DeviceLossWatch(Registry* registry, DeviceLossOptions options)
    : options_(std::move(options)) {
  state_.policy = options_.policy;
  std::shared_ptr<const NodeSnapshot> first = registry->snapshot();
  for (const Device& d : first->devices) {
    if (d.health != Health::kUnhealthy) given_.push_back(d);
  }
  if (options_.policy == OnDeviceLoss::kDrain) drainer_ = std::thread([this] { DrainLoop(); });
  // Called at once with the current snapshot, then with each newer one.
  subscription_ = registry->Subscribe(
      [this](const std::shared_ptr<const NodeSnapshot>& snap) { Observe(*snap); });
}

DeviceLossWatch::~DeviceLossWatch() {
  subscription_.reset();  // no Observe runs after this
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (drainer_.joinable()) drainer_.join();
}

DeviceLossState DeviceLossWatch::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

void DeviceLossWatch::Observe(const NodeSnapshot& snap) {
  std::vector<LostDevice> lost;
  for (const Device& given : given_) {
    auto now = std::find_if(snap.devices.begin(), snap.devices.end(),
                            [&](const Device& d) { return d.id == given.id; });
    std::string reason;
    if (now == snap.devices.end()) {
      if (!OwnerAnswers(snap, given)) continue;
      reason = "no longer discovered";
    } else if (now->health == Health::kUnhealthy) {
      reason = now->health_reason.empty() ? "unhealthy" : now->health_reason;
    } else {
      continue;
    }
    lost.push_back({given.id, given.resource, given.name, std::move(reason),
                    std::chrono::system_clock::now()});
  }
  bool added = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (LostDevice& d : lost) {
      if (!lost_ids_.insert(d.id).second) continue;
      LogAt(LogLevel::kWarning, "device lost after start: {}; {}", Describe(d),
            options_.policy == OnDeviceLoss::kDrain
                ? "asking Ray to drain this node (--on-device-loss drain)"
                : "Ray still schedules onto this node (--on-device-loss report)");
      state_.lost.push_back(std::move(d));
      added = true;
    }
  }
  if (added) wake_.notify_all();
}

void DeviceLossWatch::DrainLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  std::chrono::milliseconds retry = options_.min_retry;
  while (true) {
    wake_.wait(lock, [&] { return stop_ || (!state_.lost.empty() && !state_.drained); });
    if (stop_) return;
    std::string message = "rayaccel: ";
    for (size_t i = 0; i < state_.lost.size(); ++i) {
      absl::StrAppend(&message, i == 0 ? "" : "; ", Describe(state_.lost[i]));
    }
    lock.unlock();
    absl::StatusOr<std::string> node =
        options_.node_id ? options_.node_id() : absl::FailedPreconditionError("no node id");
    const std::string node_id = node.ok() ? *node : std::string();
    absl::Status drained = node.ok()
                               ? DrainNode(options_.gcs, node_id, message)
                               : absl::FailedPreconditionError(absl::StrCat(
                                     "Ray's node id is not known: ", node.status().message()));
    lock.lock();
    state_.drain_requested = true;
    ++state_.drain_attempts;
    state_.node_id = node_id;
    state_.drain_message = message;
    if (drained.ok()) {
      state_.drained = true;
      state_.drain_error.clear();
      state_.drained_at = std::chrono::system_clock::now();
      LogAt(LogLevel::kWarning, "Ray's GCS drains node {}: no new work lands here ({})", node_id,
            message);
      continue;  // waits for stop
    }
    state_.drain_error = std::string(drained.message());
    LogAt(LogLevel::kError, "cannot drain node {} (attempt {}, again in {} ms): {}",
          node_id.empty() ? "(unknown)" : node_id, state_.drain_attempts, retry.count(),
          state_.drain_error);
    if (wake_.wait_for(lock, retry, [&] { return stop_; })) return;
    retry = std::min(retry * 2, options_.max_retry);
  }
}

}  // namespace rayaccel::rpc
