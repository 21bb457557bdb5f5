/* A host written in C99 against rayaccel/host.h and librayaccel.so alone, as a raylet built
 * with its own Abseil and gRPC would use it: a registry on the sim plugin, isolated (started
 * through the host's own spawn hook), its snapshot read through views, a subscription, an
 * allocation leased, the errors the API promises, and shutdown. Prints "ok" and exits 0, or
 * says which check failed and exits 1.
 *
 * usage: rayaccel_host_c_user PLUGIN_DIR SIM_SPEC PLUGIN_HOST */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "rayaccel/host.h"

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

static char message[512];
static rayaccel_error error = {sizeof(rayaccel_error), message, sizeof(message)};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int spawned = 0;
static int deliveries = 0;
static uint64_t last_generation = 0;
static rayaccel_snapshot *kept = NULL;

static pid_t Spawn(void *user_data, pid_t (*spawn)(void *), void *spawn_context) {
  pid_t pid = spawn(spawn_context);
  pthread_mutex_lock(&mu);
  spawned += user_data == (void *)&spawned && pid > 0;
  pthread_mutex_unlock(&mu);
  return pid;
}

static void Log(void *user_data, rayaccel_log_level level, const char *line) {
  (void)user_data;
  if (level >= RAYACCEL_LOG_WARN) fprintf(stderr, "rayaccel: %s\n", line);
}

static void OnSnapshot(void *user_data, rayaccel_snapshot *snapshot) {
  rayaccel_snapshot_info info = {sizeof(info)};
  (void)user_data;
  if (rayaccel_snapshot_get_info(snapshot, &info, &error) != RAYACCEL_STATUS_OK) return;
  pthread_mutex_lock(&mu);
  ++deliveries;
  last_generation = info.generation;
  if (kept == NULL) kept = rayaccel_snapshot_retain(snapshot); /* outlives the call */
  pthread_mutex_unlock(&mu);
}

