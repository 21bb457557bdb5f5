// The host side of rayaccel_sink: collects one plugin's answers, checking each item as it
// arrives. A bad item is dropped with a note in `problems`; the plugin's other answers stay.
#ifndef RAYACCEL_LOADER_COLLECTOR_H_
#define RAYACCEL_LOADER_COLLECTOR_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "rayaccel/plugin.h"
#include "rayaccel/snapshot.h"

namespace rayaccel {

// A link or domain as the plugin reported it, by plugin device index.
struct ReportedLink {
  uint32_t a = 0;
  uint32_t b = 0;
  LinkType type = LinkType::kPcie;
  uint32_t count = 0;
  uint64_t bandwidth_mbps = 0;
  PciePath pcie_path = PciePath::kUnknown;
  uint32_t weight = 0;
  uint32_t hops = 0;
  uint64_t min_bandwidth_mbps = 0;
  std::string type_name = {};  // kOther only
};
struct ReportedDomain {
  std::string kind;
  std::string id;
  std::vector<uint32_t> devices;
};

struct PluginReport {
  std::vector<Device> devices;  // plugin, resource and accelerator type not yet filled
  std::vector<ReportedLink> links;
  std::vector<ReportedDomain> domains;
  std::map<std::string, std::string> labels;
  std::map<uint32_t, std::pair<Health, std::string>> health;
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<std::string> problems;       // items refused, in order
  std::vector<std::string> hook_failures;  // optional hooks that failed ("get_labels failed: ...")
  bool over_limit = false;                 // the plugin sent absurd amounts; distrust it
  std::string no_devices_reason;           // sink.explain_no_devices, escaped; empty: none
};

class Collector {
 public:
  explicit Collector(PluginReport* report);
  Collector(const Collector&) = delete;
  Collector& operator=(const Collector&) = delete;
  const rayaccel_sink* sink() const { return &sink_; }
  // Whether any item was refused: a hook that then fails without a message is only passing
  // the refusal back, which `problems` already explains.
  bool refused_any() const { return refused_any_; }

 private:
  // Sink entry points run inside plugin code: nothing may unwind through it.
  template <auto Fn, typename... Args>
  static rayaccel_status Safe(void* ctx, Args... args) noexcept {
    try {
      static_cast<Collector*>(ctx)->last_refusal_.clear();
      return Fn(ctx, args...);
    } catch (...) {
      return RAYACCEL_STATUS_RESOURCE_EXHAUSTED;
    }
  }

  static rayaccel_status AddDevice(void* ctx, const rayaccel_device_info* device);
  static rayaccel_status AddAttribute(void* ctx, const rayaccel_attribute* attribute);
  static rayaccel_status AddLabel(void* ctx, rayaccel_string key, rayaccel_string value);
  static rayaccel_status AddLink(void* ctx, const rayaccel_link* link);
  static rayaccel_status AddDomain(void* ctx, const rayaccel_domain* domain);
  static rayaccel_status SetHealth(void* ctx, uint32_t device_index, rayaccel_health health,
                                   rayaccel_string reason);
  static rayaccel_status SetEnv(void* ctx, rayaccel_string name, rayaccel_string value);
  static rayaccel_string LastRefusal(void* ctx) noexcept;
  static rayaccel_status ExplainNoDevices(void* ctx, rayaccel_string reason);

  rayaccel_status Refuse(std::string problem);
  rayaccel_status OverLimit(const std::string& what, size_t limit);
  Device* FindDevice(uint32_t index);
  // ReadString, charging the answer's text budget.
  absl::Status Text(rayaccel_string s, absl::string_view prefix, absl::string_view field,
                    std::string* out);

  PluginReport* report_;
  rayaccel_sink sink_{};
  // Indexes over `report_`, so that checking each item stays O(1).
  // Device position by plugin index: indices are small in practice (0..n-1), and a link's
  // two lookups are most of what checking it costs.
  static constexpr uint32_t kDenseIndices = 1 << 16;
  std::vector<uint32_t> dense_;  // position + 1; 0: none
  absl::flat_hash_map<uint32_t, size_t> sparse_;
  absl::flat_hash_set<std::string> device_ids_;
  absl::flat_hash_set<uint64_t> link_keys_;  // min index, max index and type, packed
  absl::flat_hash_set<std::pair<std::string, std::string>> domain_keys_;
  size_t text_bytes_ = 0;
  size_t domain_members_ = 0;
  bool refused_any_ = false;
  bool refused_device_ = false;  // a device was refused: its attributes are folded
  std::string last_refusal_;     // why the last sink call was refused (rayaccel_sink.last_refusal)
  // Each problem listed once: where it stands in report_->problems, and how often it came.
  std::map<std::string, std::pair<size_t, size_t>> repeats_;
};

}  // namespace rayaccel

#endif  // RAYACCEL_LOADER_COLLECTOR_H_
