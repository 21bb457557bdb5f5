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

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "rayaccel/plugin.h"

namespace rayaccel::plugin::ucx {

// The memory of a plugin's devices, as UCX names it.
enum class DeviceMemory {
  kNone,  // the devices have no memory UCX can reach: only host memory registers
  kCuda,  // UCS_MEMORY_TYPE_CUDA
  kRocm,  // UCS_MEMORY_TYPE_ROCM
};

// What a plugin's own driver does with its devices' memory, for a UCX that cannot reach it
// (Debian's has no CUDA or ROCm support): the helper then stages device memory through host
// memory, copying with these on each side, so that device memory moves between any two
// endpoints UCX connects. Each call is synchronous and may come from any thread; a failure
// says why in `why` (the driver's own words). Owned by the plugin instance, which outlives
// its endpoints.
class DeviceMemoryOps {
 public:
  virtual ~DeviceMemoryOps() = default;
  // Whether [address, address + length) lies in one allocation on device `device` (the
  // plugin's device index): INVALID_ARGUMENT for a foreign, freed or host pointer, another
  // device's memory or a range past the allocation's end; UNSUPPORTED for a device whose
  // memory the plugin cannot copy (a MIG instance, say).
  virtual rayaccel_status Check(const void* address, uint64_t length, uint32_t device,
                                std::string* why) = 0;
  virtual rayaccel_status Allocate(uint32_t device, uint64_t length, void** address,
                                   std::string* why) = 0;
  virtual void Free(void* address, uint32_t device) = 0;
  virtual rayaccel_status ToHost(void* host, const void* device_memory, uint64_t length,
                                 uint32_t device, std::string* why) = 0;
  virtual rayaccel_status FromHost(void* device_memory, const void* host, uint64_t length,
                                   uint32_t device, std::string* why) = 0;
};

struct EndpointOptions {
  DeviceMemory device_memory = DeviceMemory::kNone;
  const rayaccel_host_api* host = nullptr;  // for log lines; may be null
  // Staging for device memory where UCX cannot reach it; null: device memory needs a UCX
  // built with the memory type.
  DeviceMemoryOps* device_ops = nullptr;
};

template <typename T, typename = void>
struct HasDeviceOps : std::false_type {};
template <typename T>
struct HasDeviceOps<T, std::void_t<decltype(std::declval<T&>().device_ops())>> : std::true_type {};

// The default peer timeout when the host passes 0.
inline constexpr uint32_t kDefaultPeerTimeoutMs = 10000;

rayaccel_status OpenEndpoint(rayaccel_endpoint_args* args, const EndpointOptions& options,
                             rayaccel_error* error);

// open_endpoint for a plugin whose instance type has a `host` member (the in-tree plugins);
// with a `device_ops()` member too, its devices' memory is staged where UCX cannot reach it.
template <DeviceMemory kMemory, typename Instance = rayaccel_plugin_instance>
rayaccel_status OpenEndpointFor(rayaccel_endpoint_args* args, rayaccel_error* error) {
  Instance* self = args != nullptr ? static_cast<Instance*>(args->instance) : nullptr;
  EndpointOptions options{kMemory, self != nullptr ? self->host : nullptr, nullptr};
  if constexpr (HasDeviceOps<Instance>::value) {
    if (self != nullptr) options.device_ops = self->device_ops();
  }
  return OpenEndpoint(args, options, error);
}

// Every hook but open_endpoint comes from the helper.
rayaccel_transport_api Table(rayaccel_status (*open_endpoint)(rayaccel_endpoint_args*,
                                                              rayaccel_error*));

}  // namespace rayaccel::plugin::ucx

#endif  // RAYACCEL_PLUGINS_COMMON_UCX_TRANSPORT_H_
