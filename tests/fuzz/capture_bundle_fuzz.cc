// `rayaccel --replay FILE` reading a capture bundle: a bundle comes from someone else's machine
// (a bug report), so any bytes must be refused with an error, never a crash; the answers it
// carries then pass the registry's own Collector, and its hwloc XML hwloc's import (which
// asserts on some malformed XML: HostTopology reads such XML in a child first), then the
// questions the registry asks of a loaded topology.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cli/capture_bundle.h"
#include "isolation/report_codec.h"
#include "topology/host_topology.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<rayaccel::cli::Bundle> bundle =
      rayaccel::cli::ParseBundle(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!bundle.ok()) return 0;
  std::vector<std::string> buses;
  for (const rayaccel::CapturedPlugin& plugin : bundle->node.plugins) {
    rayaccel::PluginReport report;
    if (!rayaccel::isolation::DecodeReport(plugin.report, &report).ok()) continue;
    for (const rayaccel::Device& d : report.devices) buses.push_back(d.pci_bus_id);
  }
  if (bundle->node.hwloc_xml.empty()) return 0;
  absl::StatusOr<std::unique_ptr<rayaccel::HostTopology>> host =
      rayaccel::HostTopology::LoadXml(bundle->node.hwloc_xml, "the fuzzed bundle's XML");
  if (!host.ok()) return 0;
  for (const std::string& bus : buses) {
    (void)(*host)->Locate(bus);
    (void)(*host)->PathBetween(bus, buses.front());
  }
  (void)(*host)->NvlinkBandwidth();
  return 0;
}
