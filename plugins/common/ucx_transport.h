// A complete transport table over UCX (UCP), for any plugin: one-sided READ and WRITE between
// registered regions, notifications, peer-loss detection and descriptor invalidation. A plugin
// says only what memory its devices have:
//
//   const rayaccel_transport_api kTransport =
//       ucx::Table(&ucx::OpenEndpointFor<ucx::DeviceMemory::kCuda>);
//
// libucp.so.0 is loaded with dlopen when the first endpoint opens, so a plugin still loads,
// and discovers, on a host without UCX (open_endpoint then fails with UNAVAILABLE). UCX's own
// variables (UCX_TLS, UCX_NET_DEVICES, UCX_KEEPALIVE_INTERVAL, ...) apply as for any UCX
// program. The wire formats and the invalidation protocol are in docs/transport.md.
#ifndef RAYACCEL_PLUGINS_COMMON_UCX_TRANSPORT_H_
#define RAYACCEL_PLUGINS_COMMON_UCX_TRANSPORT_H_

#include "rayaccel/plugin.h"

namespace rayaccel::plugin::ucx {

// The memory of a plugin's devices, as UCX names it.
enum class DeviceMemory {
  kNone,  // the devices have no memory UCX can reach: only host memory registers
  kCuda,  // UCS_MEMORY_TYPE_CUDA
  kRocm,  // UCS_MEMORY_TYPE_ROCM
};

struct EndpointOptions {
  DeviceMemory device_memory = DeviceMemory::kNone;
  const rayaccel_host_api* host = nullptr;  // for log lines; may be null
};

// The default peer timeout when the host passes 0.
inline constexpr uint32_t kDefaultPeerTimeoutMs = 10000;

rayaccel_status OpenEndpoint(rayaccel_endpoint_args* args, const EndpointOptions& options,
                             rayaccel_error* error);

// open_endpoint for a plugin whose instance type has a `host` member (the in-tree plugins).
template <DeviceMemory kMemory, typename Instance = rayaccel_plugin_instance>
rayaccel_status OpenEndpointFor(rayaccel_endpoint_args* args, rayaccel_error* error) {
  const Instance* self = args != nullptr ? static_cast<const Instance*>(args->instance) : nullptr;
  return OpenEndpoint(args, {kMemory, self != nullptr ? self->host : nullptr}, error);
}

// Every hook but open_endpoint comes from the helper.
rayaccel_transport_api Table(rayaccel_status (*open_endpoint)(rayaccel_endpoint_args*,
                                                              rayaccel_error*));

}  // namespace rayaccel::plugin::ucx

#endif  // RAYACCEL_PLUGINS_COMMON_UCX_TRANSPORT_H_
