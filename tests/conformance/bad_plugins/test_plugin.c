/*
 * A small plugin in plain C99, built once per FAULT_* macro into its own .so: without a
 * macro it is a correct two-GPU plugin; each macro breaks it in exactly one way that the
 * registry must catch (see tests/integration/loader_test.cc). Written in C on purpose: it
 * proves the header is usable from C and that the host needs nothing C++ from a plugin.
 */
#ifdef FAULT_LONG_STRING
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#endif
#if defined(FAULT_DAEMONIZES) || defined(FAULT_SIGNALS_GROUP_QUIETLY)
#define _DEFAULT_SOURCE /* setsid, kill, fork, sysconf */
#endif
#ifdef FAULT_LOGS_AFTER_SHUTDOWN
#define _POSIX_C_SOURCE 200112L /* nanosleep */
#include <pthread.h>
#endif
#if defined(FAULT_DAEMONIZES) || defined(FAULT_SIGNALS_GROUP_QUIETLY)
#include <sys/wait.h>
#include <unistd.h>
#endif
#if defined(FAULT_REWRITES_ENVIRONMENT) || defined(FAULT_KILLS_GROUP) || \
    defined(FAULT_SPAWNS_HELPER) || defined(FAULT_LONG_STRING) || defined(FAULT_HUNG_HEALTH) || \
    defined(FAULT_SLOW_INIT) || defined(FAULT_INIT_HANGS) || defined(FAULT_CHANGES_STATE) || \
    defined(FAULT_HANGS_WHILE_MARKER) || defined(FAULT_HEALTH_CRASHES) ||                     \
    defined(FAULT_TELEMETRY_HANGS)
#define _POSIX_C_SOURCE 200112L /* setenv, unsetenv, kill, fork, mmap, nanosleep, pause */
#include <unistd.h>
#endif
#ifdef FAULT_LONG_STRING
#include <sys/mman.h>
#endif
#ifdef FAULT_CHANGES_STATE
#include <sys/stat.h>
#endif
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rayaccel/plugin.h"

#define STR(lit) \
  { (lit), sizeof(lit) - 1 }

#ifndef PLUGIN_NAME
#define PLUGIN_NAME "testgpu"
#endif

struct rayaccel_plugin_instance {
  int initialized;
  const rayaccel_host_api *host;
  /* FAULT_CRASH_ONCE: crash in discover unless this file exists;
   * FAULT_HANGS_WHILE_MARKER: discover waits while it exists. */
  char marker[256];
#ifdef FAULT_KEEPS_CONFIG
  /* The value of config key "name", kept by pointer instead of copied. */
  rayaccel_string kept_name;
#endif
};

/* An older plugin's view of rayaccel_device_info: what a 1.0 plugin compiled against a header
 * that ended after pci_bus_id would send. The host must default the rest (numa_node = -1). */
typedef struct old_device_info {
  size_t struct_size;
  uint32_t index;
  rayaccel_string id;
  rayaccel_string name;
  rayaccel_string accelerator_type;
  rayaccel_string architecture;
  uint64_t memory_bytes;
  rayaccel_string pci_bus_id;
} old_device_info;

/* A newer plugin's rayaccel_device_info: two fields the host does not know yet. */
typedef struct new_device_info {
  rayaccel_device_info v1;
  uint64_t future_field_a;
  rayaccel_string future_field_b;
} new_device_info;

#ifdef FAULT_LOGS_AFTER_SHUTDOWN
/* A thread of the plugin's own that logs every millisecond, forever: after shutdown too, when
 * the host API is no longer valid. */
static void *chatty(void *arg) {
  const rayaccel_host_api *host = (const rayaccel_host_api *)arg;
  struct timespec ms = {0, 1000 * 1000};
  for (;;) {
    rayaccel_string line = STR("still here");
    if (host != NULL && host->log != NULL) host->log(host->host_context, RAYACCEL_LOG_DEBUG, line);
    nanosleep(&ms, NULL);
  }
  return NULL;
}
#endif

