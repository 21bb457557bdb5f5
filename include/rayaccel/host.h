/*
 * rayaccel/host.h: the stable C API of librayaccel for hosts (a raylet, an agent, a
 * scheduler): the registry of a node's accelerators, in C99.
 *
 * It is the twin of plugin.h, which faces vendors: a host built with any compiler and any
 * Abseil, gRPC or protobuf (Ray builds the raylet with its own) includes this header and links
 * librayaccel.so, and no C++ type crosses between them. rayaccel/registry.h is the same
 * registry as a C++ API in Abseil's types, for a host built with the same packages as
 * rayaccel; rayaccel/host.hpp wraps this header in standard C++17 (docs/embedding.md).
 *
 * Rules that hold for every declaration below (those of plugin.h):
 *  - struct_size: every struct begins with `size_t struct_size`, which its writer sets to the
 *    sizeof it was compiled with. Fields are only appended. The library reads only the fields
 *    an options or args struct holds (an older host's struct leaves the newer fields at their
 *    defaults) and writes only the fields a view the host passes can hold.
 *  - Every call returns a `rayaccel_status` (plugin.h, pinned values) and, on failure, writes
 *    a NUL-terminated message into the host's `rayaccel_error` (may be NULL). No call throws,
 *    exits or writes to stdout.
 *  - Ownership: what a `_create`, `_snapshot`, `_rescan`, `_wait_for_newer`, `_subscribe`,
 *    `_preferred_allocation` or `_prepare_allocation` call hands out is the host's, and goes
 *    back through the matching `_release` or `_destroy`. Strings and arrays in a view point
 *    into the object the view was read from and stay valid until that object is released;
 *    strings are UTF-8 and NUL-terminated.
 *  - Threads: every call may come from any thread; objects may be released on any thread.
 *    How long a call may block is in its comment (docs/embedding.md has the table).
 *
 * Versioning: RAYACCEL_HOST_API_VERSION_* below; the changelog is in docs/abi.md. A host checks
 * rayaccel_host_api_version() at start-up: the major must equal the header's, the minor must
 * be at least that of the newest call it uses.
 */
#ifndef RAYACCEL_HOST_H_
#define RAYACCEL_HOST_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h> /* pid_t */

#include "rayaccel/plugin.h" /* rayaccel_status, rayaccel_error, RAYACCEL_STRUCT_SIZE */

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define RAYACCEL_HOST_EXPORT __declspec(dllexport)
#else
#define RAYACCEL_HOST_EXPORT __attribute__((visibility("default")))
#endif

#define RAYACCEL_HOST_API_VERSION_MAJOR 1
#define RAYACCEL_HOST_API_VERSION_MINOR 1

/* The library's version of this API: (major << 16) | minor. */
RAYACCEL_HOST_EXPORT uint32_t rayaccel_host_api_version(void);

/* ---------------------------------------------------------------------------------------- */
/* Pinned enums                                                                              */
/* ---------------------------------------------------------------------------------------- */

/* plugin.h's enums serve here too: rayaccel_log_level, rayaccel_health, rayaccel_link_type,
 * rayaccel_pcie_path, rayaccel_attribute_kind. */

typedef enum rayaccel_isolation RAYACCEL_ENUM_BASE {
  RAYACCEL_ISOLATION_IN_PROCESS = 0,   /* fastest; a plugin's crash is the host's */
  RAYACCEL_ISOLATION_CHILD_PROCESS = 1 /* each plugin in a rayaccel-plugin-host of its own */
} rayaccel_isolation;

typedef enum rayaccel_allocation_objective RAYACCEL_ENUM_BASE {
  RAYACCEL_OBJECTIVE_WHOLE_PARTITION = 0, /* keep what is left usable (the default) */
  RAYACCEL_OBJECTIVE_REQUEST_FIRST = 1    /* the best set for this request alone */
} rayaccel_allocation_objective;

