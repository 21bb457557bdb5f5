/*
 * rayaccel/plugin.h: the stable C ABI between rayaccel and an accelerator vendor plugin.
 *
 * This is the only header a vendor needs. It is C99, has no dependency beyond the C standard
 * library, and is versioned: see docs/abi.md for the compatibility rules and the changelog.
 *
 * Shape of the ABI
 * ----------------
 * A plugin is a shared library that exports exactly one symbol, `rayaccel_plugin_entry`. The
 * host calls it once with the ABI version it speaks; the plugin answers with the version it
 * chose and a pointer to a static, const table of hooks (`rayaccel_plugin_api`). Everything
 * else happens through that table.
 *
 * Rules that hold for every declaration below:
 *  - struct_size: every struct that crosses the boundary begins with `size_t struct_size`.
 *    Fields are only ever appended, never reordered or removed. Whoever fills a struct sets
 *    struct_size to sizeof the struct it was compiled with; whoever reads one uses only the
 *    fields that fit inside it (RAYACCEL_HAS_FIELD) and treats the rest as absent (zero,
 *    empty, NULL). So a plugin checks the host's structs (the sink, the args of a hook) with
 *    RAYACCEL_HAS_FIELD before using a field newer than 1.0, and the host does the same with
 *    the plugin's (device_info, link, ...). Arrays of structs are the exception: an element
 *    type that travels in an array (rayaccel_config_entry) is frozen for major version 1, so
 *    `config[i]` is safe; its struct_size is still set.
 *  - A NULL hook means "not supported"; the host checks before every call.
 *  - Capability bits (`capabilities`) speak from plugin to host; struct sizes and the
 *    negotiated minor version speak from host to plugin.
 *  - No memory crosses the boundary to be freed on the other side. Plugins hand results to
 *    host-provided sink callbacks, which copy what they keep before returning. Objects a
 *    plugin creates (instances, transport handles) are destroyed by the plugin's own hooks.
 *  - Strings are `rayaccel_string` (pointer + length, UTF-8, not necessarily NUL-terminated).
 *  - Every hook returns a `rayaccel_status` with a pinned numeric value; on failure it writes a
 *    human-readable message into the host-provided `rayaccel_error`.
 *  - No hook may throw a C++ exception, call exit(), or write to stdout.
 *
 * Stability: everything in this file is stable within ABI major version 1 unless its comment
 * says "experimental".
 */
#ifndef RAYACCEL_PLUGIN_H_
#define RAYACCEL_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------- */
/* Versioning                                                                                */
/* ---------------------------------------------------------------------------------------- */

/* The ABI version this header describes. A host and a plugin work together when their major
 * versions are equal; they then use the smaller of their two minor versions. */
#define RAYACCEL_ABI_VERSION_MAJOR 1
#define RAYACCEL_ABI_VERSION_MINOR 6

/* The name of the one symbol a plugin exports. */
#define RAYACCEL_PLUGIN_ENTRY_SYMBOL "rayaccel_plugin_entry"

/* Size of a struct up to and including `last_field`: what a writer compiled against an
 * older header would have put in struct_size. */
#define RAYACCEL_STRUCT_SIZE(type, last_field) \
  (offsetof(type, last_field) + sizeof(((type *)0)->last_field))

/* True when the struct at `ptr` (whose first member is struct_size) is large enough to hold
 * `field`. Readers use it before touching any field added after version 1.0. */
#define RAYACCEL_HAS_FIELD(ptr, type, field) \
  ((ptr)->struct_size >= RAYACCEL_STRUCT_SIZE(type, field))

#if defined(_WIN32)
#define RAYACCEL_PLUGIN_EXPORT __declspec(dllexport)
#else
#define RAYACCEL_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* An enum whose values cross the ABI. In C++ it gets a fixed 32-bit underlying type, so that a
 * value outside the enumerators (a newer peer's, or a broken one's) is representable until it
 * is checked; without one, even loading such a value is undefined in C++. The layout is that
 * of the C enum (every value is non-negative: an unsigned int). Since 1.1. */
#if defined(__cplusplus)
#define RAYACCEL_ENUM_BASE : uint32_t
#else
#define RAYACCEL_ENUM_BASE
#endif

/* ---------------------------------------------------------------------------------------- */
/* Status and errors                                                                        */
/* ---------------------------------------------------------------------------------------- */

/* Pinned values: never renumbered. New codes may be added in a minor version; a host treats
 * an unknown code as RAYACCEL_STATUS_INTERNAL. */
typedef enum rayaccel_status RAYACCEL_ENUM_BASE {
  RAYACCEL_STATUS_OK = 0,
  RAYACCEL_STATUS_INVALID_ARGUMENT = 1,    /* the caller passed something malformed */
  RAYACCEL_STATUS_NOT_FOUND = 2,           /* a named device, key or peer does not exist */
  RAYACCEL_STATUS_UNSUPPORTED = 3,         /* the operation is not offered by this plugin */
  RAYACCEL_STATUS_UNAVAILABLE = 4,         /* vendor runtime or driver missing or unreachable */
  RAYACCEL_STATUS_FAILED_PRECONDITION = 5, /* called in the wrong state (e.g. not initialized) */
  RAYACCEL_STATUS_RESOURCE_EXHAUSTED = 6,  /* out of memory, handles, or a sink refused more */
  RAYACCEL_STATUS_TIMEOUT = 7,             /* a wait ended without an event; not an error */
  RAYACCEL_STATUS_INCOMPATIBLE = 8,        /* ABI or struct version cannot be served */
  RAYACCEL_STATUS_INTERNAL = 9,            /* a bug or an unexpected vendor error */
  RAYACCEL_STATUS_ABORTED = 10,            /* the sink asked the plugin to stop */
  RAYACCEL_STATUS_PEER_LOST = 11,          /* transport: the peer went away (since 1.1) */
  RAYACCEL_STATUS_STALE = 12,              /* transport: the peer deregistered it (since 1.1) */
  RAYACCEL_STATUS_UNAUTHENTICATED = 13     /* transport: the peer did not prove the shared key,
                                            * or refused ours (since 1.3) */
} rayaccel_status;

