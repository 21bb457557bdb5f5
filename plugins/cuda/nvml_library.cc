#include "cuda/nvml_library.h"

#include <dlfcn.h>

#include <cstdio>
#include <string>

#include "common/plugin_util.h"

namespace rayaccel::cuda {

using plugin::Resolve;

bool Open(const std::string& path, Nvml* n, std::string* why) {
  n->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (n->handle == nullptr) {
    const char* e = dlerror();
    *why = "cannot load " + path + ": " + (e != nullptr ? e : "unknown error");
    return false;
  }
  void* h = n->handle;
  Resolve(h, "nvmlInit_v2", &n->Init);
  Resolve(h, "nvmlShutdown", &n->Shutdown);
  Resolve(h, "nvmlErrorString", &n->ErrorString);
  Resolve(h, "nvmlDeviceGetCount_v2", &n->GetCount);
  Resolve(h, "nvmlDeviceGetHandleByIndex_v2", &n->GetHandle);
  Resolve(h, "nvmlDeviceGetName", &n->GetName);
  Resolve(h, "nvmlDeviceGetUUID", &n->GetUuid);
  Resolve(h, "nvmlDeviceGetPciInfo_v3", &n->GetPci);
  Resolve(h, "nvmlDeviceGetMemoryInfo", &n->GetMemory);
  Resolve(h, "nvmlDeviceGetCudaComputeCapability", &n->GetCc);
  Resolve(h, "nvmlDeviceGetArchitecture", &n->GetArch);
  Resolve(h, "nvmlDeviceGetNumaNodeId", &n->GetNuma);
  Resolve(h, "nvmlDeviceGetMemoryAffinity", &n->MemoryAffinity);
  Resolve(h, "nvmlDeviceGetMinorNumber", &n->GetMinor);
  Resolve(h, "nvmlSystemGetDriverVersion", &n->DriverVersion);
  Resolve(h, "nvmlSystemGetCudaDriverVersion_v2", &n->CudaVersion);
  Resolve(h, "nvmlDeviceGetTopologyCommonAncestor", &n->Ancestor);
  Resolve(h, "nvmlDeviceGetNvLinkState", &n->LinkState);
  Resolve(h, "nvmlDeviceGetNvLinkRemoteDeviceType", &n->RemoteType);
  Resolve(h, "nvmlDeviceGetNvLinkRemotePciInfo_v2", &n->RemotePci);
  Resolve(h, "nvmlDeviceGetP2PStatus", &n->P2p);
  Resolve(h, "nvmlDeviceGetGpuFabricInfoV", &n->Fabric);
  Resolve(h, "nvmlDeviceGetMigMode", &n->MigMode);
  Resolve(h, "nvmlDeviceGetMaxMigDeviceCount", &n->MaxMig);
  Resolve(h, "nvmlDeviceGetMigDeviceHandleByIndex", &n->MigHandle);
  Resolve(h, "nvmlEventSetCreate", &n->EventSetCreate);
  Resolve(h, "nvmlDeviceRegisterEvents", &n->RegisterEvents);
  Resolve(h, "nvmlEventSetWait_v2", &n->EventWait);
  Resolve(h, "nvmlEventSetFree", &n->EventSetFree);
  Resolve(h, "nvmlDeviceGetSupportedEventTypes", &n->SupportedEvents);
  Resolve(h, "nvmlDeviceGetFieldValues", &n->FieldValues);
  Resolve(h, "nvmlDeviceGetUtilizationRates", &n->Utilization);
  Resolve(h, "nvmlDeviceGetPowerUsage", &n->Power);
  Resolve(h, "nvmlDeviceGetTemperature", &n->Temperature);
  Resolve(h, "nvmlDeviceGetTotalEccErrors", &n->EccErrors);
  Resolve(h, "nvmlDeviceGetRetiredPages", &n->RetiredPages);
  Resolve(h, "nvmlDeviceGetRemappedRows", &n->RemappedRows);
  if (n->Init == nullptr || n->Shutdown == nullptr || n->GetCount == nullptr ||
      n->GetHandle == nullptr || n->GetName == nullptr || n->GetUuid == nullptr ||
      n->GetPci == nullptr) {
    *why = path + " lacks required NVML entry points (nvmlInit_v2, nvmlDeviceGetCount_v2, ...)";
    return false;
  }
  nvmlReturn_t rc = n->Init();
  if (rc != NVML_SUCCESS) {
    *why = "nvmlInit_v2 failed: " +
           std::string(n->ErrorString != nullptr ? n->ErrorString(rc) : "error") + " (" +
           std::to_string(rc) + ")";
    return false;
  }
  return true;
}

const char* ArchitectureName(unsigned arch) {
  switch (arch) {
    case 2:
      return "kepler";
    case 3:
      return "maxwell";
    case 4:
      return "pascal";
    case 5:
      return "volta";
    case 6:
      return "turing";
    case 7:
      return "ampere";
    case 8:
      return "ada";
    case 9:
      return "hopper";
    case 10:
      return "blackwell";
    default:
      return "";
  }
}

int32_t NearestNumaNode(const Nvml& n, nvmlDevice_t device) {
  if (n.MemoryAffinity == nullptr) return -1;
  constexpr unsigned kWords = 16;    // 1024 nodes
  unsigned long nodes[kWords] = {};  // NOLINT(runtime/int): NVML's type
  if (n.MemoryAffinity(device, kWords, nodes, NVML_AFFINITY_SCOPE_NODE) != NVML_SUCCESS) return -1;
  constexpr unsigned kBits = 8 * sizeof(nodes[0]);
  int32_t found = -1;
  for (unsigned w = 0; w < kWords; ++w) {
    for (unsigned b = 0; b < kBits; ++b) {
      if ((nodes[w] >> b & 1u) == 0) continue;
      if (found >= 0) return -1;
      found = static_cast<int32_t>(w * kBits + b);
    }
  }
  return found;
}

rayaccel_pcie_path PathOf(nvmlGpuTopologyLevel_t level) {
  switch (level) {
    case NVML_TOPOLOGY_INTERNAL:
    case NVML_TOPOLOGY_SINGLE:
      return RAYACCEL_PCIE_PATH_PIX;
    case NVML_TOPOLOGY_MULTIPLE:
      return RAYACCEL_PCIE_PATH_PXB;
    case NVML_TOPOLOGY_HOSTBRIDGE:
      return RAYACCEL_PCIE_PATH_PHB;
    case NVML_TOPOLOGY_NODE:
      return RAYACCEL_PCIE_PATH_NODE;
    case NVML_TOPOLOGY_SYSTEM:
      return RAYACCEL_PCIE_PATH_SYS;
    default:
      return RAYACCEL_PCIE_PATH_UNKNOWN;
  }
}

std::string Uuid(const unsigned char* b) {
  char s[40];
  std::snprintf(s, sizeof(s),
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                b[15]);
  return s;
}

int RecoveryAction(const Nvml& n, nvmlDevice_t handle) {
  if (n.FieldValues == nullptr || handle == nullptr) return -1;
  nvmlFieldValue_t value{};
  value.fieldId = NVML_FI_DEV_GET_GPU_RECOVERY_ACTION;
  if (n.FieldValues(handle, 1, &value) != NVML_SUCCESS || value.nvmlReturn != NVML_SUCCESS ||
      value.valueType != NVML_VALUE_TYPE_UNSIGNED_INT) {
    return -1;
  }
  return static_cast<int>(value.value.uiVal);
}

std::string RecoveryActionText(int action) {
  switch (action) {
    case NVML_GPU_RECOVERY_ACTION_GPU_RESET:
      return "the driver asks for a GPU reset";
    case NVML_GPU_RECOVERY_ACTION_NODE_REBOOT:
      return "the driver asks for a node reboot";
    case NVML_GPU_RECOVERY_ACTION_DRAIN_P2P:
      return "the driver asks to drain peer-to-peer traffic";
    case NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET:
      return "the driver asks to drain work and reset the GPU";
    default:
      return "the driver asks for recovery action " + std::to_string(action);
  }
}

}  // namespace rayaccel::cuda