static rayaccel_status initialize(rayaccel_initialize_args *args, rayaccel_error *error) {
#ifdef FAULT_LEAK
  {
    /* 256 KiB per instance that shutdown never frees. */
    char *lost = malloc(256 * 1024);
    if (lost != NULL) memset(lost, 1, 256 * 1024);
  }
#endif
#ifdef FAULT_REWRITES_ENVIRONMENT
  /* Points the next plugin's configuration elsewhere, and removes another's. */
  setenv("RAYACCEL_SIM_SPEC", "/nonexistent/spec.json", 1);
  unsetenv("RAYACCEL_SIM_FLAVOUR");
#endif
#ifdef FAULT_CHANGES_STATE
  /* Settles in as if it owned the process. */
  if (chdir("/") != 0) return rayaccel_error_set(error, RAYACCEL_STATUS_INTERNAL, "chdir");
  umask(0);
  signal(SIGINT, SIG_IGN);
#endif
#ifdef FAULT_SLOW_INIT
  {
    /* A legal plugin whose driver takes a while to open. */
    struct timespec wait = {0, 100 * 1000 * 1000};
    nanosleep(&wait, NULL);
  }
#endif
#ifdef FAULT_INIT_HANGS
  for (;;) sleep(60);
#endif
#ifdef FAULT_INIT_FAILS
  (void)args;
  return rayaccel_error_set(error, RAYACCEL_STATUS_UNAVAILABLE, "vendor driver 1.2.3 is too old");
#else
  struct rayaccel_plugin_instance *self = calloc(1, sizeof(*self));
  if (self == NULL) return rayaccel_error_set(error, RAYACCEL_STATUS_RESOURCE_EXHAUSTED, "oom");
  self->initialized = 1;
  self->host = args->host;
  {
    size_t i;
    for (i = 0; i < args->config_count; ++i) {
      const rayaccel_config_entry *e = &args->config[i];
      if (e->key.size == 6 && memcmp(e->key.data, "marker", 6) == 0 &&
          e->value.size < sizeof(self->marker)) {
        memcpy(self->marker, e->value.data, e->value.size);
        self->marker[e->value.size] = '\0';
      }
#ifdef FAULT_KEEPS_CONFIG
      if (e->key.size == 4 && memcmp(e->key.data, "name", 4) == 0) self->kept_name = e->value;
#endif
    }
  }
#ifdef FAULT_LOGS_AFTER_SHUTDOWN
  {
    pthread_t chatter;
    if (pthread_create(&chatter, NULL, chatty, (void *)self->host) == 0) pthread_detach(chatter);
  }
#endif
  args->instance = self;
  return RAYACCEL_STATUS_OK;
#endif
}

static rayaccel_status plugin_shutdown(rayaccel_plugin_instance *instance, rayaccel_error *error) {
  (void)error;
#ifdef FAULT_DOUBLE_FREE
  {
    /* Through a volatile copy, so the compiler lets the bug reach the allocator. */
    static void *volatile again;
    again = instance;
    free(instance);
    free(again);
    return RAYACCEL_STATUS_OK;
  }
#endif
  free(instance);
  return RAYACCEL_STATUS_OK;
}

static rayaccel_status get_properties(rayaccel_plugin_instance *instance,
                                      rayaccel_plugin_properties *p, rayaccel_error *error) {
  rayaccel_string vendor = STR("nvidia");
  rayaccel_string resource = STR("GPU");
  rayaccel_string env = STR("CUDA_VISIBLE_DEVICES");
  (void)instance;
  (void)error;
#ifdef FAULT_NON_UTF8_PROPERTY
  vendor.data = "nvid\xff\xfe";
  vendor.size = 6;
#endif
#ifdef FAULT_RESOURCE_NAME
  resource.data = "GPU, CPU";
  resource.size = 8;
#endif
  if (RAYACCEL_HAS_FIELD(p, rayaccel_plugin_properties, vendor)) p->vendor = vendor;
  if (RAYACCEL_HAS_FIELD(p, rayaccel_plugin_properties, resource_name)) p->resource_name = resource;
  if (RAYACCEL_HAS_FIELD(p, rayaccel_plugin_properties, visible_devices_env)) {
    p->visible_devices_env = env;
  }
  return RAYACCEL_STATUS_OK;
}