/* Where a failing hook explains itself. Provided by the caller (always the host); the plugin
 * writes at most `capacity` bytes including a terminating NUL into `message`. May be NULL
 * only where a comment says so. Use rayaccel_error_set() to fill it. */
typedef struct rayaccel_error {
  size_t struct_size;
  char *message;   /* host-owned buffer, `capacity` bytes */
  size_t capacity; /* 0 means: do not write */
} rayaccel_error;

/* Copies `message` (NUL-terminated) into `error`, truncating, and returns `code`: write
 * `return rayaccel_error_set(err, RAYACCEL_STATUS_UNAVAILABLE, "no driver");` in a hook. */
static inline rayaccel_status rayaccel_error_set(rayaccel_error *error, rayaccel_status code,
                                                 const char *message) {
  size_t i = 0;
  if (error != NULL && error->message != NULL && error->capacity > 0) {
    for (; message != NULL && message[i] != '\0' && i + 1 < error->capacity; ++i) {
      error->message[i] = message[i];
    }
    error->message[i] = '\0';
  }
  return code;
}

/* ---------------------------------------------------------------------------------------- */
/* Basic types                                                                              */
/* ---------------------------------------------------------------------------------------- */

/* UTF-8 text, not necessarily NUL-terminated. {NULL, 0} is the empty string / "absent".
 * Lifetime: stated by the struct or hook that carries it. */
typedef struct rayaccel_string {
  const char *data;
  size_t size;
} rayaccel_string;

/* Opaque plugin instance, created by `initialize`, destroyed by `shutdown`. */
typedef struct rayaccel_plugin_instance rayaccel_plugin_instance;

typedef enum rayaccel_log_level RAYACCEL_ENUM_BASE {
  RAYACCEL_LOG_TRACE = 0,
  RAYACCEL_LOG_DEBUG = 1,
  RAYACCEL_LOG_INFO = 2,
  RAYACCEL_LOG_WARN = 3,
  RAYACCEL_LOG_ERROR = 4
} rayaccel_log_level;

typedef enum rayaccel_health RAYACCEL_ENUM_BASE {
  RAYACCEL_HEALTH_UNKNOWN = 0, /* the plugin cannot tell; also the value of an absent field */
  RAYACCEL_HEALTH_HEALTHY = 1,
  RAYACCEL_HEALTH_UNHEALTHY = 2
} rayaccel_health;

/* ---------------------------------------------------------------------------------------- */
/* Host services (host -> plugin)                                                           */
/* ---------------------------------------------------------------------------------------- */

/* Passed to `initialize`. Owned by the host and valid until `shutdown` returns. The
 * callbacks are thread-safe and may be called from any thread the plugin owns. */
typedef struct rayaccel_host_api {
  size_t struct_size;
  void *host_context; /* pass back as the first argument of every callback */
  /* Log one line through the host's logger. Never blocks for long. Since 1.0. */
  void (*log)(void *host_context, rayaccel_log_level level, rayaccel_string message);
} rayaccel_host_api;

/* One configuration entry, e.g. {"spec", "examples/dgx-h100.json"}: the key without the
 * plugin's name (the command line's `--config acme.spec=...` and `--config spec=...`, the
 * environment's RAYACCEL_ACME_SPEC and a config file's `acme.spec = ...` all arrive as "spec").
 * The host resolves those sources before calling. Frozen: this struct never grows within major
 * version 1 (it travels in an array). */
typedef struct rayaccel_config_entry {
  size_t struct_size;
  rayaccel_string key;
  rayaccel_string value;
} rayaccel_config_entry;

/* ---------------------------------------------------------------------------------------- */
/* Results (plugin -> host)                                                                 */
/* ---------------------------------------------------------------------------------------- */

/* Static facts about the plugin, filled by `get_properties` after `initialize`. Strings are
 * owned by the plugin and must stay valid until `shutdown`; the host copies them at once. */
typedef struct rayaccel_plugin_properties {
  size_t struct_size;
  rayaccel_string vendor;              /* e.g. "nvidia", "amd", "google", "intel" */
  rayaccel_string resource_name;       /* the Ray resource, e.g. "GPU", "TPU", "HPU" */
  rayaccel_string visible_devices_env; /* e.g. "CUDA_VISIBLE_DEVICES"; empty if none */
  rayaccel_string plugin_version;      /* the plugin's own version, free form */
} rayaccel_plugin_properties;

/* One device, as handed to rayaccel_sink.add_device. All strings are owned by the plugin and
 * need only live until add_device returns. Absent strings are empty. */
typedef struct rayaccel_device_info {
  size_t struct_size;
  /* The plugin's own index for this device, unique within the plugin. Links, domains, health
   * and allocation refer to devices by it; conventionally it is what the visible-devices
   * variable takes (the CUDA ordinal, the TPU chip number, ...). */
  uint32_t index;
  rayaccel_string id;               /* required: stable across restarts, e.g. the GPU UUID */
  rayaccel_string name;             /* required: marketing name, "NVIDIA H100 80GB HBM3" */
  rayaccel_string accelerator_type; /* Ray's type string ("H100"); empty: the host derives it */
  rayaccel_string architecture;     /* "hopper", "gfx942", "v4", ... */
  uint64_t memory_bytes;            /* device memory; 0 = unknown */
  rayaccel_string pci_bus_id;       /* "dddd:bb:dd.f" (lower-case hex); empty = not PCI. The
                                       host also reads NVML's "dddddddd:bb:dd.f" and "bb:dd.f",
                                       any case */
  uint32_t pci_vendor_id;           /* 0 = unknown */
  uint32_t pci_device_id;           /* 0 = unknown */
  int32_t numa_node;                /* -1 = unknown (the host may derive it from hwloc) */
  rayaccel_string driver_version;
  rayaccel_string firmware_version;
  /* Partitions (MIG instance, AMD CPX partition): the id of the physical device this one is
   * carved out of, and the profile ("1g.10gb", "CPX"). Both empty for a whole device. */
  rayaccel_string parent_id;
  rayaccel_string partition_profile;
  rayaccel_health health;
  rayaccel_string health_reason; /* why it is unhealthy or unknown; may be empty */
} rayaccel_device_info;

