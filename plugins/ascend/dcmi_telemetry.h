// What DCMI says an NPU is doing now, as get_telemetry's sample: the AI Core's busy percent,
// HBM used and total, power, temperature, HBM ECC counts and isolated pages. libdcmi.so is
// loaded at the first sample; without it every field is unknown (the Ascend driver keeps no
// telemetry in sysfs).
#ifndef RAYACCEL_PLUGINS_ASCEND_DCMI_TELEMETRY_H_
#define RAYACCEL_PLUGINS_ASCEND_DCMI_TELEMETRY_H_

#include <cstdint>
#include <map>
#include <string>

#include "ascend/dcmi.h"
#include "rayaccel/plugin.h"

namespace rayaccel::ascend {

class Dcmi {
 public:
  ~Dcmi();
  // Opens `library` (empty: libdcmi.so, then the driver's /usr/local/Ascend/driver/lib64/driver
  // copy) and runs dcmi_init, once; false, with why, when it cannot (each later call says so).
  bool Open(const std::string& library, std::string* why);

  // Fills `sample` (struct_size and device_index are the caller's) for /dev/davinci<phy_id>;
  // each field DCMI cannot give is left out of `known`, with why in `unknown`.
  void Sample(uint32_t phy_id, rayaccel_device_sample* sample,
              std::map<uint32_t, std::string>* unknown) const;

 private:
#define RAYACCEL_DCMI_FUNCTIONS(X)         \
  X(dcmi_init)                             \
  X(dcmi_get_card_id_device_id_from_phyid) \
  X(dcmi_get_device_utilization_rate)      \
  X(dcmi_get_device_hbm_info)              \
  X(dcmi_get_device_power_info) X(dcmi_get_device_temperature) X(dcmi_get_device_ecc_info)
#define RAYACCEL_DCMI_MEMBER(f) decltype(&::f) f = nullptr;  // NOLINT(bugprone-macro-parentheses)
  RAYACCEL_DCMI_FUNCTIONS(RAYACCEL_DCMI_MEMBER)
#undef RAYACCEL_DCMI_MEMBER
  void* handle_ = nullptr;
  bool tried_ = false;
  std::string why_;
};

}  // namespace rayaccel::ascend

#endif  // RAYACCEL_PLUGINS_ASCEND_DCMI_TELEMETRY_H_