typedef enum rayaccel_plugin_state RAYACCEL_ENUM_BASE {
  RAYACCEL_PLUGIN_ACTIVE = 0,   /* loaded and answered; its devices are in the snapshot */
  RAYACCEL_PLUGIN_DEGRADED = 1, /* some answers were rejected (the message says which) */
  RAYACCEL_PLUGIN_FAILED = 2,   /* initialize or discover failed; contributes nothing */
  RAYACCEL_PLUGIN_REFUSED = 3   /* not loaded: unsafe file, bad entry point, ABI, table */
} rayaccel_plugin_state;

/* ---------------------------------------------------------------------------------------- */
/* Creating a registry                                                                       */
/* ---------------------------------------------------------------------------------------- */

/* One configuration value for one plugin ("sim", "spec", "examples/dgx-h100.json"). */
typedef struct rayaccel_host_config_entry {
  size_t struct_size;
  const char *plugin; /* NULL: the one plugin `plugins` names (refused unless exactly one) */
  const char *key;
  const char *value;
} rayaccel_host_config_entry;

/* Lines the library logs, its own and its plugins': one line at a time, on any thread, at
 * `log_level` and above. `line` is valid during the call only. It must not call back into the
 * registry. Called no more once rayaccel_registry_destroy returns. */
typedef void (*rayaccel_log_fn)(void *user_data, rayaccel_log_level level, const char *line);

/* A plugin host's start, for a host that tracks its children (Ray's KnownChildrenTracker):
 * call `spawn(spawn_context)` once, on any thread, and return what it returns (the child's
 * pid, or -1). */
typedef pid_t (*rayaccel_spawn_fn)(void *user_data, pid_t (*spawn)(void *spawn_context),
                                   void *spawn_context);

/* Every pointer is read during rayaccel_registry_create only (copied); NULL and 0 mean the
 * default. Initialize with RAYACCEL_REGISTRY_OPTIONS_INIT (its log_level is not zero's). */
typedef struct rayaccel_registry_options {
  size_t struct_size;
  /* Folders to search for librayaccel-<name>.so; none: RAYACCEL_PLUGIN_PATH, then the
   * folders next to the running binary and to librayaccel. */
  const char *const *search_path;
  size_t search_path_count;
  /* Plugins to load, by name or file path; none: every plugin on the search path. */
  const char *const *plugins;
  size_t plugins_count;
  /* Configuration, highest precedence first: these, RAYACCEL_<PLUGIN>_<KEY> in the
   * environment (unless ignore_environment), then config_file ("plugin.key = value"). */
  const rayaccel_host_config_entry *config;
  size_t config_count;
  int ignore_environment;
  const char *config_file;
  int allow_unsafe_permissions; /* load plugin files others than their owner may write */
  int no_host_topology;         /* no hwloc enrichment (NUMA, CPUs, NICs, PCIe paths) */
  const char *hwloc_xml;        /* an exported hwloc topology instead of this machine's */
  rayaccel_isolation isolation;
  const char *plugin_host;     /* NULL: rayaccel-plugin-host next to the running binary */
  uint32_t call_timeout_ms;    /* an isolated plugin's call; 0: 10000 */
  uint32_t restart_backoff_ms; /* 0: 1000, doubling up to a minute */
  /* How long create waits for the plugins' first answers; 0: until all answered. */
  uint32_t start_deadline_ms;
  uint64_t plugin_memory_limit_bytes; /* per plugin process; 0: 4 GiB; UINT64_MAX: none */
  rayaccel_spawn_fn spawn_child;      /* NULL: fork and exec as usual */
  void *spawn_user_data;
  rayaccel_allocation_objective allocation_objective;
  /* What is logged: this level and above (RAYACCEL_LOG_WARN by the INIT); a host that wants
   * nothing passes a `log` that drops the lines. */
  rayaccel_log_level log_level;
  rayaccel_log_fn log; /* NULL: stderr */
  void *log_user_data;
  int watch_health; /* rescan when a plugin reports a health change */
} rayaccel_registry_options;