/* Typed device attributes, as in Kubernetes DRA. */
typedef enum rayaccel_attribute_kind RAYACCEL_ENUM_BASE {
  RAYACCEL_ATTRIBUTE_STRING = 0,
  RAYACCEL_ATTRIBUTE_INT = 1,
  RAYACCEL_ATTRIBUTE_BOOL = 2,
  RAYACCEL_ATTRIBUTE_VERSION = 3 /* semantic version in string_value, "12.4.0" */
} rayaccel_attribute_kind;

typedef struct rayaccel_attribute {
  size_t struct_size;
  uint32_t device_index; /* a device already added in this discovery */
  rayaccel_string name;  /* Kubernetes label-key syntax, e.g. "compute_capability" */
  rayaccel_attribute_kind kind;
  rayaccel_string string_value; /* STRING and VERSION */
  int64_t int_value;            /* INT; BOOL uses 0 or 1 */
} rayaccel_attribute;

/* How two devices connect. Pinned values. */
typedef enum rayaccel_link_type RAYACCEL_ENUM_BASE {
  RAYACCEL_LINK_PCIE = 1,      /* a PCIe path; `pcie_path` says how far */
  RAYACCEL_LINK_NVLINK = 2,    /* NVIDIA NVLink, direct or through NVSwitch */
  RAYACCEL_LINK_XGMI = 3,      /* AMD Infinity Fabric / xGMI */
  RAYACCEL_LINK_ICI = 4,       /* TPU inter-chip interconnect */
  RAYACCEL_LINK_SCALE_OUT = 5, /* an on-device NIC fabric (Gaudi RoCE ports) */
  RAYACCEL_LINK_OTHER = 6      /* another interconnect: name it in rayaccel_link.type_name */
} rayaccel_link_type;

/* PCIe path levels, in nvidia-smi's vocabulary, ordered from closest to farthest. */
typedef enum rayaccel_pcie_path RAYACCEL_ENUM_BASE {
  RAYACCEL_PCIE_PATH_UNKNOWN = 0,
  RAYACCEL_PCIE_PATH_PIX = 1,  /* through at most one PCIe switch */
  RAYACCEL_PCIE_PATH_PXB = 2,  /* through several PCIe switches, no host bridge */
  RAYACCEL_PCIE_PATH_PHB = 3,  /* through a PCIe host bridge */
  RAYACCEL_PCIE_PATH_NODE = 4, /* within a NUMA node, across host bridges */
  RAYACCEL_PCIE_PATH_SYS = 5   /* across the SMP interconnect between NUMA nodes */
} rayaccel_pcie_path;

/* A link between two devices of this plugin. Links are undirected: report each pair once. */
typedef struct rayaccel_link {
  size_t struct_size;
  uint32_t device_a; /* device index */
  uint32_t device_b; /* device index, different from device_a */
  rayaccel_link_type type;
  rayaccel_pcie_path pcie_path; /* for RAYACCEL_LINK_PCIE; UNKNOWN otherwise */
  uint32_t count;               /* bonded links (NV18 = 18); 0 = unknown, 1 for PCIe */
  /* Megabytes (10^6 bytes) per second in each direction, all bonded links together: an
   * NVLink 4 link is 25000, NV18 450000. 0 = unknown. */
  uint64_t bandwidth_mbps;
  /* The vendor's own distance for the pair, smaller is closer (AMD KFD's link weight);
   * 0 = none. Only comparable between links of one plugin. */
  uint32_t weight;
  uint32_t hops;               /* links traversed (1 = direct); 0 = unknown */
  uint64_t min_bandwidth_mbps; /* the guaranteed floor, same unit; 0 = unknown */
  /* For RAYACCEL_LINK_OTHER: the interconnect's short name, as `topo` shows it ("UB", "CXL"):
   * 1-16 of [A-Za-z0-9-]; ignored for the other types. Since 1.2. */
  rayaccel_string type_name;
} rayaccel_link;

/* A group of devices that belong together: an NVLink clique, an xGMI hive, a TPU slice. */
typedef struct rayaccel_domain {
  size_t struct_size;
  rayaccel_string kind;    /* "nvlink", "xgmi", "tpu-slice", "rack", ... */
  rayaccel_string id;      /* unique within kind on this node, e.g. "<clusterUUID>.<clique>" */
  const uint32_t *devices; /* device indices, owned by the plugin for the call */
  size_t device_count;
} rayaccel_domain;

/* What a device is doing now, as handed to rayaccel_sink.add_sample by get_telemetry. A field
 * holds a value only where its RAYACCEL_SAMPLE_* bit is set in `known`; the host reads the
 * others as unknown. Counters count since the driver loaded and never go down. Since 1.6. */
#define RAYACCEL_SAMPLE_UTILIZATION ((uint32_t)1 << 0)   /* utilization_percent */
#define RAYACCEL_SAMPLE_MEMORY ((uint32_t)1 << 1)        /* memory_used_bytes, memory_total_bytes */
#define RAYACCEL_SAMPLE_POWER ((uint32_t)1 << 2)         /* power_mw */
#define RAYACCEL_SAMPLE_TEMPERATURE ((uint32_t)1 << 3)   /* temperature_c */
#define RAYACCEL_SAMPLE_ECC ((uint32_t)1 << 4)           /* ecc_corrected, ecc_uncorrected */
#define RAYACCEL_SAMPLE_RETIRED_PAGES ((uint32_t)1 << 5) /* retired_pages */
#define RAYACCEL_SAMPLE_LINK_ERRORS ((uint32_t)1 << 6)   /* link_errors */

typedef struct rayaccel_device_sample {
  size_t struct_size;
  uint32_t device_index;        /* a device of the plugin's last discover */
  uint32_t known;               /* RAYACCEL_SAMPLE_* bits */
  uint32_t utilization_percent; /* 0-100: how busy its compute was over the driver's last period */
  uint32_t power_mw;            /* milliwatts drawn, averaged as the driver does */
  uint64_t memory_used_bytes;   /* device memory in use, of memory_total_bytes */
  uint64_t memory_total_bytes;
  int32_t temperature_c;    /* degrees Celsius, the driver's main (edge or GPU) sensor */
  uint32_t reserved;        /* 0 */
  uint64_t ecc_corrected;   /* ECC errors corrected, volatile counts */
  uint64_t ecc_uncorrected; /* ECC errors not corrected */
  uint64_t retired_pages;   /* memory pages retired or remapped for errors */
  uint64_t link_errors;     /* errors counted on the device's links (NVLink, xGMI, ...) */
} rayaccel_device_sample;

