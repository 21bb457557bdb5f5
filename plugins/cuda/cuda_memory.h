// CUDA device memory for the transport, through the driver API (libcuda.so.1, loaded with
// dlopen on first use, as NVML is: the plugin builds without the CUDA toolkit and loads on a
// host without a driver). The UCX helper stages device memory through host memory with it
// where the loaded UCX cannot reach CUDA memory itself (docs/transport.md, "Device memory").
#ifndef RAYACCEL_PLUGINS_CUDA_CUDA_MEMORY_H_
#define RAYACCEL_PLUGINS_CUDA_CUDA_MEMORY_H_

#include <functional>
#include <memory>
#include <string>

#include "common/gpu_memory.h"

namespace rayaccel::cuda {

// Device memory of the plugin's GPUs through the CUDA driver at `library`; `ipc` and `list`
// as GpuMemory takes them.
std::unique_ptr<plugin::GpuMemory> MakeCudaMemory(std::string library, bool ipc,
                                                  std::function<plugin::GpuMemory::BusIds()> list);

}  // namespace rayaccel::cuda

#endif  // RAYACCEL_PLUGINS_CUDA_CUDA_MEMORY_H_