#define RAYACCEL_REGISTRY_OPTIONS_INIT                                                 \
  {                                                                                    \
    sizeof(rayaccel_registry_options), NULL, 0, NULL, 0, NULL, 0, 0, NULL, 0, 0, NULL, \
        RAYACCEL_ISOLATION_IN_PROCESS, NULL, 0, 0, 0, 0, NULL, NULL,                   \
        RAYACCEL_OBJECTIVE_WHOLE_PARTITION, RAYACCEL_LOG_WARN, NULL, NULL, 0           \
  }

typedef struct rayaccel_registry rayaccel_registry;
typedef struct rayaccel_snapshot rayaccel_snapshot;
typedef struct rayaccel_subscription rayaccel_subscription;
typedef struct rayaccel_allocation rayaccel_allocation;
typedef struct rayaccel_environment rayaccel_environment;

/* Loads the plugins and takes the first snapshot. Blocks while the plugins load one after
 * another (isolated: each host's start within call_timeout_ms), then for their first answers,
 * all at once, up to start_deadline_ms. Fails only for rayaccel's own errors (INVALID_ARGUMENT
 * for malformed options); a plugin that does not load is a plugin status in the snapshot. */
RAYACCEL_HOST_EXPORT rayaccel_status rayaccel_registry_create(
    const rayaccel_registry_options *options, rayaccel_registry **out, rayaccel_error *error);

/* Stops health watches and subscriptions and wakes every wait; afterwards the snapshot calls
 * answer with the last snapshot and rescan does nothing. Blocks for a subscriber's callback in
 * progress and a health watch's call in progress. Idempotent. */
RAYACCEL_HOST_EXPORT void rayaccel_registry_shutdown(rayaccel_registry *registry);

/* Shuts down (above) and frees the registry. Snapshots, allocations and environments the host
 * still holds stay readable; a subscription may be destroyed before or after (delivery ends
 * here). NULL is a no-op. */
RAYACCEL_HOST_EXPORT void rayaccel_registry_destroy(rayaccel_registry *registry);

/* ---------------------------------------------------------------------------------------- */
/* Snapshots                                                                                 */
/* ---------------------------------------------------------------------------------------- */

/* The current snapshot, held for the host until rayaccel_snapshot_release. Never blocks on
 * plugins. */
RAYACCEL_HOST_EXPORT rayaccel_status rayaccel_registry_snapshot(rayaccel_registry *registry,
                                                                rayaccel_snapshot **out,
                                                                rayaccel_error *error);

/* Asks every plugin again (one plugin after another, after any scan in progress) and returns
 * the resulting snapshot: a new generation when something changed, else the same one. */
RAYACCEL_HOST_EXPORT rayaccel_status rayaccel_registry_rescan(rayaccel_registry *registry,
                                                              rayaccel_snapshot **out,
                                                              rayaccel_error *error);

/* Waits until a snapshot newer than `generation` is published, `timeout_ms` passes, or the
 * registry shuts down; returns the current snapshot either way (its generation tells). */
RAYACCEL_HOST_EXPORT rayaccel_status rayaccel_registry_wait_for_newer(rayaccel_registry *registry,
                                                                      uint64_t generation,
                                                                      uint32_t timeout_ms,
                                                                      rayaccel_snapshot **out,
                                                                      rayaccel_error *error);

/* Another hold on `snapshot`; each hold is released once. */
RAYACCEL_HOST_EXPORT rayaccel_snapshot *rayaccel_snapshot_retain(rayaccel_snapshot *snapshot);
RAYACCEL_HOST_EXPORT void rayaccel_snapshot_release(rayaccel_snapshot *snapshot);