/* The host's collector for everything a hook returns. Owned by the host, valid for the call
 * it is passed to. Each callback copies what it needs before returning. Its status:
 *  - RAYACCEL_STATUS_OK: taken;
 *  - RAYACCEL_STATUS_INVALID_ARGUMENT: this item was refused (the host records why); carry on
 *    with the next, or stop and return it: both are fine;
 *  - RAYACCEL_STATUS_RESOURCE_EXHAUSTED or RAYACCEL_STATUS_ABORTED: stop and return it.
 * Callbacks are not thread-safe: call them only from the thread that is running the hook. */
typedef struct rayaccel_sink {
  size_t struct_size;
  void *host_context;
  /* discover */
  rayaccel_status (*add_device)(void *host_context, const rayaccel_device_info *device);
  rayaccel_status (*add_attribute)(void *host_context, const rayaccel_attribute *attribute);
  /* get_labels: a node label, Kubernetes syntax; keys under "ray.io/" only where Ray defines
   * them (see docs/abi.md). */
  rayaccel_status (*add_label)(void *host_context, rayaccel_string key, rayaccel_string value);
  /* get_topology */
  rayaccel_status (*add_link)(void *host_context, const rayaccel_link *link);
  rayaccel_status (*add_domain)(void *host_context, const rayaccel_domain *domain);
  /* get_health and wait_health_events */
  rayaccel_status (*set_health)(void *host_context, uint32_t device_index, rayaccel_health health,
                                rayaccel_string reason);
  /* prepare_allocation: one environment variable a worker needs */
  rayaccel_status (*set_env)(void *host_context, rayaccel_string name, rayaccel_string value);
  /* Why the last call on this sink was refused: the item (INVALID_ARGUMENT, "link 0-7:
   * endpoint is not a reported device") or the answer (RESOURCE_EXHAUSTED, "more than 4096
   * devices reported"). Empty when the last call was taken. Valid until the next call on the
   * sink. A sink large enough to hold this field always sets it: check
   * RAYACCEL_HAS_FIELD(sink, rayaccel_sink, last_refusal) and nothing else. Since 1.2. */
  rayaccel_string (*last_refusal)(void *host_context);
  /* discover: why this scan found no device, in one line ("cannot load libnvidia-ml.so.1:
   * ...", "no /dev/accel* node", "every device excluded by ACME_DEVICES"): what the host shows
   * as the plugin's message while it reports none. Ignored in a scan that adds a device; the
   * last call of a scan wins; control characters are escaped and text past 1024 bytes cut.
   * Returns OK. A plugin checks RAYACCEL_HAS_FIELD(sink, rayaccel_sink, explain_no_devices):
   * an older host has only the log line that starts with "0 devices:", which it still reads.
   * Since 1.6. */
  rayaccel_status (*explain_no_devices)(void *host_context, rayaccel_string reason);
  /* get_telemetry: one device's sample. Refused (INVALID_ARGUMENT, with last_refusal) for an
   * index the last discover did not report, a second sample of one device in a call, or a
   * value out of range (utilization over 100, memory used over its total). Since 1.6. */
  rayaccel_status (*add_sample)(void *host_context, const rayaccel_device_sample *sample);
  /* get_telemetry: why the fields `fields` (RAYACCEL_SAMPLE_* bits) are unknown on every
   * device, in one line ("nvmlDeviceGetPowerUsage: Not Supported"): shown once per plugin
   * beside its samples. Since 1.6. */
  rayaccel_status (*explain_unknown)(void *host_context, uint32_t fields, rayaccel_string reason);
} rayaccel_sink;

/* ---------------------------------------------------------------------------------------- */
/* Hook arguments (host -> plugin). One struct per call; the host owns them for the call.    */
/* ---------------------------------------------------------------------------------------- */

typedef struct rayaccel_initialize_args {
  size_t struct_size;
  const rayaccel_host_api *host;       /* valid until shutdown */
  const rayaccel_config_entry *config; /* valid for the call only: copy what you keep */
  size_t config_count;
  rayaccel_plugin_instance *instance; /* out: the new instance */
} rayaccel_initialize_args;

typedef struct rayaccel_allocation_args {
  size_t struct_size;
  const uint32_t *device_indices; /* the chosen devices, valid for the call */
  size_t device_count;
  const rayaccel_sink *sink; /* prepare_allocation reports through set_env */
} rayaccel_allocation_args;

typedef struct rayaccel_health_wait_args {
  size_t struct_size;
  uint32_t timeout_ms;       /* wait at most this long for a change */
  const rayaccel_sink *sink; /* report each change through set_health */
} rayaccel_health_wait_args;

/* ---------------------------------------------------------------------------------------- */
/* Transport: direct device-to-device data movement (stable since 1.1)                       */
/* ---------------------------------------------------------------------------------------- */

/* The model (docs/transport.md): a process opens an *endpoint*; memory registered on it is a
 * *region*; a region packs into a *descriptor* (the "tensor reference" Ray carries in object
 * metadata); a peer *connects* to the endpoint's address, both prove the shared key (since
 * 1.3), and it issues READs (pull) or WRITEs against the descriptor, each checked by the
 * region's owner; every operation in flight is a *request*, polled until it completes. A
 * *notification* is a small message that reaches the peer after every transfer
 * issued before it on the connection has landed.
 *
 * Since 1.1. The 1.0 table under this name was experimental and had another shape: a 1.1 host
 * uses `transport` only when the negotiated minor version is at least 1.
 *
 * Threads: every hook may be called from any thread, concurrently, except that a handle must
 * not be used during or after the hook that closes it (close_endpoint, deregister_memory,
 * close, and a poll that reports completion). A handle belongs to the endpoint it came from.
 *
 * Blocking: no hook blocks for longer than the endpoint's peer_timeout_ms; `wait` blocks up to
 * its own timeout. Everything else returns at once (a transfer that cannot start yet is queued
 * and reported by its request). */

typedef struct rayaccel_transport_endpoint rayaccel_transport_endpoint; /* plugin-owned */
typedef struct rayaccel_memory_region rayaccel_memory_region;           /* plugin-owned */
typedef struct rayaccel_connection rayaccel_connection;                 /* plugin-owned */
typedef struct rayaccel_request rayaccel_request;                       /* plugin-owned */

