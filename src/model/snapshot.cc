// The names the snapshot's enumerations are printed with (rayaccel/snapshot.h).
#include "rayaccel/snapshot.h"

namespace rayaccel {

const char* HealthName(Health health) {
  switch (health) {
    case Health::kHealthy:
      return "healthy";
    case Health::kUnhealthy:
      return "unhealthy";
    default:
      return "unknown";
  }
}

const char* LinkTypeName(LinkType type) {
  switch (type) {
    case LinkType::kPcie:
      return "pcie";
    case LinkType::kNvlink:
      return "nvlink";
    case LinkType::kXgmi:
      return "xgmi";
    case LinkType::kIci:
      return "ici";
    case LinkType::kScaleOut:
      return "scale-out";
    default:
      return "other";
  }
}

const char* PciePathName(PciePath path) {
  static constexpr const char* kNames[] = {"", "PIX", "PXB", "PHB", "NODE", "SYS"};
  int i = static_cast<int>(path);
  return i >= 0 && i <= 5 ? kNames[i] : "";
}

const char* PluginStateName(PluginStatus::State state) {
  switch (state) {
    case PluginStatus::State::kActive:
      return "active";
    case PluginStatus::State::kDegraded:
      return "degraded";
    case PluginStatus::State::kFailed:
      return "failed";
    default:
      return "refused";
  }
}

}  // namespace rayaccel
