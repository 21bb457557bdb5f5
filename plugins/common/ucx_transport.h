// A complete transport table over UCX (UCP), for any plugin: one-sided READ and WRITE between
// registered regions, notifications, peer-loss detection and descriptor invalidation. A plugin
// says only what memory its devices have:
//
//   const rayaccel_transport_api kTransport =
//       ucx::Table(&ucx::OpenEndpointFor<ucx::DeviceMemory::kCuda>);
//
// libucp.so.0 (or the library EndpointOptions::ucx_library names: the in-tree plugins' config
// key ucx_library) is loaded with dlopen when the first endpoint opens, so a plugin still loads,
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

  // Device to device between two processes on one host (CUDA or HIP IPC). Optional: where
  // Export or Import says UNSUPPORTED the helper stages instead.
  // The handle another process maps [address, address + length) of device `device` with.
  // Only one whole allocation exports: a mapping reaches the whole allocation, so a region
  // that is less would give a peer more than the region.
  virtual rayaccel_status Export(const void* /*address*/, uint64_t /*length*/, uint32_t /*device*/,
                                 std::string* /*handle*/, std::string* why) {
    *why = "the plugin maps no device memory between processes";
    return RAYACCEL_STATUS_UNSUPPORTED;
  }
  // Maps a handle another process exported from its device `device` (the plugin's index,
  // the same on every process of the host): exactly `length` bytes, or INVALID_ARGUMENT.
  virtual rayaccel_status Import(const std::string& /*handle*/, uint32_t /*device*/,
                                 uint64_t /*length*/, void** /*mapped*/, std::string* why) {
    *why = "the plugin maps no device memory between processes";
    return RAYACCEL_STATUS_UNSUPPORTED;
  }
  virtual void Unimport(void* /*mapped*/, uint32_t /*device*/) {}
  // Page-locked host memory for staged pieces (usable from every device of the process), so
  // that their copies run at the bus's speed and need no bounce of the driver's own. Optional:
  // where HostAlloc says UNSUPPORTED or fails, pieces go through pageable memory.
  virtual rayaccel_status HostAlloc(uint32_t /*device*/, uint64_t /*length*/, void** /*host*/,
                                    std::string* why) {
    *why = "the plugin has no page-locked host memory";
    return RAYACCEL_STATUS_UNSUPPORTED;
  }
  virtual void HostFree(void* /*host*/, uint32_t /*device*/) {}
  // Copies between memory of device `device` (its own, or mapped by Import) and host memory
  // or another device's, on a stream of the transport's own; returns once the bytes landed.
  virtual rayaccel_status Copy(void* /*to*/, const void* /*from*/, uint64_t /*length*/,
                               uint32_t /*device*/, std::string* why) {
    *why = "the plugin copies no device memory itself";
    return RAYACCEL_STATUS_UNSUPPORTED;
  }
};

struct EndpointOptions {
  DeviceMemory device_memory = DeviceMemory::kNone;
  const rayaccel_host_api* host = nullptr;  // for log lines; may be null
  // Staging for device memory where UCX cannot reach it; null: device memory needs a UCX
  // built with the memory type.
  DeviceMemoryOps* device_ops = nullptr;
  // The libucp to load (a site's UCX built with CUDA or ROCm support, say); empty:
  // libucp.so.0. The first endpoint of the process loads it; later ones must name the same.
  std::string ucx_library;
};

template <typename T, typename = void>
struct HasUcxLibrary : std::false_type {};
template <typename T>
struct HasUcxLibrary<T, std::void_t<decltype(std::declval<T&>().ucx_library)>> : std::true_type {};
template <typename T, typename = void>
struct HasHost : std::false_type {};
template <typename T>
struct HasHost<T, std::void_t<decltype(std::declval<T&>().host)>> : std::true_type {};
template <typename T, typename = void>
struct HasDeviceOps : std::false_type {};
template <typename T>
struct HasDeviceOps<T, std::void_t<decltype(std::declval<T&>().device_ops())>> : std::true_type {};

// The default peer timeout when the host passes 0.
inline constexpr uint32_t kDefaultPeerTimeoutMs = 10000;

rayaccel_status OpenEndpoint(rayaccel_endpoint_args* args, const EndpointOptions& options,
                             rayaccel_error* error);

// open_endpoint for a plugin whose instance is `Instance` (by default the plugin's definition of
// rayaccel_plugin_instance): with a `host` member, the helper has the host's API; with a
// `device_ops()` member, its devices' memory is staged where UCX cannot reach it; with a
// `std::string ucx_library` member, that UCX is loaded.
template <DeviceMemory kMemory, typename Instance = rayaccel_plugin_instance>
rayaccel_status OpenEndpointFor(rayaccel_endpoint_args* args, rayaccel_error* error) {
  // The handle is opaque: a plugin whose instance is a type of its own (not a definition of
  // rayaccel_plugin_instance) hands the host its pointer cast to the handle's type.
  Instance* self = args != nullptr ? reinterpret_cast<Instance*>(args->instance) : nullptr;
  EndpointOptions options{kMemory, nullptr, nullptr, {}};
  if constexpr (HasHost<Instance>::value) {
    if (self != nullptr) options.host = self->host;
  }
  if constexpr (HasDeviceOps<Instance>::value) {
    if (self != nullptr) options.device_ops = self->device_ops();
  }
  if constexpr (HasUcxLibrary<Instance>::value) {
    if (self != nullptr) options.ucx_library = self->ucx_library;
  }
  return OpenEndpoint(args, options, error);
}

// Every hook but open_endpoint comes from the helper.
rayaccel_transport_api Table(rayaccel_status (*open_endpoint)(rayaccel_endpoint_args*,
                                                              rayaccel_error*));

}  // namespace rayaccel::plugin::ucx

#endif  // RAYACCEL_PLUGINS_COMMON_UCX_TRANSPORT_H_