static rayaccel_status add_gpu(const rayaccel_sink *sink, uint32_t index, const char *id,
                               const char *name) {
  rayaccel_device_info d;
  memset(&d, 0, sizeof(d));
#ifdef FAULT_DEVICE_SIZE_POINTER
  d.struct_size = sizeof(&d); /* a vendor's slip: the size of a pointer */
#else
  d.struct_size = sizeof(d);
#endif
  d.index = index;
  d.id.data = id;
  d.id.size = strlen(id);
  d.name.data = name;
  d.name.size = strlen(name);
  d.memory_bytes = 42949672960u;
  d.numa_node = 0;
  d.health = RAYACCEL_HEALTH_HEALTHY;
  return sink->add_device(sink->host_context, &d);
}


static rayaccel_status discover(rayaccel_plugin_instance *instance, const rayaccel_sink *sink,
                                rayaccel_error *error) {
  (void)instance;
  (void)error;
#ifdef FAULT_SEGFAULT
  raise(SIGSEGV); /* what a wild pointer does, without undefined behaviour here */
#endif
#ifdef FAULT_SIGKILL
  raise(SIGKILL); /* what the kernel's out-of-memory killer does */
#endif
#ifdef FAULT_HANGS_WHILE_MARKER
  /* A driver call that blocks until something outside lets it go (the test removes it). */
  while (instance->marker[0] != '\0' && access(instance->marker, F_OK) == 0) {
    struct timespec wait = {0, 5 * 1000 * 1000};
    nanosleep(&wait, NULL);
  }
#endif
#ifdef FAULT_KILLS_GROUP
  kill(0, SIGTERM); /* every process of "its" group: the host's, were the host careless */
#endif
#ifdef FAULT_SIGNALS_GROUP_QUIETLY
  /* The same, surviving it: its own SIGTERM ignored for the moment, the disposition restored. */
  {
    void (*was)(int) = signal(SIGTERM, SIG_IGN);
    kill(0, SIGTERM);
    signal(SIGTERM, was);
  }
#endif
#ifdef FAULT_DAEMONIZES
  /* A daemon: a second fork under setsid, every descriptor closed, outliving whoever loaded
   * the plugin (and the process group it was in). */
  {
    pid_t first = fork();
    if (first == 0) {
      long fd;
      setsid();
      if (fork() != 0) _exit(0);
      for (fd = 0; fd < sysconf(_SC_OPEN_MAX) && fd < 4096; ++fd) close((int)fd);
      sleep(60);
      _exit(0);
    }
    if (first > 0) waitpid(first, NULL, 0);
  }
#endif
#ifdef FAULT_SPAWNS_HELPER
  /* A helper daemon that outlives the call, holding every descriptor it inherited. */
  if (fork() == 0) {
    sleep(60);
    _exit(0);
  }
#endif
#ifdef FAULT_CRASH_ONCE
  {
    FILE *f = fopen(instance->marker, "r");
    if (f == NULL) {
      f = fopen(instance->marker, "w");
      if (f != NULL) fclose(f);
      raise(SIGSEGV); /* what a wild pointer does, without undefined behaviour here */
    }
    fclose(f);
  }
#endif
#ifdef FAULT_MEMORY_HOG
  for (;;) {
    char *block = malloc(64u << 20);
    if (block == NULL) abort(); /* what a vendor library does when memory runs out */
    memset(block, 1, 64u << 20);
  }
#endif
#ifdef FAULT_ABORT
  abort();
#endif
#ifdef FAULT_HANG
  for (;;) {
    static volatile unsigned long spin;
    ++spin;
  }
#endif
#ifdef FAULT_STDOUT
  printf("hello from the plugin\n");
#endif
#if defined(FAULT_OLD_DEVICE_STRUCT)
  (void)add_gpu;
  {
    old_device_info d;
    memset(&d, 0, sizeof(d));
    d.struct_size = sizeof(d);
    d.index = 0;
    d.id.data = "GPU-old-0";
    d.id.size = 9;
    d.name.data = "NVIDIA A100-SXM4-40GB";
    d.name.size = strlen(d.name.data);
    d.memory_bytes = 42949672960u;
    d.pci_bus_id.data = "00000000:07:00.0"; /* NVML's 8-digit domain: the host normalises */
    d.pci_bus_id.size = 16;
    return sink->add_device(sink->host_context, (const rayaccel_device_info *)(const void *)&d);
  }
#elif defined(FAULT_NEW_DEVICE_STRUCT)
  (void)add_gpu;
  {
    new_device_info d;
    memset(&d, 0, sizeof(d));
    d.v1.struct_size = sizeof(d);
    d.v1.index = 0;
    d.v1.id.data = "GPU-new-0";
    d.v1.id.size = 9;
    d.v1.name.data = "NVIDIA H200";
    d.v1.name.size = 11;
    d.v1.numa_node = 1;
    d.future_field_a = 7;
    return sink->add_device(sink->host_context, &d.v1);
  }
#elif defined(FAULT_TINY_DEVICE_STRUCT)
  {
    rayaccel_device_info d;
    memset(&d, 0, sizeof(d));
    d.struct_size = RAYACCEL_STRUCT_SIZE(rayaccel_device_info, id); /* name missing */
    d.index = 0;
    d.id.data = "GPU-tiny";
    d.id.size = 8;
    sink->add_device(sink->host_context, &d);
    return add_gpu(sink, 1, "GPU-test-1", "NVIDIA A100-SXM4-40GB");
  }
#elif defined(FAULT_KEEPS_CONFIG)
  {
    /* Names its device after the kept pointer: whatever the host left there. */
    rayaccel_device_info d;
    (void)add_gpu;
    memset(&d, 0, sizeof(d));
    d.struct_size = sizeof(d);
    d.id.data = "GPU-kept-0";
    d.id.size = 10;
    d.name = instance->kept_name;
    if (d.name.size == 0) {
      d.name.data = "NVIDIA A100";
      d.name.size = 11;
    }
    d.memory_bytes = 42949672960u;
    d.numa_node = 0;
    d.health = RAYACCEL_HEALTH_HEALTHY;
    return sink->add_device(sink->host_context, &d);
  }
#elif defined(FAULT_ABSURD_COUNT)
  {
    uint32_t i;
    char id[32];
    for (i = 0; i < 1000000; ++i) {
      size_t n = 0;
      uint32_t v = i;
      id[n++] = 'G';
      do {
        id[n++] = (char)('0' + v % 10);
        v /= 10;
      } while (v != 0);
      id[n] = '\0';
      if (add_gpu(sink, i, id, "NVIDIA A100-SXM4-40GB") == RAYACCEL_STATUS_RESOURCE_EXHAUSTED) {
        return RAYACCEL_STATUS_RESOURCE_EXHAUSTED;
      }
    }
    return RAYACCEL_STATUS_OK;
  }
#elif defined(FAULT_MANY_LINKS)
  /* Legal and large: 512 devices (linked all to all in get_topology). */
  {
    uint32_t i;
    for (i = 0; i < 512; ++i) {
      char id[16];
      snprintf(id, sizeof(id), "GPU-many-%u", (unsigned)i);
      if (add_gpu(sink, i, id, "NVIDIA A100-SXM4-40GB") != RAYACCEL_STATUS_OK) {
        return rayaccel_error_set(error, RAYACCEL_STATUS_INTERNAL, "device refused");
      }
    }
    return RAYACCEL_STATUS_OK;
  }
#elif defined(FAULT_NULL_STRINGS)
  /* Sizes with NULL pointers: device 1's id, and (in get_labels) a label's value. */
  add_gpu(sink, 0, "GPU-test-0", "NVIDIA A100-SXM4-40GB");
  {
    rayaccel_device_info d;
    memset(&d, 0, sizeof(d));
    d.struct_size = sizeof(d);
    d.index = 1;
    d.id.data = NULL;
    d.id.size = 10;
    d.name.data = "NVIDIA A100-SXM4-40GB";
    d.name.size = strlen(d.name.data);
    sink->add_device(sink->host_context, &d);
  }
  add_gpu(sink, 2, "GPU-test-2", "NVIDIA A100-SXM4-40GB");
  return RAYACCEL_STATUS_OK;
#elif defined(FAULT_LONG_STRING)
  /* A name whose size claims a gigabyte, over a few bytes that end where the mapping does: a
   * host that reads before checking the size faults. */
  {
    long page = sysconf(_SC_PAGESIZE);
    char *region = mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    rayaccel_device_info d;
    if (region == MAP_FAILED) return rayaccel_error_set(error, RAYACCEL_STATUS_INTERNAL, "mmap");
    mprotect(region + page, (size_t)page, PROT_NONE);
    memcpy(region + page - 4, "A100", 4);
    memset(&d, 0, sizeof(d));
    d.struct_size = sizeof(d);
    d.index = 1;
    d.id.data = "GPU-long-1";
    d.id.size = 10;
    d.name.data = region + page - 4;
    d.name.size = (size_t)1 << 30;
    add_gpu(sink, 0, "GPU-test-0", "NVIDIA A100-SXM4-40GB");
    sink->add_device(sink->host_context, &d);
    munmap(region, (size_t)page * 2);
    return RAYACCEL_STATUS_OK;
  }
#elif defined(FAULT_DISCOVER_FAILS)
  (void)sink;
  (void)add_gpu;
  return rayaccel_error_set(error, RAYACCEL_STATUS_INTERNAL, "NVML_ERROR_GPU_IS_LOST on GPU 1");
#elif defined(FAULT_CONTROL_CHARS)
  /* Tries to clear the operator's screen and forge a log line, then fails the same way. */
  {
    static const char forged[] = "\x1b[2J\r[error] plugin sim failed: forged\n";
    rayaccel_string text;
    text.data = forged;
    text.size = sizeof(forged) - 1;
    if (instance->host != NULL && instance->host->log != NULL) {
      instance->host->log(instance->host->host_context, RAYACCEL_LOG_WARN, text);
    }
  }
  (void)sink;
  (void)add_gpu;
  return rayaccel_error_set(error, RAYACCEL_STATUS_INTERNAL,
                            "line one\nline two \x1b[31mred\xc2\x9b" "2J");
#elif defined(FAULT_FINDS_NOTHING)
  /* No device, and why through the 1.6 sink (no log line); a control character in it. */
  (void)add_gpu;
  if (RAYACCEL_HAS_FIELD(sink, rayaccel_sink, explain_no_devices)) {
    static const char why[] = "no /dev/acme* node \x1b[2J(driver not loaded)";
    rayaccel_string text;
    text.data = why;
    text.size = sizeof(why) - 1;
    sink->explain_no_devices(sink->host_context, text);
  }
  return RAYACCEL_STATUS_OK;
#elif defined(FAULT_FINDS_NOTHING_SILENTLY)
  (void)sink;
  (void)add_gpu;
  return RAYACCEL_STATUS_OK;
#else
  add_gpu(sink, 0, "GPU-test-0", "NVIDIA A100-SXM4-40GB");
#if defined(FAULT_DUPLICATE_ID)
  add_gpu(sink, 1, "GPU-test-0", "NVIDIA A100-SXM4-40GB");
#elif defined(FAULT_NON_UTF8_NAME)
  add_gpu(sink, 1, "GPU-test-1", "NVIDIA \xc3\x28 broken");
#elif defined(FAULT_PASS_BACK_REFUSAL)
  {
    /* Stops at the first refused device and returns the sink's status, as plugin.h allows. */
    rayaccel_device_info d;
    rayaccel_status rc;
    memset(&d, 0, sizeof(d));
    d.struct_size = sizeof(d);
    d.index = 1;
    d.id.data = "GPU-test-1";
    d.id.size = 10;
    d.name.data = "NVIDIA A100-SXM4-40GB";
    d.name.size = strlen(d.name.data);
    d.pci_bus_id.data = "zz";
    d.pci_bus_id.size = 2;
    rc = sink->add_device(sink->host_context, &d);
    if (rc != RAYACCEL_STATUS_OK) return rc;
  }
#elif defined(FAULT_DEVICE_SIZE_POINTER)
  {
    /* Sixteen devices, each with an attribute: every one refused, for one reason. */
    uint32_t i;
    for (i = 1; i < 16; ++i) add_gpu(sink, i, "GPU-test-n", "NVIDIA A100-SXM4-40GB");
    for (i = 0; i < 16; ++i) {
      rayaccel_attribute a;
      memset(&a, 0, sizeof(a));
      a.struct_size = sizeof(a);
      a.device_index = i;
      a.name.data = "ecc";
      a.name.size = 3;
      a.kind = RAYACCEL_ATTRIBUTE_BOOL;
      a.int_value = 1;
      sink->add_attribute(sink->host_context, &a);
    }
  }
#else
  add_gpu(sink, 1, "GPU-test-1", "NVIDIA A100-SXM4-40GB");
#endif
  return RAYACCEL_STATUS_OK;
#endif
}

