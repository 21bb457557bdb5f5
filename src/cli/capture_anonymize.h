// `rayaccel capture --anonymize` (docs/capture.md): a bundle a user can share publicly.
//
// Device ids (UUIDs), partition parents, serial numbers and unique ids, anything shaped like a
// UUID (fabric cluster ids inside domain ids), and hwloc's serials, UUIDs, GUIDs and network
// addresses are replaced by stand-ins of the same shape: a hex digit by a hex digit, a decimal
// digit by a decimal digit, a letter by a letter of the same case, other characters and a
// leading "GPU-"/"MIG-" style prefix or "0x" kept (in hwloc's XML, only <info> values change;
// placeholders such as "00000000" are left). One value gets one stand-in wherever it appears
// (answers, allocation environments, messages, the XML, the manifest's environment), so
// links, domains and allocations still line up. The stand-ins come from a keyed hash with a
// key drawn for each capture and not kept: a short serial cannot be recovered by trying them
// all.
#ifndef RAYACCEL_CLI_CAPTURE_ANONYMIZE_H_
#define RAYACCEL_CLI_CAPTURE_ANONYMIZE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "cli/capture_bundle.h"
#include "rayaccel/registry.h"

namespace rayaccel::cli {

// Scrubs `node` and `manifest` in place; `key` seeds the stand-ins (draw it at random). Fails
// only when a captured report cannot be read back. Returns how many distinct values it
// replaced in `*replaced` when given.
absl::Status Anonymize(uint64_t key, CapturedNode* node, Manifest* manifest,
                       size_t* replaced = nullptr);

}  // namespace rayaccel::cli

#endif  // RAYACCEL_CLI_CAPTURE_ANONYMIZE_H_
