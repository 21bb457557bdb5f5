/*
 * A vendor's plugin for a family Ray does not know ("Zeta Z1", Ray resource `zeta_z1`,
 * visibility variable ZETA_VISIBLE_DEVICES), written in C99 against the public header alone,
 * as docs/writing-a-plugin.md shows. The Ray tests start nodes on it.
 *
 * Configuration (`--config zeta.KEY=VALUE` or RAYACCEL_ZETA_KEY):
 *   count      devices, 1 to 16 (default 4)
 *   unhealthy  the index of a device whose health is UNHEALTHY (default: none)
 *   shapes     the device counts one request may ask for, e.g. "1,2,4" (default: any)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rayaccel/plugin.h"

#define ZETA_ABI_MINOR 2
#define ZETA_MAX_DEVICES 16

#define STR(lit) \
  { (lit), sizeof(lit) - 1 }

struct rayaccel_plugin_instance {
  uint32_t count;
  int unhealthy;                    /* -1: none */
  int shapes[ZETA_MAX_DEVICES + 1]; /* shapes[n] != 0: n devices may be asked for */
  int any_shape;
  char ids[ZETA_MAX_DEVICES][32];
};

static int config_is(const rayaccel_config_entry *e, const char *key) {
  return e->key.size == strlen(key) && memcmp(e->key.data, key, e->key.size) == 0;
}

/* A config value as a NUL-terminated copy (values are not NUL-terminated). */
static void config_value(const rayaccel_config_entry *e, char *out, size_t size) {
  size_t n = e->value.size < size - 1 ? e->value.size : size - 1;
  memcpy(out, e->value.data, n);
  out[n] = '\0';
}

static rayaccel_status zeta_initialize(rayaccel_initialize_args *args, rayaccel_error *error) {
  rayaccel_plugin_instance *self = calloc(1, sizeof(*self));
  size_t i;
  if (self == NULL) return rayaccel_error_set(error, RAYACCEL_STATUS_RESOURCE_EXHAUSTED, "oom");
  self->count = 4;
  self->unhealthy = -1;
  self->any_shape = 1;
  for (i = 0; i < args->config_count; ++i) {
    const rayaccel_config_entry *e = &args->config[i];
    char value[128];
    config_value(e, value, sizeof(value));
    if (config_is(e, "count")) {
      long n = strtol(value, NULL, 10);
      if (n < 1 || n > ZETA_MAX_DEVICES) {
        free(self);
        return rayaccel_error_set(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                                  "zeta.count must be 1 to 16");
      }
      self->count = (uint32_t)n;
    } else if (config_is(e, "unhealthy")) {
      self->unhealthy = (int)strtol(value, NULL, 10);
    } else if (config_is(e, "shapes")) {
      const char *at = value;
      self->any_shape = 0;
      while (*at != '\0') {
        char *end;
        long n = strtol(at, &end, 10);
        if (end == at) break;
        if (n >= 1 && n <= ZETA_MAX_DEVICES) self->shapes[n] = 1;
        at = *end == ',' ? end + 1 : end;
      }
    }
  }
  for (i = 0; i < self->count; ++i) {
    snprintf(self->ids[i], sizeof(self->ids[i]), "zeta-z1-%04u", (unsigned)(i + 1));
  }
  args->instance = self;
  return RAYACCEL_STATUS_OK;
}

static rayaccel_status zeta_shutdown(rayaccel_plugin_instance *self, rayaccel_error *error) {
  (void)error;
  free(self);
  return RAYACCEL_STATUS_OK;
}

