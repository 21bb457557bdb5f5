// What HLML says a Gaudi is doing now, as get_telemetry's sample: utilization, memory, power,
// the AIP's temperature and rows replaced. HLML has no corrected ECC count (the call answers
// NOT_SUPPORTED), so ECC stays unknown; uncorrectable errors reach the health watch as events.
#ifndef RAYACCEL_PLUGINS_GAUDI_HLML_TELEMETRY_H_
#define RAYACCEL_PLUGINS_GAUDI_HLML_TELEMETRY_H_

#include <cstdint>
#include <map>
#include <string>

#include "gaudi/hlml.h"
#include "rayaccel/plugin.h"

namespace rayaccel::gaudi {

// HLML's telemetry calls, each null when this libhlml.so lacks it (an older release).
struct HlmlTelemetryCalls {
#define RAYACCEL_HLML_TELEMETRY_FUNCTIONS(X) \
  X(hlml_device_get_utilization_rates)       \
  X(hlml_device_get_memory_info)             \
  X(hlml_device_get_power_usage)             \
  X(hlml_device_get_temperature)             \
  X(hlml_device_get_total_ecc_errors) X(hlml_device_get_replaced_rows)
#define RAYACCEL_HLML_TELEMETRY_MEMBER(f) \
  decltype(&::f) f = nullptr;  // NOLINT(bugprone-macro-parentheses)
  RAYACCEL_HLML_TELEMETRY_FUNCTIONS(RAYACCEL_HLML_TELEMETRY_MEMBER)
#undef RAYACCEL_HLML_TELEMETRY_MEMBER
};

// Looks the calls up in an open libhlml.so.
HlmlTelemetryCalls LoadHlmlTelemetry(void* handle);

// Fills `sample` (struct_size and device_index are the caller's) with what HLML answers for
// `device`; each field it cannot read is left out of `known`, with why in `unknown` by
// RAYACCEL_SAMPLE_* bit. False when the device is lost (HLML_ERROR_AIP_IS_LOST): no sample.
bool SampleAip(const HlmlTelemetryCalls& h, hlml_device_t device, rayaccel_device_sample* sample,
               std::map<uint32_t, std::string>* unknown);

}  // namespace rayaccel::gaudi

#endif  // RAYACCEL_PLUGINS_GAUDI_HLML_TELEMETRY_H_
