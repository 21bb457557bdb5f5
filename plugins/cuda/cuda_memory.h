// CUDA device memory for the transport, through the driver API (libcuda.so.1, loaded with
// dlopen on first use, as NVML is: the plugin builds without the CUDA toolkit and loads on a
// host without a driver). The UCX helper stages device memory through host memory with it
// where the loaded UCX cannot reach CUDA memory itself (docs/transport.md, "Device memory").
#ifndef RAYACCEL_PLUGINS_CUDA_CUDA_MEMORY_H_
#define RAYACCEL_PLUGINS_CUDA_CUDA_MEMORY_H_

#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "common/ucx_transport.h"

namespace rayaccel::cuda {

class CudaMemory : public plugin::ucx::DeviceMemoryOps {
 public:
  // The plugin's devices by its index: each GPU's PCI bus id, which names the same GPU to CUDA
  // whatever CUDA_VISIBLE_DEVICES renumbers. A device left out (a MIG instance, a GPU NVML
  // lost) has no memory copied here.
  using BusIds = std::map<uint32_t, std::string>;
  // `list` scans the plugin's GPUs, for a device no discover has listed yet (a transport is
  // used without one). Never called with this object's lock held.
  CudaMemory(std::string library, std::function<BusIds()> list)
      : library_(std::move(library)), list_(std::move(list)) {}
  ~CudaMemory() override;
  CudaMemory(const CudaMemory&) = delete;
  CudaMemory& operator=(const CudaMemory&) = delete;

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

  struct Driver;  // the entry points, resolved with dlsym

 private:
  // The CUDA ordinal of plugin device `device`, its primary context current on this thread
  // until Pop(); the driver loaded and initialized on first use. Else the status and why.
  rayaccel_status Push(uint32_t device, int* ordinal, std::string* why);
  void Pop();

  // The bus id of `device`, from the last listing or a new one; "" when it has none.
  std::string BusIdOf(uint32_t device);

  const std::string library_;
  const std::function<BusIds()> list_;
  std::mutex mu_;  // guards everything below
  BusIds bus_ids_;
  Driver* driver_ = nullptr;             // null until loaded
  std::string unavailable_;              // why the driver cannot be used, once tried and failed
  std::map<std::string, int> ordinals_;  // lower-case PCI bus id -> CUDA ordinal
  std::map<int, void*> contexts_;        // retained primary contexts, by ordinal
};

}  // namespace rayaccel::cuda

#endif  // RAYACCEL_PLUGINS_CUDA_CUDA_MEMORY_H_