/* Called with the current snapshot, then with each newer one, on a thread of the registry's:
 * one call at a time, in order of generations (snapshots published during a call coalesce
 * into the newest). `snapshot` is lent for the call (rayaccel_snapshot_retain keeps it). The
 * callback may call the registry. */
typedef void (*rayaccel_snapshot_fn)(void *user_data, rayaccel_snapshot *snapshot);

RAYACCEL_HOST_EXPORT rayaccel_status rayaccel_registry_subscribe(rayaccel_registry *registry,
                                                                 rayaccel_snapshot_fn on_snapshot,
                                                                 void *user_data,
                                                                 rayaccel_subscription **out,
                                                                 rayaccel_error *error);

/* Ends delivery: blocks for a call in progress, unless called from within the callback. NULL
 * is a no-op. */
RAYACCEL_HOST_EXPORT void rayaccel_subscription_destroy(rayaccel_subscription *subscription);

/* What a snapshot holds. Counts index the accessors below. */
typedef struct rayaccel_snapshot_info {
  size_t struct_size;
  uint64_t generation;
  size_t device_count;
  size_t link_count;
  size_t domain_count;
  size_t plugin_count;
  size_t resource_count;     /* Ray's resources_total */
  size_t label_count;        /* Ray's node labels */
  const char *host_topology; /* where hwloc's view came from, or why there is none */
} rayaccel_snapshot_info;

RAYACCEL_HOST_EXPORT rayaccel_status rayaccel_snapshot_get_info(const rayaccel_snapshot *snapshot,
                                                                rayaccel_snapshot_info *out,
                                                                rayaccel_error *error);

typedef struct rayaccel_device_view {
  size_t struct_size;
  const char *id;       /* stable and unique on the node */
  const char *plugin;   /* the plugin that reported it */
  const char *resource; /* the Ray resource it counts toward ("GPU") */
  uint32_t index;       /* the plugin's own index (what the visible-devices variable takes) */
  const char *name;
  const char *vendor;
  const char *accelerator_type; /* Ray's type string */
  const char *architecture;
  uint64_t memory_bytes;
  const char *pci_bus_id; /* "dddd:bb:dd.f", or "" */
  uint32_t pci_vendor_id;
  uint32_t pci_device_id;
  int32_t numa_node; /* -1 unknown */
  const char *driver_version;
  const char *firmware_version;
  const char *parent_id; /* a partition's parent, "" for a whole device */
  const char *partition_profile;
  rayaccel_health health;
  const char *health_reason;
  const char *cpuset; /* local CPUs from the host topology, "0-13,28-41" */
  size_t nearest_nic_count;
  const char *const *nearest_nics;
  size_t attribute_count; /* rayaccel_snapshot_get_attribute */
} rayaccel_device_view;

/* Device `i` (0 <= i < device_count): INVALID_ARGUMENT past the end. */
RAYACCEL_HOST_EXPORT rayaccel_status rayaccel_snapshot_get_device(const rayaccel_snapshot *snapshot,
                                                                  size_t i,
                                                                  rayaccel_device_view *out,
                                                                  rayaccel_error *error);

typedef struct rayaccel_attribute_view {
  size_t struct_size;
  const char *name;
  rayaccel_attribute_kind kind; /* plugin.h's: string, int, bool, version */
  const char *string_value;     /* string and version; "" otherwise */
  int64_t int_value;            /* int; bool as 0 or 1 */
} rayaccel_attribute_view;

RAYACCEL_HOST_EXPORT rayaccel_status
rayaccel_snapshot_get_attribute(const rayaccel_snapshot *snapshot, size_t device, size_t i,
                                rayaccel_attribute_view *out, rayaccel_error *error);