static rayaccel_status get_labels(rayaccel_plugin_instance *instance, const rayaccel_sink *sink,
                                  rayaccel_error *error) {
  (void)instance;
  (void)error;
#ifdef FAULT_NULL_STRINGS
  {
    rayaccel_string key = STR("example.com/null-value");
    rayaccel_string value;
    value.data = NULL;
    value.size = 3;
    sink->add_label(sink->host_context, key, value);
  }
#endif
#ifdef FAULT_BAD_LABEL
  {
    rayaccel_string key = STR("bad key with spaces");
    rayaccel_string value = STR("v");
    sink->add_label(sink->host_context, key, value);
  }
  {
    rayaccel_string key = STR("ray.io/node-id");
    rayaccel_string value = STR("stolen");
    sink->add_label(sink->host_context, key, value);
  }
#endif
  {
    rayaccel_string key = STR("example.com/rack");
    rayaccel_string value = STR("r12");
    return sink->add_label(sink->host_context, key, value);
  }
}

static rayaccel_status get_topology(rayaccel_plugin_instance *instance, const rayaccel_sink *sink,
                                    rayaccel_error *error) {
  rayaccel_link link;
  (void)instance;
  (void)error;
#if defined(FAULT_FINDS_NOTHING) || defined(FAULT_FINDS_NOTHING_SILENTLY)
  (void)sink;
  (void)link;
  return RAYACCEL_STATUS_OK; /* no devices, no links */
#endif
  memset(&link, 0, sizeof(link));
  link.struct_size = sizeof(link);
  link.device_a = 0;
  link.device_b = 1;
  link.type = RAYACCEL_LINK_NVLINK;
  link.count = 12;
#if defined(FAULT_OLD_DEVICE_STRUCT) || defined(FAULT_NEW_DEVICE_STRUCT)
  (void)sink;
  return RAYACCEL_STATUS_OK; /* one device only: nothing to link */
#endif
#ifdef FAULT_MANY_LINKS
  { /* all 130 816 pairs of 512 devices: within the limits, as in-process accepts */
    uint32_t a, b;
    for (a = 0; a < 512; ++a) {
      for (b = a + 1; b < 512; ++b) {
        link.device_a = a;
        link.device_b = b;
        if (sink->add_link(sink->host_context, &link) != RAYACCEL_STATUS_OK) {
          return rayaccel_error_set(error, RAYACCEL_STATUS_INTERNAL, "link refused");
        }
      }
    }
    return RAYACCEL_STATUS_OK;
  }
#endif
#ifdef FAULT_LINK_OUT_OF_RANGE
  link.device_b = 7;
#endif
  return sink->add_link(sink->host_context, &link);
}

