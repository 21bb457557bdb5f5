// What NVML says a GPU is doing now, as get_telemetry's sample: utilization, memory, power,
// temperature, volatile ECC counts, retired pages (or, since Ampere, remapped rows) and the
// NVLink error counters.
#ifndef RAYACCEL_PLUGINS_CUDA_NVML_TELEMETRY_H_
#define RAYACCEL_PLUGINS_CUDA_NVML_TELEMETRY_H_

#include <cstdint>
#include <map>
#include <string>

#include "cuda/nvml_library.h"
#include "rayaccel/plugin.h"

namespace rayaccel::cuda {

// Fills `sample` (struct_size and device_index are the caller's) with what NVML answers for
// `gpu`; each field it cannot read (NOT_SUPPORTED on this GPU, an entry point this driver
// lacks) is left out of `known`, with why in `unknown` by RAYACCEL_SAMPLE_* bit. False when
// the GPU is lost: no sample then.
bool SampleGpu(const Nvml& n, nvmlDevice_t gpu, rayaccel_device_sample* sample,
               std::map<uint32_t, std::string>* unknown);

}  // namespace rayaccel::cuda

#endif  // RAYACCEL_PLUGINS_CUDA_NVML_TELEMETRY_H_