typedef struct rayaccel_link_view {
  size_t struct_size;
  size_t a, b; /* device positions, a < b */
  rayaccel_link_type type;
  const char *type_name; /* the interconnect's own name for RAYACCEL_LINK_OTHER, else "" */
  uint32_t count;
  uint64_t bandwidth_mbps;
  rayaccel_pcie_path pcie_path;
  const char *source; /* "plugin:<name>" or "hwloc" */
  uint32_t weight;    /* the vendor's own distance, 0 none */
  uint32_t hops;      /* 0 unknown */
  uint64_t min_bandwidth_mbps;
} rayaccel_link_view;

RAYACCEL_HOST_EXPORT rayaccel_status rayaccel_snapshot_get_link(const rayaccel_snapshot *snapshot,
                                                                size_t i, rayaccel_link_view *out,
                                                                rayaccel_error *error);

typedef struct rayaccel_domain_view {
  size_t struct_size;
  const char *plugin;
  const char *kind; /* "nvlink", "xgmi", "tpu-slice", ... */
  const char *id;
  size_t device_count;
  const size_t *devices; /* positions */
} rayaccel_domain_view;

RAYACCEL_HOST_EXPORT rayaccel_status rayaccel_snapshot_get_domain(const rayaccel_snapshot *snapshot,
                                                                  size_t i,
                                                                  rayaccel_domain_view *out,
                                                                  rayaccel_error *error);

typedef struct rayaccel_plugin_view {
  size_t struct_size;
  const char *name;
  const char *path;
  rayaccel_plugin_state state;
  const char *message; /* why, for anything but ACTIVE */
  const char *abi_version;
  const char *vendor;
  const char *plugin_version;
  const char *resource_name;
  const char *visible_devices_env;
  uint64_t capabilities;
  size_t device_count;
} rayaccel_plugin_view;

RAYACCEL_HOST_EXPORT rayaccel_status rayaccel_snapshot_get_plugin(const rayaccel_snapshot *snapshot,
                                                                  size_t i,
                                                                  rayaccel_plugin_view *out,
                                                                  rayaccel_error *error);

/* Ray's view, in the shapes of GcsNodeInfo.resources_total and .labels, sorted by name. */
RAYACCEL_HOST_EXPORT rayaccel_status
rayaccel_snapshot_get_resource(const rayaccel_snapshot *snapshot, size_t i, const char **name,
                               double *quantity, rayaccel_error *error);
RAYACCEL_HOST_EXPORT rayaccel_status rayaccel_snapshot_get_label(const rayaccel_snapshot *snapshot,
                                                                 size_t i, const char **key,
                                                                 const char **value,
                                                                 rayaccel_error *error);

/* ---------------------------------------------------------------------------------------- */
/* Scheduling                                                                                */
/* ---------------------------------------------------------------------------------------- */

/* Whether `quantity` devices of `resource` may be requested together: OK, or
 * INVALID_ARGUMENT with the plugin's reason. One call into the plugin of that resource. */
RAYACCEL_HOST_EXPORT rayaccel_status rayaccel_registry_validate_quantity(
    rayaccel_registry *registry, const char *resource, uint32_t quantity, rayaccel_error *error);

typedef struct rayaccel_preferred_allocation_args {
  size_t struct_size;
  const char *const *available_ids; /* none: every healthy, schedulable device of resource */
  size_t available_count;
  const char *const *must_include_ids;
  size_t must_include_count;
  size_t size;
  const char *resource; /* NULL or "": the family of the given devices, else the first */
} rayaccel_preferred_allocation_args;

typedef struct rayaccel_allocation_view {
  size_t struct_size;
  uint64_t generation;   /* the snapshot the positions refer to */
  size_t device_count;   /* 0: none possible (reason says why) */
  const size_t *devices; /* positions, ascending */
  const char *const *device_ids;
  const char *reason;
  int64_t link_score;
  int64_t leftover_score;
} rayaccel_allocation_view;

/* The best `size` devices of one family (docs/topology.md). An impossible request is an
 * allocation with no devices and the reason; malformed input (an unknown device, mixed
 * families) is INVALID_ARGUMENT. Calls no plugin unless the family's plugin validates
 * quantities. */
