// Checks on what plugins return: text, label syntax, PCI bus ids. Pure functions.
#ifndef RAYACCEL_MODEL_VALIDATE_H_
#define RAYACCEL_MODEL_VALIDATE_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace rayaccel {

// Limits on what a plugin may hand over; past them the answer is refused as absurd.
inline constexpr size_t kMaxStringBytes = 1024;
inline constexpr size_t kMaxDevicesPerPlugin = 4096;
inline constexpr size_t kMaxAttributesPerDevice = 256;
inline constexpr size_t kMaxLinksPerPlugin = 1 << 20;
inline constexpr size_t kMaxDomainsPerPlugin = 4096;
inline constexpr size_t kMaxLabelsPerPlugin = 256;
inline constexpr size_t kMaxDomainMembersPerPlugin = 1 << 20;  // over all domains
// All the text of one answer together (ids, names, attribute values, ...): each string is
// bounded, and this bounds their sum, so an answer's size is bounded in every mode.
inline constexpr size_t kMaxTextBytesPerReport = size_t{64} << 20;
inline constexpr uint64_t kMaxMemoryBytes = uint64_t{1} << 50;  // 1 PiB per device
inline constexpr uint32_t kMaxLinkCount = 1024;
// 100 TB/s per link: far above any fabric, low enough that scores summed over every pair of
// 4096 devices stay inside int64 (docs/topology.md).
inline constexpr uint64_t kMaxLinkBandwidthMbps = 100'000'000;

bool IsValidUtf8(absl::string_view text);

// Plugin text made safe for a terminal and a log line: control characters (C0, DEL and the
// C1 range, which terminals also obey) become visible escapes (\n, \r, \t, \x1b, \u009b),
// so no plugin can colour, clear or forge lines of what an operator reads.
std::string EscapeControl(absl::string_view text);

// Bounded, valid UTF-8, no control characters. `what` names the field in the error.
absl::Status CheckText(absl::string_view text, absl::string_view what);

// Kubernetes label key: optional DNS-subdomain prefix (<= 253) and '/', then a name
// (<= 63) of [A-Za-z0-9] at both ends and [-A-Za-z0-9_.] inside.
absl::Status CheckLabelKey(absl::string_view key);
// Kubernetes label value: empty, or <= 63 with the name rules.
absl::Status CheckLabelValue(absl::string_view value);

// Whether prepare_allocation may set `name`: only variables of the plugin's visible-devices
// family, those that share the first word of `visible_devices_env` (CUDA_VISIBLE_DEVICES:
// CUDA_*; TPU_VISIBLE_CHIPS: TPU_*), and the one Ray's own manager writes beside it
// (ZE_AFFINITY_MASK: ONEAPI_DEVICE_SELECTOR, as intel_gpu.py does). Never LD_PRELOAD, PATH or
// anything else a worker's process would run differently with.
bool InVisibleDevicesFamily(absl::string_view name, absl::string_view visible_devices_env);

// Accepts "dddd:bb:dd.f", "bb:dd.f" (domain 0) and NVML's "DDDDDDDD:BB:DD.F", any case;
// returns the canonical lower-case "dddd:bb:dd.f", or nullopt when malformed.
std::optional<std::string> NormalizePciBusId(absl::string_view text);

}  // namespace rayaccel

#endif  // RAYACCEL_MODEL_VALIDATE_H_