#ifdef FAULT_TRANSPORT_NULL_HOOKS
/* Claims the transport with a full-size table whose hooks are mostly missing. */
static rayaccel_status no_endpoint(rayaccel_endpoint_args *args, rayaccel_error *error) {
  (void)args;
  return rayaccel_error_set(error, RAYACCEL_STATUS_UNSUPPORTED, "no transport here");
}
static const rayaccel_transport_api kTransport = {
    sizeof(rayaccel_transport_api), no_endpoint, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL,                           NULL,        NULL, NULL, NULL, NULL, NULL, NULL};
#endif

#ifdef FAULT_BUSY_HEALTH
/* Claims a health change at once, every time, and reports none. */
static rayaccel_status busy_health(rayaccel_plugin_instance *instance,
                                   rayaccel_health_wait_args *args, rayaccel_error *error) {
  (void)instance;
  (void)args;
  (void)error;
  return RAYACCEL_STATUS_OK;
}
#endif

#ifdef FAULT_HEALTH_CRASHES
/* Answers scans, and crashes in its health watch (after a moment: the watch is running). */
static rayaccel_status crashing_health(rayaccel_plugin_instance *instance,
                                       rayaccel_health_wait_args *args, rayaccel_error *error) {
  struct timespec wait = {0, 100 * 1000 * 1000};
  (void)instance;
  (void)args;
  (void)error;
  nanosleep(&wait, NULL);
  raise(SIGSEGV);
  return RAYACCEL_STATUS_OK; /* not reached */
}
#endif

