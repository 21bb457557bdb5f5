// The slice of NVML's C API the CUDA plugin uses, declared from NVIDIA's public
// documentation (names, return codes, enum values, struct layouts), so that the plugin builds
// without the CUDA toolkit and loads libnvidia-ml.so.1 at run time with dlopen.
#ifndef RAYACCEL_PLUGINS_CUDA_NVML_H_
#define RAYACCEL_PLUGINS_CUDA_NVML_H_

#ifdef __cplusplus
extern "C" {
#endif

typedef int nvmlReturn_t;
enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_UNKNOWN = 999
};

typedef struct nvmlDevice_st* nvmlDevice_t;

typedef struct nvmlPciInfo_st {
  char busIdLegacy[16];  // "0000:18:00.0"
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;  // (device id << 16) | vendor id
  unsigned int pciSubSystemId;
  char busId[32];  // "00000000:18:00.0"
} nvmlPciInfo_t;

typedef struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

// nvmlDeviceGetTopologyCommonAncestor levels.
enum {
  NVML_TOPOLOGY_INTERNAL = 0,
  NVML_TOPOLOGY_SINGLE = 10,      // PIX
  NVML_TOPOLOGY_MULTIPLE = 20,    // PXB
  NVML_TOPOLOGY_HOSTBRIDGE = 30,  // PHB
  NVML_TOPOLOGY_NODE = 40,        // NODE
  NVML_TOPOLOGY_SYSTEM = 50       // SYS
};
typedef int nvmlGpuTopologyLevel_t;

#define NVML_NVLINK_MAX_LINKS 18
typedef int nvmlEnableState_t;  // 1 = enabled (link active)
enum {
  NVML_NVLINK_DEVICE_TYPE_GPU = 0,
  NVML_NVLINK_DEVICE_TYPE_IBMNPU = 1,
  NVML_NVLINK_DEVICE_TYPE_SWITCH = 2,
  NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF
};
typedef int nvmlIntNvLinkDeviceType_t;

enum { NVML_P2P_CAPS_INDEX_NVLINK = 2 };
typedef int nvmlGpuP2PCapsIndex_t;
enum { NVML_P2P_STATUS_OK = 0 };
typedef int nvmlGpuP2PStatus_t;

// nvmlDeviceGetMemoryAffinity scopes: the NUMA nodes nearest the GPU within its node or socket.
typedef unsigned int nvmlAffinityScope_t;
#define NVML_AFFINITY_SCOPE_NODE 0u
#define NVML_AFFINITY_SCOPE_SOCKET 1u

// nvmlDeviceGetArchitecture values.
typedef unsigned int nvmlDeviceArchitecture_t;

// GPU fabric info (NVL72-class systems). State: NOT_SUPPORTED 0, NOT_STARTED 1, IN_PROGRESS 2,
// COMPLETED 3.
#define NVML_GPU_FABRIC_UUID_LEN 16
#define NVML_GPU_FABRIC_STATE_COMPLETED 3
typedef struct {
  unsigned int version;
  unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
  nvmlReturn_t status;
  unsigned int cliqueId;
  unsigned char state;
  unsigned int healthMask;
} nvmlGpuFabricInfoV_t;
#define nvmlGpuFabricInfo_v2 (unsigned int)(sizeof(nvmlGpuFabricInfoV_t) | (2 << 24U))

// Events (nvmlEventSetWait_v2).
typedef struct nvmlEventSet_st* nvmlEventSet_t;
#define nvmlEventTypeSingleBitEccError 0x0000000000000001LL
#define nvmlEventTypeDoubleBitEccError 0x0000000000000002LL
#define nvmlEventTypeXidCriticalError 0x0000000000000008LL
typedef struct nvmlEventData_st {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;  // the XID for XidCriticalError
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlEventData_t;

// XID 154: the driver changed the GPU's recovery action (read it with the field below).
#define RAYACCEL_NVML_XID_RECOVERY_ACTION_CHANGED 154

// Telemetry (get_telemetry): nvmlDeviceGetUtilizationRates, GetPowerUsage (milliwatts),
// GetTemperature, GetTotalEccErrors, GetRetiredPages and, since Ampere, GetRemappedRows.
typedef struct nvmlUtilization_st {
  unsigned int gpu;     // percent of the last sample period a kernel ran
  unsigned int memory;  // percent of it device memory was read or written
} nvmlUtilization_t;
enum { NVML_TEMPERATURE_GPU = 0 };  // nvmlTemperatureSensors_t
enum { NVML_MEMORY_ERROR_TYPE_CORRECTED = 0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1 };
enum { NVML_VOLATILE_ECC = 0, NVML_AGGREGATE_ECC = 1 };  // nvmlEccCounterType_t
enum {                                                   // nvmlPageRetirementCause_t
  NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0,
  NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
};

// nvmlDeviceGetFieldValues. Each value carries its own return code; the call itself succeeds.
#define NVML_FI_DEV_GET_GPU_RECOVERY_ACTION 230  // r570 and later drivers
// NVLink error counters, all links together.
#define NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL 38
#define NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL 45
#define NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL 52
#define NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL 59
enum {
  NVML_VALUE_TYPE_DOUBLE = 0,
  NVML_VALUE_TYPE_UNSIGNED_INT = 1,
  NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
  NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
  NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4,
  NVML_VALUE_TYPE_SIGNED_INT = 5
};
typedef union nvmlValue_st {
  double dVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
  signed int siVal;
  unsigned short usVal;
} nvmlValue_t;
typedef struct nvmlFieldValue_st {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;
  long long latencyUsec;
  int valueType;
  nvmlReturn_t nvmlReturn;
  nvmlValue_t value;
} nvmlFieldValue_t;

// nvmlDeviceGpuRecoveryAction_t: what the driver says a GPU needs before it is usable again.
enum {
  NVML_GPU_RECOVERY_ACTION_NONE = 0,
  NVML_GPU_RECOVERY_ACTION_GPU_RESET = 1,
  NVML_GPU_RECOVERY_ACTION_NODE_REBOOT = 2,
  NVML_GPU_RECOVERY_ACTION_DRAIN_P2P = 3,
  NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET = 4
};

#ifdef __cplusplus
}
#endif

#endif  // RAYACCEL_PLUGINS_CUDA_NVML_H_
