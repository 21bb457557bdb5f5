// ROCm device memory for the transport, through the HIP runtime (libamdhip64, loaded with
// dlopen on first use: the plugin still needs no ROCm user-space library to build, load or
// discover). The UCX helper stages device memory through host memory with it where the
// loaded UCX cannot reach ROCm memory itself (docs/transport.md, "Device memory").
#ifndef RAYACCEL_PLUGINS_ROCM_HIP_MEMORY_H_
#define RAYACCEL_PLUGINS_ROCM_HIP_MEMORY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/gpu_memory.h"

namespace rayaccel::rocm {

// Device memory of the plugin's GPUs through the first of `libraries` that loads; `ipc` and
// `list` as GpuMemory takes them.
std::unique_ptr<plugin::GpuMemory> MakeHipMemory(std::vector<std::string> libraries, bool ipc,
                                                 std::function<plugin::GpuMemory::BusIds()> list);

}  // namespace rayaccel::rocm

#endif  // RAYACCEL_PLUGINS_ROCM_HIP_MEMORY_H_