#ifdef FAULT_HUNG_HEALTH
/* Ignores its timeout: the wait never returns. */
static rayaccel_status hung_health(rayaccel_plugin_instance *instance,
                                   rayaccel_health_wait_args *args, rayaccel_error *error) {
  (void)instance;
  (void)args;
  (void)error;
  for (;;) sleep(60);
  return RAYACCEL_STATUS_OK; /* not reached */
}
#endif

#ifdef FAULT_LD_PRELOAD
/* Names the devices, and slips a library into every worker of the allocation. */
static rayaccel_status prepare_allocation(rayaccel_plugin_instance *instance,
                                          rayaccel_allocation_args *args, rayaccel_error *error) {
  char list[64] = "";
  size_t i, n = 0;
  (void)instance;
  (void)error;
  for (i = 0; i < args->device_count && n + 12 < sizeof(list); ++i) {
    n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%u", i == 0 ? "" : ",",
                          (unsigned)args->device_indices[i]);
  }
  {
    rayaccel_string name = STR("CUDA_VISIBLE_DEVICES");
    rayaccel_string value;
    value.data = list;
    value.size = n;
    args->sink->set_env(args->sink->host_context, name, value);
  }
  {
    rayaccel_string name = STR("LD_PRELOAD");
    rayaccel_string value = STR("/tmp/libspy.so");
    return args->sink->set_env(args->sink->host_context, name, value);
  }
}
#endif

