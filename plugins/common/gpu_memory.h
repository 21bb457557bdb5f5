// Device memory through a GPU runtime (CUDA's driver API, HIP), for the UCX helper's staging
// (ucx::DeviceMemoryOps). What every runtime shares is here: the plugin's devices found among
// the runtime's by PCI bus id (so a visible-devices variable that renumbers the runtime's
// devices changes nothing), the runtime loaded on first use, and the checks of what a caller
// hands in. Each runtime's own calls are behind GpuRuntime.
#ifndef RAYACCEL_PLUGINS_COMMON_GPU_MEMORY_H_
#define RAYACCEL_PLUGINS_COMMON_GPU_MEMORY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/ucx_transport.h"

namespace rayaccel::plugin {

// One vendor runtime. Calls after Load() come only between Enter() and Leave() on one thread,
// except Devices(), called once after Load().
class GpuRuntime {
 public:
  virtual ~GpuRuntime() = default;
  virtual const char* name() const = 0;              // "CUDA", "HIP": in every message
  virtual const char* visible_variable() const = 0;  // "CUDA_VISIBLE_DEVICES"
  // Loads and initializes the runtime; false, with why, where it cannot.
  virtual bool Load(std::string* why) = 0;
  // The devices the runtime shows this process: lower-case PCI bus id -> its ordinal.
  virtual std::map<std::string, int> Devices() = 0;
  // Makes device `ordinal` current on this thread until Leave(), which restores what was.
  virtual bool Enter(int ordinal, std::string* why) = 0;
  virtual void Leave() = 0;
  // The allocation holding `p`. INVALID_ARGUMENT, with the runtime's reason, for anything
  // that is not the runtime's device memory (a host, freed or foreign pointer).
  struct Allocation {
    int ordinal = -1;
    uintptr_t start = 0;
    uint64_t size = 0;
  };
  virtual rayaccel_status Find(const void* p, Allocation* out, std::string* why) = 0;
  // RESOURCE_EXHAUSTED when the device's memory is full.
  virtual rayaccel_status Allocate(uint64_t n, void** p, std::string* why) = 0;
  virtual void Free(void* p) = 0;
  virtual rayaccel_status ToHost(void* host, const void* device, uint64_t n, std::string* why) = 0;
  virtual rayaccel_status FromHost(void* device, const void* host, uint64_t n,
                                   std::string* why) = 0;
  // IPC, optional (by default the runtime has none: UNSUPPORTED). The runtime's handle of the
  // allocation that starts at `start`.
  virtual rayaccel_status IpcExport(const void* start, std::string* handle, std::string* why);
  // Maps another process's handle into the current device; IpcClose unmaps it.
  virtual rayaccel_status IpcOpen(const std::string& handle, void** p, std::string* why);
  virtual void IpcClose(void* p);
  // Any direction (unified addressing), on a stream of the transport's own on the current
  // device; returns once complete.
  virtual rayaccel_status Copy(void* to, const void* from, uint64_t n, std::string* why);
  // Page-locked host memory, portable to every context; optional (UNSUPPORTED by default).
  virtual rayaccel_status HostAlloc(uint64_t n, void** p, std::string* why);
  virtual void HostFree(void* p);
};

// "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)": a runtime call's failure in the
// runtime's own words; `name` or `text` null where the runtime has none, `code` instead.
std::string RuntimeError(const char* call, const char* name, const char* text,
                         const std::string& code);

class GpuMemory : public ucx::DeviceMemoryOps {
 public:
  // The plugin's devices by its index: each GPU's PCI bus id. A device left out (a MIG
  // instance, a GPU the plugin lost) has no memory copied here.
  using BusIds = std::map<uint32_t, std::string>;
  // `list` scans the plugin's GPUs, for a device no discover has listed yet (a transport is
  // used without one); never called with this object's lock held.
  // `ipc`: whether device memory may move device to device between processes through the
  // runtime's IPC (the plugins' config key device_ipc); without it, it is staged.
  GpuMemory(std::unique_ptr<GpuRuntime> runtime, std::function<BusIds()> list, bool ipc = true);
  ~GpuMemory() override = default;
  GpuMemory(const GpuMemory&) = delete;
  GpuMemory& operator=(const GpuMemory&) = delete;

  // The devices as the plugin's last discover listed them.
  void SetDevices(BusIds bus_ids);

  rayaccel_status Check(const void* address, uint64_t length, uint32_t device,
                        std::string* why) override;
  rayaccel_status Allocate(uint32_t device, uint64_t length, void** address,
                           std::string* why) override;
  void Free(void* address, uint32_t device) override;
  rayaccel_status ToHost(void* host, const void* device_memory, uint64_t length, uint32_t device,
                         std::string* why) override;
  rayaccel_status FromHost(void* device_memory, const void* host, uint64_t length, uint32_t device,
                           std::string* why) override;
  rayaccel_status Export(const void* address, uint64_t length, uint32_t device, std::string* handle,
                         std::string* why) override;
  rayaccel_status Import(const std::string& handle, uint32_t device, uint64_t length, void** mapped,
                         std::string* why) override;
  void Unimport(void* mapped, uint32_t device) override;
  rayaccel_status Copy(void* to, const void* from, uint64_t length, uint32_t device,
                       std::string* why) override;
  rayaccel_status HostAlloc(uint32_t device, uint64_t length, void** host,
                            std::string* why) override;
  void HostFree(void* host, uint32_t device) override;

 private:
  // The runtime's ordinal of plugin device `device`, made current on this thread until
  // runtime_->Leave(); the runtime loaded on first use. Else the status and why.
  rayaccel_status Enter(uint32_t device, int* ordinal, std::string* why);
  // The bus id of `device`, from the last listing or a new one; "" when it has none.
  std::string BusIdOf(uint32_t device);

  const std::unique_ptr<GpuRuntime> runtime_;
  const std::function<BusIds()> list_;
  const bool ipc_;
  std::mutex mu_;  // guards everything below
  BusIds bus_ids_;
  bool loaded_ = false;
  std::string unavailable_;  // why the runtime cannot be used, once tried and failed
  std::map<std::string, int> ordinals_;
};

}  // namespace rayaccel::plugin

#endif  // RAYACCEL_PLUGINS_COMMON_GPU_MEMORY_H_
