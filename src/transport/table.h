// The checks a plugin's transport table must pass before the host calls it, shared by
// Transport::Open and the conformance suite.
#ifndef RAYACCEL_TRANSPORT_TABLE_H_
#define RAYACCEL_TRANSPORT_TABLE_H_

#include "absl/status/statusor.h"
#include "loader/plugin_loader.h"
#include "loader/transport_table.h"  // CheckTransportTable, the raw table's checks
#include "rayaccel/plugin.h"

namespace rayaccel::transport {

// The plugin's transport table, copied into a zeroed host-size struct, or why the host will
// not use it: no RAYACCEL_CAP_TRANSPORT, an ABI 1.0 plugin (whose table was experimental and
// had another shape), a table smaller than 1.1's, or a hook left NULL.
absl::StatusOr<rayaccel_transport_api> TransportTable(const LoadedPlugin& plugin);

}  // namespace rayaccel::transport

#endif  // RAYACCEL_TRANSPORT_TABLE_H_
