/*
 * The smallest useful rayaccel plugin, in plain C: one accelerator ("Acme X1") with a fixed
 * id. Copy this file to start a vendor plugin; docs/writing-a-plugin.md walks through it.
 *
 * Build out of tree against an installed rayaccel:
 *   cmake -S . -B build -DCMAKE_PREFIX_PATH=/path/to/rayaccel/prefix && cmake --build build
 *   rayaccel discover --plugin build/librayaccel-minimal.so
 */
#include <stdlib.h>

#include "rayaccel/plugin.h"

#define STR(lit) \
  { (lit), sizeof(lit) - 1 }

/* Per-instance state. A real plugin keeps its vendor library handle here. */
struct rayaccel_plugin_instance {
  const rayaccel_host_api *host;
};

static void log_info(const rayaccel_plugin_instance *self, const char *text, size_t size) {
  rayaccel_string message;
  message.data = text;
  message.size = size;
  if (self->host != NULL && self->host->log != NULL) {
    self->host->log(self->host->host_context, RAYACCEL_LOG_INFO, message);
  }
}

static rayaccel_status minimal_initialize(rayaccel_initialize_args *args, rayaccel_error *error) {
  rayaccel_plugin_instance *self = calloc(1, sizeof(*self));
  if (self == NULL) return rayaccel_error_set(error, RAYACCEL_STATUS_RESOURCE_EXHAUSTED, "oom");
  self->host = args->host;
  log_info(self, "minimal plugin ready", 20);
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
  rayaccel_device_info device = {0};
  rayaccel_string id = STR("acme-x1-0001");
  rayaccel_string name = STR("Acme X1");
  rayaccel_string type = STR("Acme-X1");
  (void)self;
  (void)error;
  device.struct_size = sizeof(device);
  device.index = 0;
  device.id = id;
  device.name = name;
  device.accelerator_type = type; /* Ray has no rule for Acme: name the type ourselves */
  device.memory_bytes = (uint64_t)16 << 30;
  device.numa_node = -1;
  device.health = RAYACCEL_HEALTH_HEALTHY;
  return sink->add_device(sink->host_context, &device);
}

static const rayaccel_plugin_api kMinimalApi = {
    sizeof(rayaccel_plugin_api),
    RAYACCEL_ABI_VERSION_MAJOR,
    RAYACCEL_ABI_VERSION_MINOR,
    STR("minimal"),
    0, /* no capabilities: discovery only */
    minimal_initialize,
    minimal_shutdown,
    minimal_get_properties,
    minimal_discover,
    NULL, /* get_labels */
    NULL, /* get_topology */
    NULL, /* get_health */
    NULL, /* wait_health_events */
    NULL, /* validate_quantity */
    NULL, /* prepare_allocation */
    NULL, /* transport */
};

RAYACCEL_PLUGIN_EXPORT rayaccel_status rayaccel_plugin_entry(rayaccel_negotiation *negotiation,
                                                             rayaccel_error *error) {
  if (negotiation->host_abi_major != RAYACCEL_ABI_VERSION_MAJOR) {
    return rayaccel_error_set(error, RAYACCEL_STATUS_INCOMPATIBLE, "built for ABI major 1");
  }
  negotiation->chosen_abi_major = RAYACCEL_ABI_VERSION_MAJOR;
  /* This plugin uses nothing newer than 1.0, so it chooses 1.0 and works with every 1.x
   * host. A plugin that offers the transport (since 1.1) passes 1 instead of 0. */
  negotiation->chosen_abi_minor = rayaccel_choose_minor(negotiation->host_abi_minor, 0);
  negotiation->api = &kMinimalApi;
  return RAYACCEL_STATUS_OK;
}
