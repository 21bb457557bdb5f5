// The host's envelope around a plugin's packed descriptor: what every descriptor says about
// its region in a fixed, checksummed layout (docs/transport.md), so that a truncated,
// corrupted, oversized or foreign descriptor is refused before any plugin sees it.
#ifndef RAYACCEL_TRANSPORT_DESCRIPTOR_H_
#define RAYACCEL_TRANSPORT_DESCRIPTOR_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rayaccel/transport.h"

namespace rayaccel::transport {

inline constexpr size_t kHeaderBytes = 80;
inline constexpr size_t kMaxPluginName = 32;
inline constexpr uint16_t kLayoutVersion = 1;

struct Envelope {
  DescriptorInfo info;
  absl::string_view payload;  // the plugin's bytes, inside the decoded input
};

// `payload` wrapped in a version-1 envelope. Fails when the result would exceed
// Transport::kMaxDescriptorBytes or the plugin name is too long.
absl::StatusOr<std::string> Encode(const DescriptorInfo& info, absl::string_view payload);

// The envelope of `bytes`, checked: InvalidArgument for anything that is not a well-formed
// version-1 descriptor, DataLoss when only the checksum disagrees.
absl::StatusOr<Envelope> Decode(absl::string_view bytes);

uint32_t Crc32c(absl::string_view bytes);

}  // namespace rayaccel::transport

#endif  // RAYACCEL_TRANSPORT_DESCRIPTOR_H_
