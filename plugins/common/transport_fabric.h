// A transport table that offers both fabrics of plugins/common, UCX (ucx_transport.h) and
// libfabric (ofi_transport.h), choosing one per endpoint:
//
//   const rayaccel_transport_api kTransport =
//       fabric::Table(&fabric::OpenEndpointFor<ucx::DeviceMemory::kNone>);
//
// The fabric is the plugin instance's config key `transport_fabric` where it has one (a
// `transport_fabric` member, which the host's TransportOptions::fabric sets), else
// RAYACCEL_TRANSPORT_FABRIC, else UCX: `ucx` or `libfabric`. Within libfabric, the provider is
// libfabric's own choice (FI_PROVIDER). Every other hook goes to the helper that made the
// handle it is given (transport_handles.h).
#ifndef RAYACCEL_PLUGINS_COMMON_TRANSPORT_FABRIC_H_
#define RAYACCEL_PLUGINS_COMMON_TRANSPORT_FABRIC_H_

#include <string>
#include <type_traits>
#include <utility>

#include "ofi_transport.h"
#include "rayaccel/plugin.h"
#include "ucx_transport.h"

namespace rayaccel::plugin::fabric {

enum class Fabric { kUcx, kLibfabric };

// The fabric `configured` names (empty: RAYACCEL_TRANSPORT_FABRIC's, else UCX); false, with
// why, for a name that is neither.
bool Choose(const std::string& configured, Fabric* out, std::string* why);

template <typename T, typename = void>
struct HasFabric : std::false_type {};
template <typename T>
struct HasFabric<T, std::void_t<decltype(std::declval<T&>().transport_fabric)>> : std::true_type {};

rayaccel_status OpenEndpoint(rayaccel_endpoint_args* args, const std::string& configured,
                             const ucx::EndpointOptions& ucx_options, rayaccel_error* error);

// open_endpoint for an in-tree plugin's instance: as ucx::OpenEndpointFor, and with a
// `std::string transport_fabric` member, the fabric it names.
template <ucx::DeviceMemory kMemory, typename Instance = rayaccel_plugin_instance>
rayaccel_status OpenEndpointFor(rayaccel_endpoint_args* args, rayaccel_error* error) {
  // The handle is opaque: a plugin whose instance is a type of its own (not a definition of
  // rayaccel_plugin_instance) hands the host its pointer cast to the handle's type.
  Instance* self = args != nullptr ? reinterpret_cast<Instance*>(args->instance) : nullptr;
  ucx::EndpointOptions options{kMemory, nullptr, nullptr, {}};
  if constexpr (ucx::HasHost<Instance>::value) {
    if (self != nullptr) options.host = self->host;
  }
  if constexpr (ucx::HasDeviceOps<Instance>::value) {
    if (self != nullptr) options.device_ops = self->device_ops();
  }
  if constexpr (ucx::HasUcxLibrary<Instance>::value) {
    if (self != nullptr) options.ucx_library = self->ucx_library;
  }
  std::string configured;
  if constexpr (HasFabric<Instance>::value) {
    if (self != nullptr) configured = self->transport_fabric;
  }
  return OpenEndpoint(args, configured, options, error);
}

// Every hook but open_endpoint dispatches on its handle.
rayaccel_transport_api Table(rayaccel_status (*open_endpoint)(rayaccel_endpoint_args*,
                                                              rayaccel_error*));

}  // namespace rayaccel::plugin::fabric

#endif  // RAYACCEL_PLUGINS_COMMON_TRANSPORT_FABRIC_H_
