/*
 * The smallest useful rayaccel plugin, in plain C: two accelerators ("Acme X1") with fixed
 * ids, joined by Acme's own link. It reaches conformance tier 2 (schedulable). Copy this file
 * to start a vendor plugin; docs/writing-a-plugin.md walks through it.
 *
 * Build out of tree against an installed rayaccel:
 *   cmake -S . -B build -DCMAKE_PREFIX_PATH=/path/to/rayaccel/prefix && cmake --build build
 *   rayaccel discover --plugin build/librayaccel-minimal.so
 */
#include <stdlib.h>

#include "rayaccel/plugin.h"

/* The ABI minor version this plugin is written for: 1.2 (a link's type_name, the sink's
 * last_refusal). The table and the negotiation both say it. */
#define MINIMAL_ABI_MINOR 2

#define STR(lit) \
  { (lit), sizeof(lit) - 1 }

/* Per-instance state. A real plugin keeps its vendor library handle here. */
struct rayaccel_plugin_instance {
  const rayaccel_host_api *host;
};

static void plugin_log(const rayaccel_plugin_instance *self, rayaccel_log_level level,
                       rayaccel_string message) {
  if (self->host != NULL && self->host->log != NULL) {
    self->host->log(self->host->host_context, level, message);
  }
}

static rayaccel_status minimal_initialize(rayaccel_initialize_args *args, rayaccel_error *error) {
  rayaccel_plugin_instance *self = calloc(1, sizeof(*self));
  if (self == NULL) return rayaccel_error_set(error, RAYACCEL_STATUS_RESOURCE_EXHAUSTED, "oom");
  self->host = args->host;
  {
    rayaccel_string ready = STR("minimal plugin ready");
    plugin_log(self, RAYACCEL_LOG_INFO, ready);
  }
  args->instance = self;
  return RAYACCEL_STATUS_OK;
}

static rayaccel_status minimal_shutdown(rayaccel_plugin_instance *self, rayaccel_error *error) {
  (void)error;
  free(self);
  return RAYACCEL_STATUS_OK;
}

static rayaccel_status minimal_get_properties(rayaccel_plugin_instance *self,
                                              rayaccel_plugin_properties *props,
                                              rayaccel_error *error) {
  rayaccel_string vendor = STR("acme");
  rayaccel_string resource = STR("acme_x1");
  rayaccel_string env = STR("ACME_VISIBLE_DEVICES");
  rayaccel_string version = STR("0.1.0");
  (void)self;
  (void)error;
  /* The host says how large its struct is; write only what fits. */
  if (RAYACCEL_HAS_FIELD(props, rayaccel_plugin_properties, vendor)) props->vendor = vendor;
  if (RAYACCEL_HAS_FIELD(props, rayaccel_plugin_properties, resource_name)) {
    props->resource_name = resource;
  }
  if (RAYACCEL_HAS_FIELD(props, rayaccel_plugin_properties, visible_devices_env)) {
    props->visible_devices_env = env;
  }
  if (RAYACCEL_HAS_FIELD(props, rayaccel_plugin_properties, plugin_version)) {
    props->plugin_version = version;
  }
  return RAYACCEL_STATUS_OK;
}

static rayaccel_status minimal_discover(rayaccel_plugin_instance *self, const rayaccel_sink *sink,
                                        rayaccel_error *error) {
  static const rayaccel_string kIds[2] = {STR("acme-x1-0001"), STR("acme-x1-0002")};
  rayaccel_string name = STR("Acme X1");
  rayaccel_string type = STR("Acme-X1");
  uint32_t i;
  (void)self;
  (void)error;
  for (i = 0; i < 2; ++i) {
    rayaccel_device_info device = {0};
    rayaccel_status status;
    device.struct_size = sizeof(device);
    device.index = i; /* what ACME_VISIBLE_DEVICES takes */
    device.id = kIds[i];
    device.name = name;
    device.accelerator_type = type; /* Ray has no rule for Acme: name the type ourselves */
    device.memory_bytes = (uint64_t)16 << 30;
    device.numa_node = -1; /* unknown: the host asks hwloc where the PCI address is known */
    device.health = RAYACCEL_HEALTH_HEALTHY;
    status = sink->add_device(sink->host_context, &device);
    if (status != RAYACCEL_STATUS_OK) return status;
  }
  return RAYACCEL_STATUS_OK;
}

/* The two devices are joined by four lanes of Acme's own link, 100 GB/s each way. */
static rayaccel_status minimal_get_topology(rayaccel_plugin_instance *self,
                                            const rayaccel_sink *sink, rayaccel_error *error) {
  rayaccel_link link = {0};
  rayaccel_string link_name = STR("AXL");
  rayaccel_status status;
  (void)error;
  link.struct_size = sizeof(link);
  link.device_a = 0;
  link.device_b = 1;
  link.type = RAYACCEL_LINK_OTHER;
  link.pcie_path = RAYACCEL_PCIE_PATH_UNKNOWN;
  link.count = 4;
  link.bandwidth_mbps = 100000; /* megabytes per second, each direction */
  link.hops = 1;
  link.type_name = link_name;
  status = sink->add_link(sink->host_context, &link);
  if (status == RAYACCEL_STATUS_INVALID_ARGUMENT &&
      RAYACCEL_HAS_FIELD(sink, rayaccel_sink, last_refusal)) {
    /* A 1.2 host says why it refused (an older one only refuses); the host has noted it too,
     * so returning the status passes the refusal back. */
    plugin_log(self, RAYACCEL_LOG_WARN, sink->last_refusal(sink->host_context));
  }
  return status;
}

static const rayaccel_plugin_api kMinimalApi = {
    sizeof(rayaccel_plugin_api),
    RAYACCEL_ABI_VERSION_MAJOR,
    MINIMAL_ABI_MINOR,
    STR("minimal"),
    RAYACCEL_CAP_TOPOLOGY,
    minimal_initialize,
    minimal_shutdown,
    minimal_get_properties,
    minimal_discover,
    NULL, /* get_labels */
    minimal_get_topology,
    NULL, /* get_health */
    NULL, /* wait_health_events */
    NULL, /* validate_quantity */
    NULL, /* prepare_allocation */
    NULL, /* transport */
    NULL, /* get_telemetry */
};

RAYACCEL_PLUGIN_EXPORT rayaccel_status rayaccel_plugin_entry(rayaccel_negotiation *negotiation,
                                                             rayaccel_error *error) {
  if (negotiation->host_abi_major != RAYACCEL_ABI_VERSION_MAJOR) {
    return rayaccel_error_set(error, RAYACCEL_STATUS_INCOMPATIBLE, "built for ABI major 1");
  }
  negotiation->chosen_abi_major = RAYACCEL_ABI_VERSION_MAJOR;
  /* Works with every 1.x host: an older host ignores the fields it does not know. */
  negotiation->chosen_abi_minor =
      rayaccel_choose_minor(negotiation->host_abi_minor, MINIMAL_ABI_MINOR);
  negotiation->api = &kMinimalApi;
  return RAYACCEL_STATUS_OK;
}
