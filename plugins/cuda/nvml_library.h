// NVML, loaded at run time with dlopen, and what its answers mean for the CUDA plugin: the
// entry points it resolves, architecture names, the nearest NUMA node, PCIe paths, UUIDs and
// the driver's recovery actions.
#ifndef RAYACCEL_PLUGINS_CUDA_NVML_LIBRARY_H_
#define RAYACCEL_PLUGINS_CUDA_NVML_LIBRARY_H_

#include <cstdint>
#include <string>

#include "cuda/nvml.h"
#include "rayaccel/plugin.h"

namespace rayaccel::cuda {

// The NVML entry points, resolved with dlsym; optional ones may be NULL (older drivers).
struct Nvml {
  void* handle = nullptr;
  nvmlReturn_t (*Init)() = nullptr;
  nvmlReturn_t (*Shutdown)() = nullptr;
  const char* (*ErrorString)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*GetCount)(unsigned*) = nullptr;
  nvmlReturn_t (*GetHandle)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*GetName)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*GetUuid)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*GetPci)(nvmlDevice_t, nvmlPciInfo_t*) = nullptr;
  nvmlReturn_t (*GetMemory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*GetCc)(nvmlDevice_t, int*, int*) = nullptr;
  nvmlReturn_t (*GetArch)(nvmlDevice_t, nvmlDeviceArchitecture_t*) = nullptr;
  nvmlReturn_t (*GetNuma)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*MemoryAffinity)(nvmlDevice_t, unsigned, unsigned long*,  // NOLINT(runtime/int)
                                 nvmlAffinityScope_t) = nullptr;
  nvmlReturn_t (*GetMinor)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*DriverVersion)(char*, unsigned) = nullptr;
  nvmlReturn_t (*CudaVersion)(int*) = nullptr;
  nvmlReturn_t (*Ancestor)(nvmlDevice_t, nvmlDevice_t, nvmlGpuTopologyLevel_t*) = nullptr;
  nvmlReturn_t (*LinkState)(nvmlDevice_t, unsigned, nvmlEnableState_t*) = nullptr;
  nvmlReturn_t (*RemoteType)(nvmlDevice_t, unsigned, nvmlIntNvLinkDeviceType_t*) = nullptr;
  nvmlReturn_t (*RemotePci)(nvmlDevice_t, unsigned, nvmlPciInfo_t*) = nullptr;
  nvmlReturn_t (*P2p)(nvmlDevice_t, nvmlDevice_t, nvmlGpuP2PCapsIndex_t,
                      nvmlGpuP2PStatus_t*) = nullptr;
  nvmlReturn_t (*Fabric)(nvmlDevice_t, nvmlGpuFabricInfoV_t*) = nullptr;
  nvmlReturn_t (*MigMode)(nvmlDevice_t, unsigned*, unsigned*) = nullptr;
  nvmlReturn_t (*MaxMig)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*MigHandle)(nvmlDevice_t, unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*EventSetCreate)(nvmlEventSet_t*) = nullptr;
  nvmlReturn_t (*RegisterEvents)(nvmlDevice_t, unsigned long long, nvmlEventSet_t) = nullptr;
  nvmlReturn_t (*EventWait)(nvmlEventSet_t, nvmlEventData_t*, unsigned) = nullptr;
  nvmlReturn_t (*EventSetFree)(nvmlEventSet_t) = nullptr;
  nvmlReturn_t (*SupportedEvents)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*FieldValues)(nvmlDevice_t, int, nvmlFieldValue_t*) = nullptr;
  nvmlReturn_t (*Utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*Power)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*Temperature)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*EccErrors)(nvmlDevice_t, int, int, unsigned long long*) = nullptr;
  nvmlReturn_t (*RetiredPages)(nvmlDevice_t, int, unsigned*, unsigned long long*) = nullptr;
  nvmlReturn_t (*RemappedRows)(nvmlDevice_t, unsigned*, unsigned*, unsigned*, unsigned*) = nullptr;
};

// Loads and initialises NVML; on failure says why ("0 devices: ..." material).
bool Open(const std::string& path, Nvml* n, std::string* why);

const char* ArchitectureName(unsigned arch);

// The NUMA node nearest the GPU, what `nvidia-smi topo -m` prints as "NUMA Affinity": the one
// node of nvmlDeviceGetMemoryAffinity within the GPU's node. Not nvmlDeviceGetNumaNodeId,
// which names the GPU's own memory where that is a NUMA node (Grace Hopper, Grace Blackwell)
// and holds no CPUs. -1 when NVML cannot say or names several: the host then asks hwloc.
int32_t NearestNumaNode(const Nvml& n, nvmlDevice_t device);

rayaccel_pcie_path PathOf(nvmlGpuTopologyLevel_t level);

std::string Uuid(const unsigned char* b);

// NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, or -1 where the driver (before r570) cannot say.
int RecoveryAction(const Nvml& n, nvmlDevice_t handle);

std::string RecoveryActionText(int action);

}  // namespace rayaccel::cuda

#endif  // RAYACCEL_PLUGINS_CUDA_NVML_LIBRARY_H_