RAYACCEL_HOST_EXPORT rayaccel_status rayaccel_registry_preferred_allocation(
    rayaccel_registry *registry, const rayaccel_preferred_allocation_args *args,
    rayaccel_allocation **out, rayaccel_error *error);
RAYACCEL_HOST_EXPORT rayaccel_status rayaccel_allocation_get(const rayaccel_allocation *allocation,
                                                             rayaccel_allocation_view *out,
                                                             rayaccel_error *error);
RAYACCEL_HOST_EXPORT void rayaccel_allocation_destroy(rayaccel_allocation *allocation);

typedef struct rayaccel_prepare_allocation_args {
  size_t struct_size;
  const char *const *device_ids; /* all of one plugin */
  size_t device_count;
  /* 0: the current snapshot. An older one: the lease holds while its devices are still there
   * and not unhealthy; otherwise FAILED_PRECONDITION says which device changed. */
  uint64_t generation;
} rayaccel_prepare_allocation_args;

/* The environment a worker needs to use exactly these devices. One call into their plugin. */
RAYACCEL_HOST_EXPORT rayaccel_status rayaccel_registry_prepare_allocation(
    rayaccel_registry *registry, const rayaccel_prepare_allocation_args *args,
    rayaccel_environment **out, rayaccel_error *error);
/* How many variables the environment sets, and variable `i` of them (sorted by name). */
RAYACCEL_HOST_EXPORT size_t rayaccel_environment_count(const rayaccel_environment *environment);
RAYACCEL_HOST_EXPORT rayaccel_status
rayaccel_environment_get(const rayaccel_environment *environment, size_t i, const char **name,
                         const char **value, rayaccel_error *error);
RAYACCEL_HOST_EXPORT void rayaccel_environment_destroy(rayaccel_environment *environment);

/* ---------------------------------------------------------------------------------------- */
/* Statistics                                                                                */
/* ---------------------------------------------------------------------------------------- */

typedef struct rayaccel_registry_stats {
  size_t struct_size;
  uint64_t scans;           /* scans that asked the plugins, the first included */
  uint64_t changes;         /* scans that found a change: new generations */
  uint64_t health_events;   /* health-watch wake-ups that led to a scan */
  uint64_t plugin_restarts; /* isolated plugins started again after a crash */
  double scan_seconds;      /* the time those scans took, in all */
} rayaccel_registry_stats;

/* Never blocks on plugins. */
RAYACCEL_HOST_EXPORT rayaccel_status rayaccel_registry_get_stats(rayaccel_registry *registry,
                                                                 rayaccel_registry_stats *out,
                                                                 rayaccel_error *error);

/* ---------------------------------------------------------------------------------------- */
/* Telemetry (since 1.1)                                                                     */
/* ---------------------------------------------------------------------------------------- */

/* One sample of the node: each device of a plugin with get_telemetry (plugin ABI 1.6). */
typedef struct rayaccel_telemetry rayaccel_telemetry;

/* Asks every plugin with get_telemetry once, one after another; blocks up to each isolated
 * plugin's call timeout. A plugin whose call fails, times out or crashes has its error in its
 * view and no samples; the others are unaffected. Calls no other hook. Since 1.1. */
RAYACCEL_HOST_EXPORT rayaccel_status rayaccel_registry_sample_telemetry(
    rayaccel_registry *registry, rayaccel_telemetry **out, rayaccel_error *error);
RAYACCEL_HOST_EXPORT void rayaccel_telemetry_destroy(rayaccel_telemetry *telemetry);

typedef struct rayaccel_telemetry_info {
  size_t struct_size;
  int64_t unix_ms;     /* when it was taken */
  size_t device_count; /* rayaccel_telemetry_get_device */
  size_t plugin_count; /* rayaccel_telemetry_get_plugin: those with the hook */
} rayaccel_telemetry_info;