static rayaccel_status zeta_get_properties(rayaccel_plugin_instance *self,
                                           rayaccel_plugin_properties *props,
                                           rayaccel_error *error) {
  rayaccel_string vendor = STR("zeta");
  rayaccel_string resource = STR("zeta_z1");
  rayaccel_string env = STR("ZETA_VISIBLE_DEVICES");
  rayaccel_string version = STR("1.0.0");
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

static rayaccel_status zeta_discover(rayaccel_plugin_instance *self, const rayaccel_sink *sink,
                                     rayaccel_error *error) {
  rayaccel_string name = STR("Zeta Z1");
  rayaccel_string type = STR("Zeta-Z1");
  uint32_t i;
  (void)error;
  for (i = 0; i < self->count; ++i) {
    rayaccel_device_info device = {0};
    rayaccel_status status;
    device.struct_size = sizeof(device);
    device.index = i;
    device.id.data = self->ids[i];
    device.id.size = strlen(self->ids[i]);
    device.name = name;
    device.accelerator_type = type;
    device.memory_bytes = (uint64_t)32 << 30;
    device.numa_node = -1;
    device.health = (int)i == self->unhealthy ? RAYACCEL_HEALTH_UNHEALTHY : RAYACCEL_HEALTH_HEALTHY;
    status = sink->add_device(sink->host_context, &device);
    if (status != RAYACCEL_STATUS_OK) return status;
  }
  return RAYACCEL_STATUS_OK;
}

static rayaccel_status zeta_validate_quantity(rayaccel_plugin_instance *self, uint32_t quantity,
                                              rayaccel_error *error) {
  if (quantity == 0 || quantity > self->count) {
    return rayaccel_error_set(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                              "a Zeta node has fewer devices");
  }
  if (!self->any_shape && !self->shapes[quantity]) {
    return rayaccel_error_set(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                              "Zeta devices go in groups of the configured shapes only");
  }
  return RAYACCEL_STATUS_OK;
}

/* ZETA_VISIBLE_DEVICES: the chosen devices' indices, comma-separated. */
static rayaccel_status zeta_prepare_allocation(rayaccel_plugin_instance *self,
                                               rayaccel_allocation_args *args,
                                               rayaccel_error *error) {
  char value[ZETA_MAX_DEVICES * 4 + 1];
  size_t used = 0, i;
  rayaccel_string name = STR("ZETA_VISIBLE_DEVICES");
  rayaccel_string text;
  value[0] = '\0';
  for (i = 0; i < args->device_count; ++i) {
    if (args->device_indices[i] >= self->count) {
      return rayaccel_error_set(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no such device");
    }
    used += (size_t)snprintf(value + used, sizeof(value) - used, "%s%u", i ? "," : "",
                             (unsigned)args->device_indices[i]);
  }
  text.data = value;
  text.size = used;
  return args->sink->set_env(args->sink->host_context, name, text);
}

static const rayaccel_plugin_api kZetaApi = {
    sizeof(rayaccel_plugin_api),
    RAYACCEL_ABI_VERSION_MAJOR,
    ZETA_ABI_MINOR,
    STR("zeta"),
    RAYACCEL_CAP_ALLOCATION,
    zeta_initialize,
    zeta_shutdown,
    zeta_get_properties,
    zeta_discover,
    NULL, /* get_labels */
    NULL, /* get_topology */
    NULL, /* get_health */
    NULL, /* wait_health_events */
    zeta_validate_quantity,
    zeta_prepare_allocation,
    NULL, /* transport */
    NULL, /* get_telemetry */
};

RAYACCEL_PLUGIN_EXPORT rayaccel_status rayaccel_plugin_entry(rayaccel_negotiation *negotiation,
                                                             rayaccel_error *error) {
  if (negotiation->host_abi_major != RAYACCEL_ABI_VERSION_MAJOR) {
    return rayaccel_error_set(error, RAYACCEL_STATUS_INCOMPATIBLE, "built for ABI major 1");
  }
  negotiation->chosen_abi_major = RAYACCEL_ABI_VERSION_MAJOR;
  negotiation->chosen_abi_minor =
      rayaccel_choose_minor(negotiation->host_abi_minor, ZETA_ABI_MINOR);
  negotiation->api = &kZetaApi;
  return RAYACCEL_STATUS_OK;
}
