// A vendor plugin with a direct transport, built out of tree: one "Acme T1" device, and a
// whole transport table from the UCX helper rayaccel installs (rayaccel::ucx_transport), so
// that the vendor inherits its authentication, owner-checked transfers and lost-peer
// detection instead of copying them. It reaches conformance tier 3 (transport).
//
//   find_package(rayaccel REQUIRED COMPONENTS plugin ucx_transport)
//   rayaccel_add_plugin(acme-transport SOURCES transport_plugin.cc
//                       LINK_LIBRARIES rayaccel::ucx_transport)
#include <new>

#include "rayaccel/plugin.h"
#include "rayaccel/ucx_transport.h"

namespace {

constexpr uint32_t kAbiMinor = 3;  // the transport's shared key is 1.3's

rayaccel_string Str(const char* s, size_t n) { return {s, n}; }
#define ACME_STR(lit) Str(lit, sizeof(lit) - 1)

}  // namespace

// The helper's OpenEndpointFor reads `host` from the instance for its log lines.
struct rayaccel_plugin_instance {
  const rayaccel_host_api* host = nullptr;
};

namespace {

rayaccel_status Initialize(rayaccel_initialize_args* args, rayaccel_error* error) {
  auto* self = new (std::nothrow) rayaccel_plugin_instance;
  if (self == nullptr) return rayaccel_error_set(error, RAYACCEL_STATUS_RESOURCE_EXHAUSTED, "oom");
  self->host = args->host;
  args->instance = self;
  return RAYACCEL_STATUS_OK;
}

rayaccel_status Shutdown(rayaccel_plugin_instance* self, rayaccel_error* /*error*/) {
  delete self;
  return RAYACCEL_STATUS_OK;
}

rayaccel_status GetProperties(rayaccel_plugin_instance* /*self*/, rayaccel_plugin_properties* p,
                              rayaccel_error* /*error*/) {
  if (RAYACCEL_HAS_FIELD(p, rayaccel_plugin_properties, vendor)) p->vendor = ACME_STR("acme");
  if (RAYACCEL_HAS_FIELD(p, rayaccel_plugin_properties, resource_name)) {
    p->resource_name = ACME_STR("acme_t1");
  }
  if (RAYACCEL_HAS_FIELD(p, rayaccel_plugin_properties, visible_devices_env)) {
    p->visible_devices_env = ACME_STR("ACME_VISIBLE_DEVICES");
  }
  if (RAYACCEL_HAS_FIELD(p, rayaccel_plugin_properties, plugin_version)) {
    p->plugin_version = ACME_STR("0.1.0");
  }
  return RAYACCEL_STATUS_OK;
}

rayaccel_status Discover(rayaccel_plugin_instance* /*self*/, const rayaccel_sink* sink,
                         rayaccel_error* /*error*/) {
  rayaccel_device_info device{};
  device.struct_size = sizeof(device);
  device.index = 0;
  device.id = ACME_STR("acme-t1-0001");
  device.name = ACME_STR("Acme T1");
  device.accelerator_type = ACME_STR("Acme-T1");
  device.memory_bytes = uint64_t{8} << 30;
  device.numa_node = -1;
  device.health = RAYACCEL_HEALTH_HEALTHY;
  return sink->add_device(sink->host_context, &device);
}

// One device: no links to report.
rayaccel_status GetTopology(rayaccel_plugin_instance* /*self*/, const rayaccel_sink* /*sink*/,
                            rayaccel_error* /*error*/) {
  return RAYACCEL_STATUS_OK;
}

// Acme's devices have no memory UCX can reach: host memory moves, device memory is refused
// with UNSUPPORTED. A vendor whose memory UCX knows names it (DeviceMemory::kCuda, kRocm).
const rayaccel_transport_api kTransport = rayaccel::plugin::ucx::Table(
    &rayaccel::plugin::ucx::OpenEndpointFor<rayaccel::plugin::ucx::DeviceMemory::kNone>);

rayaccel_plugin_api MakeApi() {
  rayaccel_plugin_api api{};
  api.struct_size = sizeof(api);
  api.abi_major = RAYACCEL_ABI_VERSION_MAJOR;
  api.abi_minor = kAbiMinor;
  api.name = ACME_STR("acme-transport");
  api.capabilities = RAYACCEL_CAP_TOPOLOGY | RAYACCEL_CAP_TRANSPORT;
  api.initialize = Initialize;
  api.shutdown = Shutdown;
  api.get_properties = GetProperties;
  api.discover = Discover;
  api.get_topology = GetTopology;
  api.transport = &kTransport;
  return api;
}

const rayaccel_plugin_api kApi = MakeApi();

}  // namespace

extern "C" RAYACCEL_PLUGIN_EXPORT rayaccel_status
rayaccel_plugin_entry(rayaccel_negotiation* negotiation, rayaccel_error* error) {
  if (negotiation->host_abi_major != RAYACCEL_ABI_VERSION_MAJOR) {
    return rayaccel_error_set(error, RAYACCEL_STATUS_INCOMPATIBLE, "built for ABI major 1");
  }
  negotiation->chosen_abi_major = RAYACCEL_ABI_VERSION_MAJOR;
  negotiation->chosen_abi_minor = rayaccel_choose_minor(negotiation->host_abi_minor, kAbiMinor);
  negotiation->api = &kApi;
  return RAYACCEL_STATUS_OK;
}