/* Opaque bytes the host carries between processes and nodes. Lifetime: the call. */
typedef struct rayaccel_blob {
  const uint8_t *data;
  size_t size;
} rayaccel_blob;

/* Receives blobs from the plugin; `put` copies the blob before returning. Host-owned, valid
 * for the call it is passed to, called only on the thread running that call. */
typedef struct rayaccel_blob_sink {
  size_t struct_size;
  void *host_context;
  rayaccel_status (*put)(void *host_context, rayaccel_blob blob);
} rayaccel_blob_sink;

/* Pinned values. */
typedef enum rayaccel_memory_kind RAYACCEL_ENUM_BASE {
  RAYACCEL_MEMORY_HOST = 0,  /* ordinary process memory */
  RAYACCEL_MEMORY_DEVICE = 1 /* memory of one of this plugin's devices (device_index) */
} rayaccel_memory_kind;

typedef enum rayaccel_transfer_op RAYACCEL_ENUM_BASE {
  RAYACCEL_TRANSFER_READ = 0, /* remote region -> local region (a pull, what Ray's RDT does) */
  RAYACCEL_TRANSFER_WRITE = 1 /* local region -> remote region */
} rayaccel_transfer_op;

/* How a transfer's bytes moved (rayaccel_transfer_args.path). Pinned values. Since 1.4. */
typedef enum rayaccel_transfer_path RAYACCEL_ENUM_BASE {
  RAYACCEL_PATH_UNREPORTED = 0, /* the plugin did not say (a plugin built before 1.4) */
  RAYACCEL_PATH_FABRIC = 1,     /* the fabric moved the memory as it is: host memory, or device
                                 * memory the fabric reaches itself (GPUDirect) */
  RAYACCEL_PATH_STAGED = 2,     /* device memory copied through host memory on its side(s) */
  RAYACCEL_PATH_DEVICE_IPC = 3, /* device to device on one host: the owner's device memory mapped
                                 * into the reader (CUDA or HIP IPC), copied by its device */
  RAYACCEL_PATH_SAME_HOST = 4   /* host memory of two processes of one host, copied by the owner
                                 * between them (process_vm_writev/readv). Added within 1.5: a
                                 * host built before it reads it as unreported */
} rayaccel_transfer_path;

/* Limits both sides rely on: a descriptor or address larger than this is malformed, and a
 * notification larger than this is refused. */
#define RAYACCEL_TRANSPORT_MAX_BLOB ((size_t)4096)
#define RAYACCEL_TRANSPORT_MAX_NOTIFICATION ((size_t)1024)
/* The shortest shared key a transport accepts (128 bits). Since 1.3. */
#define RAYACCEL_TRANSPORT_MIN_KEY ((size_t)16)

typedef struct rayaccel_endpoint_args {
  size_t struct_size;
  rayaccel_plugin_instance *instance;
  /* Receives the endpoint's address once, before open_endpoint returns: what a peer passes to
   * `connect`. At most RAYACCEL_TRANSPORT_MAX_BLOB bytes. */
  const rayaccel_blob_sink *address;
  /* How long a peer may stay silent before it counts as lost, whether it died, stopped or was
   * cut off: requests on its connection then fail with RAYACCEL_STATUS_PEER_LOST. Also bounds
   * `connect`. 0 = the plugin's default. */
  uint32_t peer_timeout_ms;
  rayaccel_transport_endpoint *endpoint; /* out */
  /* The shared secret (RAYACCEL_TRANSPORT_MIN_KEY to RAYACCEL_TRANSPORT_MAX_BLOB bytes; valid
   * for the call, copy it). Two endpoints exchange nothing that names a region, and serve no
   * transfer, until each has proven to the other that it holds the same key; a peer that
   * cannot is refused, and `connect` to it fails with RAYACCEL_STATUS_UNAUTHENTICATED. A
   * transport refuses to open without a key (INVALID_ARGUMENT). Since 1.3: a 1.3 host always
   * passes one, and uses a transport only when the negotiated minor version is at least 3. */
  rayaccel_blob key;
} rayaccel_endpoint_args;

/* Flags of rayaccel_register_args. Pinned values. */
/* The plugin allocates the memory: `address` is an output. Memory the fabric registers best
 * (a staging buffer or pool: UCX's own allocation); deregister_memory frees it. A plugin
 * that cannot allocate returns UNSUPPORTED. */
#define RAYACCEL_REGISTER_ALLOCATE ((uint32_t)1 << 0)

typedef struct rayaccel_register_args {
  size_t struct_size;
  rayaccel_transport_endpoint *endpoint;
  /* [address, address + length): the caller's memory, which stays valid until
   * deregister_memory returns; or, with RAYACCEL_REGISTER_ALLOCATE, out: the plugin's. */
  void *address;
  uint64_t length;
  rayaccel_memory_kind kind;
  uint32_t device_index;          /* for RAYACCEL_MEMORY_DEVICE; ignored for host memory */
  uint32_t flags;                 /* RAYACCEL_REGISTER_* */
  rayaccel_memory_region *region; /* out */
} rayaccel_register_args;

typedef struct rayaccel_transfer_args {
  size_t struct_size;
  rayaccel_connection *connection;
  rayaccel_transfer_op op;
  rayaccel_memory_region *local; /* registered on the connection's endpoint */
  uint64_t local_offset;
  /* The peer's pack_descriptor output, as the host received it; valid for the call. Anyone
   * can forge one (its checksum is no secret): it names a region, and the region's owner, not
   * this copy, decides what the transfer may touch (since 1.3). Malformed -> INVALID_ARGUMENT,
   * a region of another peer -> INVALID_ARGUMENT (here or from the owner), a region the peer
   * has deregistered -> STALE, a range outside a region the owner holds -> INVALID_ARGUMENT
   * (either may come back through the request). */
  rayaccel_blob remote_descriptor;
  uint64_t remote_offset;
  uint64_t length; /* > 0; both ranges lie inside their regions (host-checked) */
  /* out: poll it until it completes; NULL when the transfer completed within the call (OK:
   * a READ's bytes are here, a WRITE's local buffer may be reused) */
  rayaccel_request *request;
  /* out, since 1.4: how the bytes move (RAYACCEL_PATH_*), set when transfer returns OK. The
   * host sets RAYACCEL_PATH_UNREPORTED first; a plugin writes it only when
   * RAYACCEL_HAS_FIELD(args, rayaccel_transfer_args, path). */
  rayaccel_transfer_path path;
} rayaccel_transfer_args;

