/*
 * A vendor plugin with a direct transport, in plain C (C99), built out of tree: one "Acme C1"
 * device and a whole transport table from the helpers rayaccel installs
 * (<rayaccel/transport_helpers.h>), over UCX or libfabric as the host asks, so that the vendor
 * inherits their authentication, owner-checked transfers and lost-peer detection instead of
 * writing them. It reaches conformance tier 3 (transport). docs/writing-a-plugin.md, section 5.
 *
 *   find_package(rayaccel REQUIRED COMPONENTS plugin ucx_transport)
 *   rayaccel_add_plugin(acme-c SOURCES transport_plugin.c
 *                       LINK_LIBRARIES rayaccel::transport_fabric)
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "rayaccel/plugin.h"
#include "rayaccel/transport_helpers.h"

/* The transport's shared key is ABI 1.3's. */
#define ACME_ABI_MINOR 3

#define STR(lit) \
  { (lit), sizeof(lit) - 1 }

struct rayaccel_plugin_instance {
  char fabric[16]; /* the config key transport_fabric: "ucx", "libfabric" or "" */
};

static int key_is(rayaccel_string key, const char *want) {
  return key.size == strlen(want) && memcmp(key.data, want, key.size) == 0;
}

static rayaccel_status acme_initialize(rayaccel_initialize_args *args, rayaccel_error *error) {
  size_t i;
  rayaccel_plugin_instance *self = calloc(1, sizeof(*self));
  if (self == NULL) return rayaccel_error_set(error, RAYACCEL_STATUS_RESOURCE_EXHAUSTED, "oom");
  for (i = 0; i < args->config_count; ++i) {
    const rayaccel_config_entry *entry = &args->config[i];
    if (!key_is(entry->key, "transport_fabric")) continue;
    if (entry->value.size >= sizeof(self->fabric)) {
      free(self);
      return rayaccel_error_set(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                                "transport_fabric: ucx or libfabric");
    }
    memcpy(self->fabric, entry->value.data, entry->value.size); /* calloc: NUL-terminated */
  }
  args->instance = self;
  return RAYACCEL_STATUS_OK;
}

static rayaccel_status acme_shutdown(rayaccel_plugin_instance *self, rayaccel_error *error) {
  (void)error;
  free(self);
  return RAYACCEL_STATUS_OK;
}

static rayaccel_status acme_get_properties(rayaccel_plugin_instance *self,
                                           rayaccel_plugin_properties *props,
                                           rayaccel_error *error) {
  rayaccel_string vendor = STR("acme");
  rayaccel_string resource = STR("acme_c1");
  rayaccel_string env = STR("ACME_VISIBLE_DEVICES");
  rayaccel_string version = STR("0.1.0");
  (void)self;
  (void)error;
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

static rayaccel_status acme_discover(rayaccel_plugin_instance *self, const rayaccel_sink *sink,
                                     rayaccel_error *error) {
  rayaccel_device_info device = {0};
  rayaccel_string id = STR("acme-c1-0001");
  rayaccel_string name = STR("Acme C1");
  rayaccel_string type = STR("Acme-C1");
  (void)self;
  (void)error;
  device.struct_size = sizeof(device);
  device.index = 0;
  device.id = id;
  device.name = name;
  device.accelerator_type = type;
  device.memory_bytes = (uint64_t)8 << 30;
  device.numa_node = -1;
  device.health = RAYACCEL_HEALTH_HEALTHY;
  return sink->add_device(sink->host_context, &device);
}

/* One device: no links to report. */
static rayaccel_status acme_get_topology(rayaccel_plugin_instance *self, const rayaccel_sink *sink,
                                         rayaccel_error *error) {
  (void)self;
  (void)sink;
  (void)error;
  return RAYACCEL_STATUS_OK;
}

/* The helpers open the endpoint; the plugin says only which fabric its host asked for. Acme's
 * devices have no memory the helpers reach: host memory moves, device memory is refused with
 * UNSUPPORTED. */
static rayaccel_status acme_open_endpoint(rayaccel_endpoint_args *args, rayaccel_error *error) {
  rayaccel_transport_helper_options options = {sizeof(rayaccel_transport_helper_options), NULL,
                                               NULL};
  if (args != NULL && args->instance != NULL) options.fabric = args->instance->fabric;
  return rayaccel_transport_helper_open_endpoint(args, &options, error);
}

/* Filled once, on the first negotiation; the table below points at it. */
static rayaccel_transport_api acme_transport;
static pthread_once_t acme_transport_once = PTHREAD_ONCE_INIT;

static void acme_fill_transport(void) {
  acme_transport = rayaccel_transport_helper_table(acme_open_endpoint);
}

static const rayaccel_plugin_api kAcmeApi = {
    sizeof(rayaccel_plugin_api),
    RAYACCEL_ABI_VERSION_MAJOR,
    ACME_ABI_MINOR,
    STR("acme-c"),
    RAYACCEL_CAP_TOPOLOGY | RAYACCEL_CAP_TRANSPORT,
    acme_initialize,
    acme_shutdown,
    acme_get_properties,
    acme_discover,
    NULL, /* get_labels */
    acme_get_topology,
    NULL, /* get_health */
    NULL, /* wait_health_events */
    NULL, /* validate_quantity */
    NULL, /* prepare_allocation */
    &acme_transport,
    NULL, /* get_telemetry */
};

RAYACCEL_PLUGIN_EXPORT rayaccel_status rayaccel_plugin_entry(rayaccel_negotiation *negotiation,
                                                             rayaccel_error *error) {
  if (negotiation->host_abi_major != RAYACCEL_ABI_VERSION_MAJOR) {
    return rayaccel_error_set(error, RAYACCEL_STATUS_INCOMPATIBLE, "built for ABI major 1");
  }
  pthread_once(&acme_transport_once, acme_fill_transport);
  negotiation->chosen_abi_major = RAYACCEL_ABI_VERSION_MAJOR;
  negotiation->chosen_abi_minor =
      rayaccel_choose_minor(negotiation->host_abi_minor, ACME_ABI_MINOR);
  negotiation->api = &kAcmeApi;
  return RAYACCEL_STATUS_OK;
}
