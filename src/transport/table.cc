#include "transport/table.h"

#include "absl/strings/str_cat.h"

namespace rayaccel::transport {

absl::StatusOr<rayaccel_transport_api> TransportTable(const LoadedPlugin& plugin) {
  const rayaccel_plugin_api& api = plugin.api();
  if ((api.capabilities & RAYACCEL_CAP_TRANSPORT) == 0 || api.transport == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("plugin ", plugin.name(), " offers no transport (RAYACCEL_CAP_TRANSPORT)"));
  }
  // Built for a version with the transport, negotiated below it: the negotiation is the bug.
  if (plugin.chosen_minor() < 3 && api.abi_minor >= 3) {
    return absl::UnimplementedError(
        absl::StrCat("plugin ", plugin.name(), " negotiated ABI 1.", plugin.chosen_minor(),
                     " although its table says it was built for 1.", api.abi_minor,
                     ", so the host does not use its transport: set chosen_abi_minor = "
                     "rayaccel_choose_minor(host_abi_minor, ",
                     api.abi_minor, ") in rayaccel_plugin_entry"));
  }
  if (plugin.chosen_minor() < 1) {
    return absl::UnimplementedError(absl::StrCat(
        "plugin ", plugin.name(),
        " speaks ABI 1.0, whose transport table was experimental; rebuild it against 1.3"));
  }
  if (plugin.chosen_minor() < 3) {
    return absl::UnimplementedError(absl::StrCat(
        "plugin ", plugin.name(), " speaks ABI 1.", plugin.chosen_minor(),
        ", whose transport takes no shared key and so admits any peer; rebuild it against 1.3"));
  }
  absl::StatusOr<rayaccel_transport_api> table = CheckTransportTable(api.transport);
  if (!table.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("plugin ", plugin.name(), ": ", table.status().message()));
  }
  // A hook newer than the version both sides chose is not the plugin's to offer.
  if (plugin.chosen_minor() < 5) table->transfer_batch = nullptr;
  return table;
}

}  // namespace rayaccel::transport