/* The most entries one transfer_batch call carries. Since 1.5. */
#define RAYACCEL_TRANSPORT_MAX_BATCH ((uint32_t)4096)

/* One transfer of a batch: the fields of rayaccel_transfer_args that differ per transfer, with
 * the same rules (both ranges inside their regions, length > 0). Host-owned, valid for the
 * transfer_batch call. Frozen: it travels in an array, so a later version adds a new entry
 * type rather than a field. Since 1.5. */
typedef struct rayaccel_transfer_entry {
  rayaccel_memory_region *local; /* registered on the connection's endpoint */
  uint64_t local_offset;
  rayaccel_blob remote_descriptor; /* as in rayaccel_transfer_args: the owner decides */
  uint64_t remote_offset;
  uint64_t length;
} rayaccel_transfer_entry;

/* Many READs or WRITEs on one connection as one request (NIXL's transfer list). The plugin
 * keeps them in flight together; each entry succeeds or fails on its own. Since 1.5. */
typedef struct rayaccel_transfer_batch_args {
  size_t struct_size;
  rayaccel_connection *connection;
  rayaccel_transfer_op op;                /* every entry's */
  uint32_t count;                         /* 1..RAYACCEL_TRANSPORT_MAX_BATCH */
  const rayaccel_transfer_entry *entries; /* `count` entries; valid for the call */
  /* out: one status per entry, host-owned: OK, or why that entry failed (STALE,
   * INVALID_ARGUMENT, PEER_LOST, ...). The plugin writes them all before transfer_batch
   * returns OK with `request` NULL, or in the `poll` that ends the request, and never after
   * `abandon` or `close_endpoint`. The host keeps them valid until then. */
  rayaccel_status *statuses;
  /* out: poll it until it completes: OK when every entry succeeded, else the first failed
   * entry's status with its reason. NULL: every entry completed within the call. */
  rayaccel_request *request;
  /* out: how each entry's bytes move (RAYACCEL_PATH_*), `count` of them, host-owned; the host
   * sets RAYACCEL_PATH_UNREPORTED first and the plugin writes them before transfer_batch
   * returns OK. */
  rayaccel_transfer_path *paths;
} rayaccel_transfer_batch_args;

typedef struct rayaccel_notify_args {
  size_t struct_size;
  rayaccel_connection *connection;
  rayaccel_blob message;     /* 1..RAYACCEL_TRANSPORT_MAX_NOTIFICATION bytes, copied */
  rayaccel_request *request; /* out: completes when the message is sent; NULL: sent already */
} rayaccel_notify_args;

typedef struct rayaccel_transport_api {
  size_t struct_size;
  /* Opens an endpoint of `args->instance` and reports its address. Since 1.1. */
  rayaccel_status (*open_endpoint)(rayaccel_endpoint_args *args, rayaccel_error *error);
  /* Closes every connection of the endpoint, releases every region, abandons requests in
   * flight, and frees the endpoint. Since 1.1. */
  rayaccel_status (*close_endpoint)(rayaccel_transport_endpoint *endpoint, rayaccel_error *error);
  /* Registers memory for transfers, or allocates it (RAYACCEL_REGISTER_ALLOCATE).
   * UNSUPPORTED (with the reason) for a memory kind the fabric cannot reach. Since 1.1. */
  rayaccel_status (*register_memory)(rayaccel_register_args *args, rayaccel_error *error);
  /* Invalidates a region and frees its handle (and the memory, if the plugin allocated it).
   * Once it returns, a connected peer's transfer that names one of its descriptors fails with
   * STALE instead of touching the memory; the caller may then free the memory. Since 1.1. */
  rayaccel_status (*deregister_memory)(rayaccel_memory_region *region, rayaccel_error *error);
  /* Packs the region's descriptor (at most RAYACCEL_TRANSPORT_MAX_BLOB bytes). Since 1.1. */
  rayaccel_status (*pack_descriptor)(rayaccel_memory_region *region,
                                     const rayaccel_blob_sink *descriptor, rayaccel_error *error);
  /* Connects to the endpoint whose address is `peer_address`. INVALID_ARGUMENT for a
   * malformed address, PEER_LOST when the peer does not answer within peer_timeout_ms. Since
   * 1.1. */
  rayaccel_status (*connect)(rayaccel_transport_endpoint *endpoint, rayaccel_blob peer_address,
                             rayaccel_connection **connection, rayaccel_error *error);
  /* Starts a READ or WRITE and returns its request. The owner of the remote region checks the
   * range against the regions it holds before a byte moves (since 1.3); the request fails
   * STALE or INVALID_ARGUMENT when it refuses. Since 1.1. */
  rayaccel_status (*transfer)(rayaccel_transfer_args *args, rayaccel_error *error);
  /* Sends a notification, delivered to the peer's get_notifications after every transfer
   * issued before it on this connection has landed. Since 1.1. */
  rayaccel_status (*notify)(rayaccel_notify_args *args, rayaccel_error *error);
  /* Starts completing every transfer issued on the connection so far; the request completes
   * when they have landed at the peer (NULL: they have already). Since 1.1. */
  rayaccel_status (*flush)(rayaccel_connection *connection, rayaccel_request **request,
                           rayaccel_error *error);
  /* Never blocks. TIMEOUT while the request is in flight. OK when it completed; any other
   * status when it failed (PEER_LOST, STALE, ...). Either way the request is released and its
   * handle invalid once a status other than TIMEOUT is returned. Since 1.1. */
  rayaccel_status (*poll)(rayaccel_request *request, rayaccel_error *error);
  /* Gives up on a request in flight: the plugin releases it whenever it ends, and the host
   * never sees it again. The memory involved stays in use until the connection or endpoint is
   * closed. Since 1.1. */
  rayaccel_status (*abandon)(rayaccel_request *request, rayaccel_error *error);
  /* Makes progress on the endpoint and blocks up to timeout_ms until something may have
   * happened (a request ended, a notification arrived). OK or TIMEOUT; the host polls after
   * either. Since 1.1. */
  rayaccel_status (*wait)(rayaccel_transport_endpoint *endpoint, uint32_t timeout_ms,
                          rayaccel_error *error);
  /* Hands every notification received since the last call to `sink`, oldest first. Since
   * 1.1. */
  rayaccel_status (*get_notifications)(rayaccel_transport_endpoint *endpoint,
                                       const rayaccel_blob_sink *sink, rayaccel_error *error);
  /* Closes a connection: requests in flight on it fail with PEER_LOST when polled. Since
   * 1.1. */
  rayaccel_status (*close)(rayaccel_connection *connection, rayaccel_error *error);
  /* Starts every entry of a batch and returns one request for them all. A non-OK return
   * means no entry was started (a malformed batch, a failed connection); an entry the owner
   * refuses fails alone, in `statuses`. Entries land in no promised order among themselves;
   * a later flush or notify still waits for all of them. Optional: where it is NULL (or the
   * negotiated minor is below 5) the host issues the entries one `transfer` at a time.
   * Since 1.5. */
  rayaccel_status (*transfer_batch)(rayaccel_transfer_batch_args *args, rayaccel_error *error);
} rayaccel_transport_api;

