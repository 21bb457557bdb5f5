// The capture bundle (docs/capture.md): one JSON document holding a node's captured plugin
// answers, hwloc's view of it, an environment manifest and the snapshot rayaccel produced,
// from which `--replay` gives the same snapshot on any machine.
#ifndef RAYACCEL_CLI_CAPTURE_BUNDLE_H_
#define RAYACCEL_CLI_CAPTURE_BUNDLE_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "rayaccel/registry.h"

namespace rayaccel::cli {

inline constexpr char kBundleFormat[] = "rayaccel-capture";
inline constexpr int kBundleVersion = 1;
// A bundle larger than this is refused before parsing: a node's answers and hwloc's XML take
// a few MiB at most (examples/nvl72.json, 72 GPUs, captures to 0.8 MiB).
inline constexpr size_t kMaxBundleBytes = size_t{32} << 20;

// Where and with what the capture ran. Environment variables only from an allow-list (the
// visible-devices families, RAY_OVERRIDE_*, TPU_*, RAYACCEL_*), never one whose name says it
// holds a secret; the host name only when asked for.
struct Manifest {
  std::string rayaccel_version;
  std::string abi_version;
  std::string kernel;   // uname -r
  std::string machine;  // uname -m
  std::string os;       // /etc/os-release PRETTY_NAME
  std::string hostname;
  std::map<std::string, std::string> environment;
  std::string hwloc_version;  // the hwloc library in use
  // Accelerator kernel drivers loaded, with the version they declare (/sys/module/M/version;
  // empty for a driver built into the kernel's own tree).
  std::map<std::string, std::string> kernel_modules;
  // Each plugin's vendor stack as its devices reported it.
  struct VendorStack {
    std::string plugin;
    std::string plugin_version;
    std::string vendor;
    std::vector<std::string> driver_versions;                            // distinct, in order met
    std::map<std::string, std::string> firmware;                         // device id -> version
    std::map<std::string, std::vector<std::string>> version_attributes;  // name -> distinct
  };
  std::vector<VendorStack> vendor_stacks;
};
// `sysfs_root` is where /sys/module is looked for ("" is "/").
Manifest CollectManifest(bool include_hostname, const std::string& sysfs_root = "");
// Fills `vendor_stacks` from a snapshot's plugins and devices.
void AddVendorStacks(const NodeSnapshot& snapshot, Manifest* manifest);
std::string ManifestJson(const Manifest& manifest);

// hwloc's export names the host (<info name="HostName" value="..."/>): a bundle keeps it only
// when asked for.
std::string WithoutHostName(std::string hwloc_xml);

// The bundle's text. `snapshot` is what the capture produced, for diffing a replay against.
std::string WriteBundle(const CapturedNode& node, const NodeSnapshot& snapshot,
                        const Manifest& manifest);

struct Bundle {
  CapturedNode node;
  Manifest manifest;
  std::string manifest_json;  // the manifest and the snapshot as JSON text, for Diff
  std::string snapshot_json;
};
// Refuses anything that is not a well-formed bundle of this format and version, naming what
// is wrong; a plugin's answers are checked again by the registry when replayed.
absl::StatusOr<Bundle> ParseBundle(std::string_view text);
absl::StatusOr<Bundle> ReadBundleFile(const std::string& path);

// What differs between two JSON documents (a snapshot or a manifest), one line per leaf:
// "- devices[2].health: healthy" / "+ devices[2].health: unhealthy"; members named in
// `ignore` (the snapshot's generation) are skipped. Empty when they agree.
std::vector<std::string> DiffJson(std::string_view a, std::string_view b,
                                  const std::vector<std::string>& ignore);

}  // namespace rayaccel::cli

#endif  // RAYACCEL_CLI_CAPTURE_BUNDLE_H_