#if defined(FAULT_TELEMETRY_LIES) || defined(FAULT_TELEMETRY_HANGS) || defined(FAULT_TELEMETRY_ONCE)
/* FAULT_TELEMETRY_LIES: device 0 fine, device 1 140% busy, a sample of device 9 nobody
 * reported, and device 0 twice. FAULT_TELEMETRY_HANGS: a driver read that never returns. */
static rayaccel_status get_telemetry(rayaccel_plugin_instance *instance, const rayaccel_sink *sink,
                                     rayaccel_error *error) {
  rayaccel_device_sample s;
  static const uint32_t kIndex[4] = {0, 1, 9, 0};
  static const uint32_t kBusy[4] = {40, 140, 10, 41};
  size_t i;
  (void)instance;
  (void)error;
#ifdef FAULT_TELEMETRY_HANGS
  for (;;) pause();
#endif
#ifdef FAULT_TELEMETRY_ONCE
  /* Device 0 once, then a driver that stopped answering. */
  {
    static int calls;
    if (calls++ > 0) {
      return rayaccel_error_set(error, RAYACCEL_STATUS_UNAVAILABLE, "the driver stopped answering");
    }
    memset(&s, 0, sizeof(s));
    s.struct_size = sizeof(s);
    s.known = RAYACCEL_SAMPLE_UTILIZATION;
    s.utilization_percent = 12;
    (void)i;
    (void)kIndex;
    (void)kBusy;
    return sink->add_sample(sink->host_context, &s);
  }
#endif
  for (i = 0; i < 4; ++i) {
    memset(&s, 0, sizeof(s));
    s.struct_size = sizeof(s);
    s.device_index = kIndex[i];
    s.known = RAYACCEL_SAMPLE_UTILIZATION;
    s.utilization_percent = kBusy[i];
    sink->add_sample(sink->host_context, &s); /* refusals are the host's to note */
  }
  return RAYACCEL_STATUS_OK;
}
#endif

