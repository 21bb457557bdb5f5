// The ABI's rules for a plugin's transport table, checked by the loader when a plugin claims
// RAYACCEL_CAP_TRANSPORT and again by the transport layer before it calls a hook.
#ifndef RAYACCEL_LOADER_TRANSPORT_TABLE_H_
#define RAYACCEL_LOADER_TRANSPORT_TABLE_H_

#include "absl/status/statusor.h"
#include "rayaccel/plugin.h"

namespace rayaccel {

// The table (at least 1.1's size, no hook left NULL), copied into a zeroed host-size struct,
// or why the host will not use it.
absl::StatusOr<rayaccel_transport_api> CheckTransportTable(const rayaccel_transport_api* table);

}  // namespace rayaccel

#endif  // RAYACCEL_LOADER_TRANSPORT_TABLE_H_
