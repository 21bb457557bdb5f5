// Words and numbers every rendering of a snapshot shares: memory and bandwidth as people read
// them, a link's label, each device's label.
#ifndef RAYACCEL_PRESENT_LABELS_H_
#define RAYACCEL_PRESENT_LABELS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "rayaccel/snapshot.h"

namespace rayaccel::present {

// A text as a table cell: "-" when empty.
inline std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }

// "80.0 GiB" from bytes, "-" when unknown.
std::string Memory(uint64_t bytes);

// "450 GB/s" from MB/s (10^6 bytes per second, each direction), "-" when unknown.
std::string Bandwidth(uint64_t mbps);

// A link as a table cell: "NV18" (NVLink and its count), the PCIe path ("PIX"), or the
// plugin's own name for another kind.
std::string LinkLabel(const Link& l);

// A device's name in tables: its resource and the plugin's index, the number a worker's
// visible-devices variable takes ("GPU5"), prefixed by the plugin ("sim:GPU5") where several
// plugins offer that resource.
std::vector<std::string> DeviceLabels(const NodeSnapshot& s);

}  // namespace rayaccel::present

#endif  // RAYACCEL_PRESENT_LABELS_H_
