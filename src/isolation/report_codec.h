// A plugin's checked answer (PluginReport) as bytes, for the plugin host's replies.
//
// The plugin host runs the same Collector as an in-process registry, so the plugin meets the
// same rules, limits and sink answers in both modes; the report it built crosses the socket
// in this compact binary form. The registry decodes it by replaying every item through its
// own Collector: whatever a corrupted host sends is checked again on this side.
//
// Format (little-endian; str = u32 size + bytes):
//   u32 magic 'RARP'
//   u32 devices     { u32 index, str id, str name, str accelerator_type, str architecture,
//                     u64 memory_bytes, str pci_bus_id, u32 pci_vendor_id, u32 pci_device_id,
//                     i32 numa_node, str driver_version, str firmware_version, str parent_id,
//                     str partition_profile, u32 health, str health_reason,
//                     u32 attributes { str name, u32 kind, str string_value, i64 int_value } }
//   u32 links       { u32 a, u32 b, u32 type, u32 count, u64 bandwidth_mbps, u32 pcie_path,
//                     u32 weight, u32 hops, u64 min_bandwidth_mbps }
//   u32 domains     { str kind, str id, u32 members { u32 index } }
//   u32 labels      { str key, str value }
//   u32 health      { u32 index, u32 health, str reason }
//   u32 env         { str name, str value }
//   u32 problems    { str }
//   u32 hook_failures { str }
//   u8  over_limit
// Enum fields travel as raw integers; plugin.h's enums hold any 32-bit value in C++, and the
// Collector refuses those outside the enumerators.
#ifndef RAYACCEL_ISOLATION_REPORT_CODEC_H_
#define RAYACCEL_ISOLATION_REPORT_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "isolation/report_walk.h"
#include "loader/collector.h"
#include "model/validate.h"

namespace rayaccel::isolation {

// The largest encoding of a report within the Collector's limits: what the wire must carry
// for every answer the registry would accept in-process.
inline constexpr size_t kMaxEncodedReportBytes =
    64 +                                                            // magic, counts, flag
    kMaxDevicesPerPlugin * (4 * 6 + 8 + 4 * 10 + 4) +               // device fields, string sizes
    kMaxDevicesPerPlugin * kMaxAttributesPerDevice * (3 * 4 + 8) +  // attributes
    kMaxLinksPerPlugin * (8 * 4 + 2 * 8) +                          // links, type_name size
    kMaxDomainsPerPlugin * 12 + kMaxDomainMembersPerPlugin * 4 +    // domains
    kMaxLabelsPerPlugin * 8 * 2 +                                   // labels and env
    kMaxDevicesPerPlugin * 12 +                                     // health
    2 * kMaxNotes * (4 + kMaxNoteBytes) +                           // problems, hook failures
    kMaxTextBytesPerReport + 16 * kMaxStringBytes;                  // the text, and one item over

// Appends `report`'s encoding to `out`.
void EncodeReport(const PluginReport& report, std::string* out);
// Whether `report` encodes to exactly `encoding`: the plugin host's "unchanged", without
// building the encoding.
bool EncodesAs(const PluginReport& report, absl::string_view encoding);

// A plugin host's answer to "query" and "prepare_allocation":
//   'R' u64 answer id, u8 unchanged, str discover error, str zero-devices reason, [report]
// A query names the answer the registry holds ("have"); when the plugin's new answer encodes
// to the same bytes, the host says "unchanged" and sends no report: a steady rescan costs one
// small round trip. `report` is the encoded report (empty when unchanged).
struct ReportReply {
  uint64_t answer_id = 0;
  bool unchanged = false;
  std::string discover_error;  // empty when discover succeeded
  std::string zero_devices_reason;
  absl::string_view report;
};
std::string EncodeReportReply(const ReportReply& reply);
// Texts are bounded (kMaxNoteBytes) and kept as the plugin gave them, as an in-process
// registry keeps them (printing escapes them); `report` points into `frame`.
absl::StatusOr<ReportReply> DecodeReportReply(absl::string_view frame);

// Rebuilds a report from `bytes` through a Collector of this process into `report`. Every
// count is checked against the limits and the bytes left before anything is built, so no
// input makes this allocate more than the report it describes. DataLoss on malformed bytes.
absl::Status DecodeReport(absl::string_view bytes, PluginReport* report);

}  // namespace rayaccel::isolation

#endif  // RAYACCEL_ISOLATION_REPORT_CODEC_H_
