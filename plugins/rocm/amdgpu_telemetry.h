// What amdgpu's sysfs says a GPU is doing now, as get_telemetry's sample, all under the GPU's
// PCI device folder (<sysfs>/bus/pci/devices/<bdf>): gpu_busy_percent, mem_info_vram_used and
// _total, hwmon's power1_average (or power1_input; microwatts) and temp1_input (edge; else
// temp2_input, the junction sensor an MI300 has instead; millidegrees), and the RAS counters:
// ras/umc_err_count (memory ECC), ras/gpu_vram_bad_pages (retired pages) and
// ras/xgmi_wafl_err_count (xGMI link errors).
#ifndef RAYACCEL_PLUGINS_ROCM_AMDGPU_TELEMETRY_H_
#define RAYACCEL_PLUGINS_ROCM_AMDGPU_TELEMETRY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "rayaccel/plugin.h"

namespace rayaccel::rocm {

// "ue: N" or "ce: N" (`key` "ue:" or "ce:") of a RAS <block>_err_count file's text; nullopt
// where it is missing or no number.
std::optional<uint64_t> RasCount(const std::string& text, std::string_view key);

// Fills `sample` (struct_size and device_index are the caller's) from `device_dir`; each field
// the driver does not expose there is left out of `known`, with why in `unknown` by
// RAYACCEL_SAMPLE_* bit.
void SampleAmdgpu(const std::string& device_dir, rayaccel_device_sample* sample,
                  std::map<uint32_t, std::string>* unknown);

}  // namespace rayaccel::rocm

#endif  // RAYACCEL_PLUGINS_ROCM_AMDGPU_TELEMETRY_H_