/* ---------------------------------------------------------------------------------------- */
/* The plugin table                                                                          */
/* ---------------------------------------------------------------------------------------- */

/* Capability bits (plugin -> host). Pinned values. A capability whose hooks are NULL is a
 * malformed plugin and is refused. */
#define RAYACCEL_CAP_TOPOLOGY ((uint64_t)1 << 0)      /* get_topology is meaningful */
#define RAYACCEL_CAP_HEALTH_EVENTS ((uint64_t)1 << 1) /* wait_health_events blocks for changes */
#define RAYACCEL_CAP_ALLOCATION ((uint64_t)1 << 2)    /* validate_quantity, prepare_allocation */
#define RAYACCEL_CAP_TRANSPORT ((uint64_t)1 << 3)     /* `transport` is set (since 1.1) */
#define RAYACCEL_CAP_THREAD_SAFE ((uint64_t)1 << 4)   /* query hooks may run concurrently */
#define RAYACCEL_CAP_TELEMETRY ((uint64_t)1 << 5)     /* get_telemetry samples (since 1.6) */

/* Static, const, and valid until the library is unloaded. Hooks marked "required" are never
 * NULL. Unless RAYACCEL_CAP_THREAD_SAFE is set, the host calls the hooks of one instance from
 * one thread at a time; different instances never share state the host can see. */
typedef struct rayaccel_plugin_api {
  size_t struct_size;
  uint32_t abi_major; /* RAYACCEL_ABI_VERSION_MAJOR the plugin was built with */
  uint32_t abi_minor;
  rayaccel_string name; /* short lower-case name, [a-z0-9_-]{1,32}: "cuda", "rocm", "sim" */
  uint64_t capabilities;

  /* Lifecycle, required. `initialize` must succeed without the vendor stack present: a
   * plugin that finds no driver reports zero devices from `discover`, with the reason in
   * a log line, instead of failing. Failing `initialize` means the configuration is
   * unusable. `shutdown` releases everything the instance holds; the instance pointer is
   * invalid afterwards. Since 1.0. */
  rayaccel_status (*initialize)(rayaccel_initialize_args *args, rayaccel_error *error);
  rayaccel_status (*shutdown)(rayaccel_plugin_instance *instance, rayaccel_error *error);

  /* Identity, required: fills `properties` (struct_size set by the host). Since 1.0. */
  rayaccel_status (*get_properties)(rayaccel_plugin_instance *instance,
                                    rayaccel_plugin_properties *properties, rayaccel_error *error);

  /* Discovery, required: add_device for every device, then add_attribute for any typed
   * attributes. Each call is a full rescan; the host replaces what it had. Since 1.0. */
  rayaccel_status (*discover)(rayaccel_plugin_instance *instance, const rayaccel_sink *sink,
                              rayaccel_error *error);

  /* Node labels (add_label). Optional. Since 1.0. */
  rayaccel_status (*get_labels)(rayaccel_plugin_instance *instance, const rayaccel_sink *sink,
                                rayaccel_error *error);

  /* Topology (add_link, add_domain) among the devices of the last `discover`. Optional;
   * RAYACCEL_CAP_TOPOLOGY. Since 1.0.
   * Call order: a host calls discover before get_labels, get_topology, get_health,
   * validate_quantity and prepare_allocation in a scan, but a plugin must not rely on it: any
   * query hook may come first after initialize (the conformance suite does this), and then
   * answers from the plugin's own enumeration (the indices discover would report) or fails
   * with a status and a message. Never crash for want of a discover. */
  rayaccel_status (*get_topology)(rayaccel_plugin_instance *instance, const rayaccel_sink *sink,
                                  rayaccel_error *error);

  /* Current health of every device (set_health). Optional: without it the health field of
   * rayaccel_device_info is the answer. Since 1.0. */
  rayaccel_status (*get_health)(rayaccel_plugin_instance *instance, const rayaccel_sink *sink,
                                rayaccel_error *error);

  /* Blocks up to args->timeout_ms for health changes and reports them (set_health). Returns
   * OK after reporting at least one change, TIMEOUT when none came. OK without a report means
   * "something changed that only a rescan reads" (a GPU lost): the host rescans, and backs
   * off when the rescan shows nothing new. The host calls it from a dedicated thread,
   * concurrently with the other hooks: it must be thread-safe with them. Optional;
   * RAYACCEL_CAP_HEALTH_EVENTS. Since 1.0. */
  rayaccel_status (*wait_health_events)(rayaccel_plugin_instance *instance,
                                        rayaccel_health_wait_args *args, rayaccel_error *error);

  /* Whether `quantity` devices may be requested at once (TPU: 1, 2, 4 or 8). Returns OK or
   * INVALID_ARGUMENT with the reason. Optional (any whole quantity is then fine);
   * RAYACCEL_CAP_ALLOCATION. Since 1.0. */
  rayaccel_status (*validate_quantity)(rayaccel_plugin_instance *instance, uint32_t quantity,
                                       rayaccel_error *error);

  /* The environment a worker needs to use exactly these devices (set_env), e.g.
   * CUDA_VISIBLE_DEVICES=0,3. Optional: the host then sets visible_devices_env to the
   * comma-separated indices. RAYACCEL_CAP_ALLOCATION. Since 1.0. */
  rayaccel_status (*prepare_allocation)(rayaccel_plugin_instance *instance,
                                        rayaccel_allocation_args *args, rayaccel_error *error);

  /* Direct device-to-device transport; NULL unless RAYACCEL_CAP_TRANSPORT. Used by a host
   * only when the negotiated minor version is at least 1 (the 1.0 table was experimental).
   * Since 1.1. */
  const rayaccel_transport_api *transport;

  /* What each device is doing now (add_sample, and explain_unknown for fields the driver
   * cannot read): for the devices of the last discover, any subset. Fast and bounded: a host
   * samples every few seconds, and times the call out as any other (a driver read that hangs
   * must not hang it). Called concurrently with the other hooks only under
   * RAYACCEL_CAP_THREAD_SAFE. Optional; RAYACCEL_CAP_TELEMETRY, used by a host only when the
   * negotiated minor is at least 6. Since 1.6. */
  rayaccel_status (*get_telemetry)(rayaccel_plugin_instance *instance, const rayaccel_sink *sink,
                                   rayaccel_error *error);
} rayaccel_plugin_api;