int main(int argc, char **argv) {
  const char *search[1];
  const char *plugins[1] = {"sim"};
  rayaccel_host_config_entry config[1];
  rayaccel_registry_options options = RAYACCEL_REGISTRY_OPTIONS_INIT;
  rayaccel_registry *registry = NULL;
  rayaccel_snapshot *snapshot = NULL;
  rayaccel_snapshot_info info = {sizeof(info)};
  rayaccel_device_view device = {sizeof(device)};
  rayaccel_plugin_view plugin = {sizeof(plugin)};
  rayaccel_subscription *subscription = NULL;
  size_t i;
  int found_gpu = 0, found_type = 0;

  if (argc != 4) {
    fprintf(stderr, "usage: %s PLUGIN_DIR SIM_SPEC PLUGIN_HOST\n", argv[0]);
    return 2;
  }
  CHECK(rayaccel_host_api_version() >> 16 == RAYACCEL_HOST_API_VERSION_MAJOR);

  search[0] = argv[1];
  config[0].struct_size = sizeof(config[0]);
  config[0].plugin = "sim";
  config[0].key = "spec";
  config[0].value = argv[2];
  options.search_path = search;
  options.search_path_count = 1;
  options.plugins = plugins;
  options.plugins_count = 1;
  options.config = config;
  options.config_count = 1;
  options.ignore_environment = 1;
  options.isolation = RAYACCEL_ISOLATION_CHILD_PROCESS;
  options.plugin_host = argv[3];
  options.spawn_child = Spawn;
  options.spawn_user_data = &spawned;
  options.log = Log;

  /* Malformed options are refused with a reason, and nothing is created. */
  options.isolation = (rayaccel_isolation)7;
  CHECK(rayaccel_registry_create(&options, &registry, &error) == RAYACCEL_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(message, "isolation 7") != NULL);
  CHECK(registry == NULL);
  CHECK(rayaccel_registry_create(NULL, &registry, &error) == RAYACCEL_STATUS_INVALID_ARGUMENT);
  options.isolation = RAYACCEL_ISOLATION_CHILD_PROCESS;

  if (rayaccel_registry_create(&options, &registry, &error) != RAYACCEL_STATUS_OK) {
    fprintf(stderr, "create: %s\n", message);
    return 1;
  }
  pthread_mutex_lock(&mu);
  CHECK(spawned == 1); /* the plugin host was started through the hook */
  pthread_mutex_unlock(&mu);

  CHECK(rayaccel_registry_snapshot(registry, &snapshot, &error) == RAYACCEL_STATUS_OK);
  CHECK(rayaccel_snapshot_get_info(snapshot, &info, &error) == RAYACCEL_STATUS_OK);
  CHECK(info.generation == 1);
  CHECK(info.device_count == 8);
  CHECK(info.link_count > 0);
  CHECK(info.plugin_count == 1);
  CHECK(rayaccel_snapshot_get_plugin(snapshot, 0, &plugin, &error) == RAYACCEL_STATUS_OK);
  CHECK(strcmp(plugin.name, "sim") == 0 && plugin.state == RAYACCEL_PLUGIN_ACTIVE);
  CHECK(plugin.device_count == 8);
  for (i = 0; i < info.device_count; ++i) {
    CHECK(rayaccel_snapshot_get_device(snapshot, i, &device, &error) == RAYACCEL_STATUS_OK);
    CHECK(strcmp(device.resource, "GPU") == 0);
    CHECK(device.health == RAYACCEL_HEALTH_HEALTHY);
    CHECK(device.id[0] != '\0' && device.index == i);
  }
  for (i = 0; i < info.resource_count; ++i) {
    const char *name = NULL;
    double quantity = 0;
    CHECK(rayaccel_snapshot_get_resource(snapshot, i, &name, &quantity, &error) ==
          RAYACCEL_STATUS_OK);
    if (strcmp(name, "GPU") == 0) found_gpu = quantity == 8.0;
  }
  for (i = 0; i < info.label_count; ++i) {
    const char *key = NULL, *value = NULL;
    CHECK(rayaccel_snapshot_get_label(snapshot, i, &key, &value, &error) == RAYACCEL_STATUS_OK);
    if (strcmp(key, "ray.io/accelerator-type") == 0) found_type = strcmp(value, "H100") == 0;
  }
  CHECK(found_gpu && found_type);
  {
    rayaccel_link_view link = {sizeof(link)};
    CHECK(rayaccel_snapshot_get_link(snapshot, 0, &link, &error) == RAYACCEL_STATUS_OK);
    CHECK(link.a < link.b && link.b < info.device_count);
  }

  /* A view from an older header holds fewer fields: only those are written. */
  {
    rayaccel_device_view small;
    memset(&small, 0x5a, sizeof(small));
    small.struct_size = RAYACCEL_STRUCT_SIZE(rayaccel_device_view, index);
    CHECK(rayaccel_snapshot_get_device(snapshot, 3, &small, &error) == RAYACCEL_STATUS_OK);
    CHECK(small.index == 3);
    CHECK(small.struct_size == RAYACCEL_STRUCT_SIZE(rayaccel_device_view, index));
    CHECK(small.memory_bytes == 0x5a5a5a5a5a5a5a5aull); /* past its size: untouched */
  }
  /* Past the end: refused with the reason. */
  CHECK(rayaccel_snapshot_get_device(snapshot, info.device_count, &device, &error) ==
        RAYACCEL_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(message, "device 8 of 8") != NULL);

  /* A subscription gets the current snapshot at once. */
  CHECK(rayaccel_registry_subscribe(registry, OnSnapshot, NULL, &subscription, &error) ==
        RAYACCEL_STATUS_OK);
  for (i = 0; i < 200; ++i) {
    rayaccel_snapshot *waited = NULL;
    int got;
    pthread_mutex_lock(&mu);
    got = deliveries;
    pthread_mutex_unlock(&mu);
    if (got > 0) break;
    CHECK(rayaccel_registry_wait_for_newer(registry, info.generation, 10, &waited, &error) ==
          RAYACCEL_STATUS_OK);
    rayaccel_snapshot_release(waited);
  }
  pthread_mutex_lock(&mu);
  CHECK(deliveries >= 1 && last_generation == 1 && kept != NULL);
  pthread_mutex_unlock(&mu);

  /* Scheduling: a quantity, the best pair, and the environment that leases it. */
  CHECK(rayaccel_registry_validate_quantity(registry, "GPU", 2, &error) == RAYACCEL_STATUS_OK);
  {
    rayaccel_preferred_allocation_args args = {sizeof(args)};
    rayaccel_allocation *allocation = NULL;
    rayaccel_allocation_view view = {sizeof(view)};
    rayaccel_prepare_allocation_args lease = {sizeof(lease)};
    rayaccel_environment *env = NULL;
    int visible = 0;
    args.size = 2;
    args.resource = "GPU";
    CHECK(rayaccel_registry_preferred_allocation(registry, &args, &allocation, &error) ==
          RAYACCEL_STATUS_OK);
    CHECK(rayaccel_allocation_get(allocation, &view, &error) == RAYACCEL_STATUS_OK);
    CHECK(view.device_count == 2 && view.generation == 1);
    lease.device_ids = view.device_ids;
    lease.device_count = view.device_count;
    lease.generation = view.generation;
    CHECK(rayaccel_registry_prepare_allocation(registry, &lease, &env, &error) ==
          RAYACCEL_STATUS_OK);
    for (i = 0; i < rayaccel_environment_count(env); ++i) {
      const char *name = NULL, *value = NULL;
      CHECK(rayaccel_environment_get(env, i, &name, &value, &error) == RAYACCEL_STATUS_OK);
      if (strcmp(name, "CUDA_VISIBLE_DEVICES") == 0) visible = strchr(value, ',') != NULL;
    }
    CHECK(visible);
    rayaccel_environment_destroy(env);
    rayaccel_allocation_destroy(allocation);

    /* An unknown device is the caller's mistake, with its name. */
    {
      const char *unknown[1] = {"GPU-no-such-device"};
      rayaccel_environment *none = NULL;
      lease.device_ids = unknown;
      lease.device_count = 1;
      lease.generation = 0;
      CHECK(rayaccel_registry_prepare_allocation(registry, &lease, &none, &error) !=
            RAYACCEL_STATUS_OK);
      CHECK(strstr(message, "GPU-no-such-device") != NULL);
      CHECK(none == NULL);
    }
  }

  {
    rayaccel_registry_stats stats = {sizeof(stats)};
    CHECK(rayaccel_registry_get_stats(registry, &stats, &error) == RAYACCEL_STATUS_OK);
    CHECK(stats.scans >= 1);
  }

  /* Telemetry (host API 1.1): the sim plugin's 8 GPUs, each with its memory known, and the
   * plugin's view; an index past the end is an error, not a crash. */
  {
    rayaccel_telemetry *telemetry = NULL;
    rayaccel_telemetry_info info = {sizeof(info)};
    rayaccel_telemetry_device_view device = {sizeof(device)};
    rayaccel_telemetry_plugin_view plugin = {sizeof(plugin)};
    CHECK((rayaccel_host_api_version() & 0xffff) >= 1);
    CHECK(rayaccel_registry_sample_telemetry(registry, &telemetry, &error) == RAYACCEL_STATUS_OK);
    CHECK(rayaccel_telemetry_get_info(telemetry, &info, &error) == RAYACCEL_STATUS_OK);
    CHECK(info.device_count == 8 && info.plugin_count == 1 && info.unix_ms > 0);
    CHECK(rayaccel_telemetry_get_device(telemetry, 0, &device, &error) == RAYACCEL_STATUS_OK);
    CHECK(strncmp(device.device_id, "GPU-", 4) == 0 && strcmp(device.plugin, "sim") == 0);
    CHECK((device.sample.known & RAYACCEL_SAMPLE_MEMORY) != 0);
    CHECK(device.sample.memory_used_bytes <= device.sample.memory_total_bytes);
    CHECK(rayaccel_telemetry_get_device(telemetry, 8, &device, &error) ==
          RAYACCEL_STATUS_INVALID_ARGUMENT);
    CHECK(rayaccel_telemetry_get_plugin(telemetry, 0, &plugin, &error) == RAYACCEL_STATUS_OK);
    CHECK(strcmp(plugin.name, "sim") == 0 && strcmp(plugin.error, "") == 0);
    CHECK(plugin.unknown_count == 0 || plugin.unknown_reasons[0][0] != '\0');
    rayaccel_telemetry_destroy(telemetry);
  }

  /* A raylet's own sink checks what agents publish as rayaccel's does. */
  {
    const char *names[2] = {"GPU", "accelerator_type:H100"};
    const double quantities[2] = {8, 1};
    const char *keys[1] = {"ray.io/accelerator-type"};
    const char *values[1] = {"H100"};
    const char *node = "abababababababababababababababababababababababababababab";
    rayaccel_publication p = {sizeof(p)};
    rayaccel_publication_order *order = NULL;
    int apply = 0;
    uint64_t current = 0;
    p.node_id = node;
    p.session = "s1";
    p.generation = 1;
    p.resource_names = names;
    p.resource_quantities = quantities;
    p.resource_count = 2;
    p.label_keys = keys;
    p.label_values = values;
    p.label_count = 1;
    CHECK(rayaccel_publication_check(&p, &error) == RAYACCEL_STATUS_OK);
    names[0] = "CPU"; /* Ray's own */
    CHECK(rayaccel_publication_check(&p, &error) == RAYACCEL_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(message, "\"CPU\" is Ray's own") != NULL);
    names[0] = "GPU";
    keys[0] = "ray.io/node-id"; /* the raylet's */
    CHECK(rayaccel_publication_check(&p, &error) == RAYACCEL_STATUS_INVALID_ARGUMENT);
    keys[0] = "ray.io/accelerator-type";
    names[1] = "GPU"; /* twice */
    CHECK(rayaccel_publication_check(&p, &error) == RAYACCEL_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(message, "given twice") != NULL);
    p.node_id = "not-a-node";
    CHECK(rayaccel_publication_check(&p, &error) == RAYACCEL_STATUS_INVALID_ARGUMENT);

    CHECK(rayaccel_publication_order_create(&order, &error) == RAYACCEL_STATUS_OK);
    CHECK(rayaccel_publication_order_admit(order, node, "s1", 2, &apply, &current, &error) ==
          RAYACCEL_STATUS_OK);
    CHECK(apply == 1 && current == 2);
    CHECK(rayaccel_publication_order_admit(order, node, "s1", 1, &apply, &current, &error) ==
          RAYACCEL_STATUS_OK);
    CHECK(apply == 0 && current == 2); /* a late retry does not roll the node back */
    CHECK(rayaccel_publication_order_admit(order, node, "s2", 1, &apply, &current, &error) ==
          RAYACCEL_STATUS_OK);
    CHECK(apply == 1 && current == 1); /* a restarted agent replaces it */
    rayaccel_publication_order_destroy(order);
  }

  /* Shutdown ends delivery; what the host holds stays readable after destroy. */
  rayaccel_subscription_destroy(subscription);
  rayaccel_registry_destroy(registry);
  CHECK(rayaccel_snapshot_get_info(snapshot, &info, &error) == RAYACCEL_STATUS_OK);
  CHECK(info.device_count == 8);
  rayaccel_snapshot_release(snapshot);
  rayaccel_snapshot_release(kept);

  if (failures != 0) {
    fprintf(stderr, "%d check(s) failed; last message: %s\n", failures, message);
    return 1;
  }
  printf("ok\n");
  return 0;
}