RAYACCEL_HOST_EXPORT rayaccel_status rayaccel_telemetry_get_info(
    const rayaccel_telemetry *telemetry, rayaccel_telemetry_info *out, rayaccel_error *error);

typedef struct rayaccel_telemetry_device_view {
  size_t struct_size;
  const char *device_id; /* the snapshot's device */
  const char *plugin;
  /* plugin.h's sample, as the host checked it: a value holds only where its
   * RAYACCEL_SAMPLE_* bit is set in sample.known; sample.device_index is the plugin's index. */
  rayaccel_device_sample sample;
} rayaccel_telemetry_device_view;

RAYACCEL_HOST_EXPORT rayaccel_status rayaccel_telemetry_get_device(
    const rayaccel_telemetry *telemetry, size_t i, rayaccel_telemetry_device_view *out,
    rayaccel_error *error);

typedef struct rayaccel_telemetry_plugin_view {
  size_t struct_size;
  const char *name;
  const char *error; /* "" unless the call failed (no samples then) */
  double seconds;    /* how long the plugin took */
  /* Why fields are unknown on every device: unknown_fields[k] (RAYACCEL_SAMPLE_* bits) for
   * the reason unknown_reasons[k]. */
  size_t unknown_count;
  const uint32_t *unknown_fields;
  const char *const *unknown_reasons;
} rayaccel_telemetry_plugin_view;

RAYACCEL_HOST_EXPORT rayaccel_status rayaccel_telemetry_get_plugin(
    const rayaccel_telemetry *telemetry, size_t i, rayaccel_telemetry_plugin_view *out,
    rayaccel_error *error);

/* ---------------------------------------------------------------------------------------- */
/* The raylet's side of publishing                                                           */
/* ---------------------------------------------------------------------------------------- */

/* For a raylet that receives agents' publications with its own gRPC and its own code generated
 * from rayaccel's .proto files (share/rayaccel/proto): the checks rayaccel's own sink makes,
 * so that both accept exactly the same. Strings are read during the call only. */
typedef struct rayaccel_publication {
  size_t struct_size;
  const char *node_id; /* Ray's NodeID: 56 lower-case hex digits */
  const char *session; /* the agent's session id (AgentHello.agent_session) */
  uint64_t generation;
  const char *const *resource_names; /* NodeSnapshot.resources_total */
  const double *resource_quantities;
  size_t resource_count;
  const char *const *label_keys; /* NodeSnapshot.labels */
  const char *const *label_values;
  size_t label_count;
} rayaccel_publication;

/* OK, or INVALID_ARGUMENT naming what Ray would not accept: the node id, the session, a
 * resource (Ray's own, not whole, out of bounds, a repeated name), a label (syntax, a ray.io/
 * key Ray does not define for agents), too many of either. Calls nothing; never blocks. */
RAYACCEL_HOST_EXPORT rayaccel_status
rayaccel_publication_check(const rayaccel_publication *publication, rayaccel_error *error);

/* Which publications apply, per node: within one agent session generations only move forward
 * (an older or equal one is acknowledged, not applied, so a late retry never rolls a node
 * back); a new session replaces the node. Thread-safe. */
typedef struct rayaccel_publication_order rayaccel_publication_order;

RAYACCEL_HOST_EXPORT rayaccel_status
rayaccel_publication_order_create(rayaccel_publication_order **out, rayaccel_error *error);
/* `*apply` is 1 when the publication applies (it is then recorded), 0 when it is stale;
 * `*current` the node's current generation afterwards. */
RAYACCEL_HOST_EXPORT rayaccel_status rayaccel_publication_order_admit(
    rayaccel_publication_order *order, const char *node_id, const char *session,
    uint64_t generation, int *apply, uint64_t *current, rayaccel_error *error);
RAYACCEL_HOST_EXPORT void rayaccel_publication_order_destroy(rayaccel_publication_order *order);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RAYACCEL_HOST_H_ */