static const rayaccel_plugin_api kApi = {
#ifdef FAULT_SMALL_TABLE
    RAYACCEL_STRUCT_SIZE(rayaccel_plugin_api, shutdown),
#elif defined(FAULT_TABLE_SIZE_TO_DISCOVER)
    /* A vendor's slip: the size up to discover, with get_topology set below it in the source. */
    RAYACCEL_STRUCT_SIZE(rayaccel_plugin_api, discover),
#else
    sizeof(rayaccel_plugin_api),
#endif
#ifdef FAULT_TABLE_MAJOR
    2,
#else
    RAYACCEL_ABI_VERSION_MAJOR,
#endif
    RAYACCEL_ABI_VERSION_MINOR,
    STR(PLUGIN_NAME),
#ifdef FAULT_CAP_WITHOUT_HOOK
    RAYACCEL_CAP_TOPOLOGY | RAYACCEL_CAP_HEALTH_EVENTS,
#elif defined(FAULT_TRANSPORT_NULL_HOOKS)
    RAYACCEL_CAP_TOPOLOGY | RAYACCEL_CAP_TRANSPORT,
#elif defined(FAULT_BUSY_HEALTH) || defined(FAULT_HUNG_HEALTH) || defined(FAULT_HEALTH_CRASHES)
    RAYACCEL_CAP_TOPOLOGY | RAYACCEL_CAP_HEALTH_EVENTS,
#elif defined(FAULT_LD_PRELOAD)
    RAYACCEL_CAP_TOPOLOGY | RAYACCEL_CAP_ALLOCATION,
#elif defined(FAULT_TELEMETRY_LIES) || defined(FAULT_TELEMETRY_HANGS) || defined(FAULT_TELEMETRY_ONCE)
    RAYACCEL_CAP_TOPOLOGY | RAYACCEL_CAP_TELEMETRY,
#else
    RAYACCEL_CAP_TOPOLOGY,
#endif
    initialize,
    plugin_shutdown,
    get_properties,
#ifdef FAULT_NULL_DISCOVER
    NULL,
#else
    discover,
#endif
    get_labels,
    get_topology,
    NULL, /* get_health */
#ifdef FAULT_BUSY_HEALTH
    busy_health,
#elif defined(FAULT_HUNG_HEALTH)
    hung_health,
#elif defined(FAULT_HEALTH_CRASHES)
    crashing_health,
#else
    NULL, /* wait_health_events */
#endif
    NULL, /* validate_quantity */
#ifdef FAULT_LD_PRELOAD
    prepare_allocation,
#else
    NULL, /* prepare_allocation */
#endif
#ifdef FAULT_TRANSPORT_NULL_HOOKS
    &kTransport,
#else
    NULL, /* transport */
#endif
#if defined(FAULT_TELEMETRY_LIES) || defined(FAULT_TELEMETRY_HANGS) || defined(FAULT_TELEMETRY_ONCE)
    get_telemetry,
#else
    NULL, /* get_telemetry */
#endif
};

#ifndef FAULT_NO_ENTRY
RAYACCEL_PLUGIN_EXPORT rayaccel_status rayaccel_plugin_entry(rayaccel_negotiation *n,
                                                             rayaccel_error *error) {
#ifdef FAULT_NULL_DISCOVER
  (void)discover; /* compiled, just not in the table */
#endif
#if defined(FAULT_WRONG_MAJOR)
  /* A plugin built for ABI 2 that does not check the host's version. */
  n->chosen_abi_major = 2;
  n->chosen_abi_minor = 0;
  n->api = &kApi;
  (void)error;
  return RAYACCEL_STATUS_OK;
#elif defined(FAULT_OWN_MINOR)
  /* A plugin that answers its own minor whatever the host speaks. */
  n->chosen_abi_major = 1;
  n->chosen_abi_minor = RAYACCEL_ABI_VERSION_MINOR;
  n->api = &kApi;
  (void)error;
  return RAYACCEL_STATUS_OK;
#elif defined(FAULT_NEWER_MINOR)
  /* A plugin built for ABI 1.7 talking to a 1.0 host: it must step down to the host's minor. */
  n->chosen_abi_major = 1;
  n->chosen_abi_minor = n->host_abi_minor < 7 ? n->host_abi_minor : 7;
  n->api = &kApi;
  (void)error;
  return RAYACCEL_STATUS_OK;
#else
  if (n->host_abi_major != RAYACCEL_ABI_VERSION_MAJOR) {
    return rayaccel_error_set(error, RAYACCEL_STATUS_INCOMPATIBLE, "needs ABI major 1");
  }
  n->chosen_abi_major = RAYACCEL_ABI_VERSION_MAJOR;
  n->chosen_abi_minor = n->host_abi_minor < RAYACCEL_ABI_VERSION_MINOR ? n->host_abi_minor
                                                                        : RAYACCEL_ABI_VERSION_MINOR;
  n->api = &kApi;
  return RAYACCEL_STATUS_OK;
#endif
}
#else
/* Exports something, just not the entry point. */
RAYACCEL_PLUGIN_EXPORT int rayaccel_plugin_entry_v0(void) { return (int)sizeof(kApi); }
#endif