/* ---------------------------------------------------------------------------------------- */
/* Entry point and negotiation                                                               */
/* ---------------------------------------------------------------------------------------- */

/* Filled in by both sides, Vulkan-style: the host states the highest version it speaks, the
 * plugin answers with the version it chose (same major, minor = min(host, plugin)) and its
 * table. A plugin whose major differs from host_abi_major returns INCOMPATIBLE. */
typedef struct rayaccel_negotiation {
  size_t struct_size;
  uint32_t host_abi_major;        /* in */
  uint32_t host_abi_minor;        /* in */
  uint32_t chosen_abi_major;      /* out */
  uint32_t chosen_abi_minor;      /* out */
  const rayaccel_plugin_api *api; /* out: static, valid until the library is unloaded */
} rayaccel_negotiation;

typedef rayaccel_status (*rayaccel_plugin_entry_fn)(rayaccel_negotiation *negotiation,
                                                    rayaccel_error *error);

/* The minor version to choose: min(host, plugin). A function rather than an expression, so that
 * a plugin whose own minor is 0 compiles cleanly under -Wall -Wextra -Werror (no "comparison
 * of unsigned expression < 0 is always false"). Since 1.2. */
static inline uint32_t rayaccel_choose_minor(uint32_t host_minor, uint32_t plugin_minor) {
  return host_minor < plugin_minor ? host_minor : plugin_minor;
}

/* Declared here so that a plugin's definition is checked against it. Thread-safe; may be
 * called more than once. Since 1.0. */
RAYACCEL_PLUGIN_EXPORT rayaccel_status rayaccel_plugin_entry(rayaccel_negotiation *negotiation,
                                                             rayaccel_error *error);

#ifdef __cplusplus
} /* extern "C" */

/* Sizes are part of the ABI: a change here is a break. Checked on LP64 (x86_64, aarch64). */
#if defined(__LP64__)
static_assert(sizeof(rayaccel_string) == 16, "rayaccel_string layout changed");
static_assert(RAYACCEL_STRUCT_SIZE(rayaccel_device_info, health_reason) ==
                  sizeof(rayaccel_device_info),
              "rayaccel_device_info: append fields only, and update this check");
static_assert(RAYACCEL_STRUCT_SIZE(rayaccel_plugin_api, get_telemetry) ==
                  sizeof(rayaccel_plugin_api),
              "rayaccel_plugin_api: append fields only, and update this check");
static_assert(RAYACCEL_STRUCT_SIZE(rayaccel_sink, explain_unknown) == sizeof(rayaccel_sink),
              "rayaccel_sink: append fields only, and update this check");
static_assert(RAYACCEL_STRUCT_SIZE(rayaccel_link, type_name) == sizeof(rayaccel_link),
              "rayaccel_link: append fields only, and update this check");
/* Fields added in a minor version stay where that version put them (1.1's sizes on LP64). */
static_assert(offsetof(rayaccel_link, type_name) == 56, "rayaccel_link: 1.2 field moved");
static_assert(offsetof(rayaccel_sink, last_refusal) == 72, "rayaccel_sink: 1.2 field moved");
static_assert(offsetof(rayaccel_sink, explain_no_devices) == 80, "rayaccel_sink: 1.6 field moved");
static_assert(sizeof(rayaccel_device_sample) == 80, "rayaccel_device_sample layout changed");
static_assert(offsetof(rayaccel_plugin_api, get_telemetry) == 128,
              "rayaccel_plugin_api: 1.6 field moved");
static_assert(RAYACCEL_STRUCT_SIZE(rayaccel_transport_api, transfer_batch) ==
                  sizeof(rayaccel_transport_api),
              "rayaccel_transport_api: append fields only, and update this check");
static_assert(offsetof(rayaccel_transport_api, transfer_batch) == 120,
              "rayaccel_transport_api: 1.5 field moved");
static_assert(sizeof(rayaccel_transfer_entry) == 48, "rayaccel_transfer_entry is frozen");
static_assert(sizeof(rayaccel_transfer_batch_args) == 56,
              "rayaccel_transfer_batch_args: append fields only, and update this check");
static_assert(RAYACCEL_STRUCT_SIZE(rayaccel_endpoint_args, key) == sizeof(rayaccel_endpoint_args),
              "rayaccel_endpoint_args: append fields only, and update this check");
static_assert(offsetof(rayaccel_endpoint_args, key) == 40,
              "rayaccel_endpoint_args: 1.3 field moved");
static_assert(offsetof(rayaccel_transfer_args, path) == 80,
              "rayaccel_transfer_args: 1.4 field moved");
static_assert(sizeof(rayaccel_transfer_args) == 88,
              "rayaccel_transfer_args: append fields only, and update this check");
#endif
#endif /* __cplusplus */

#endif /* RAYACCEL_PLUGIN_H_ */
