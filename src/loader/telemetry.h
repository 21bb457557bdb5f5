// get_telemetry's answers, checked as discover's are: a sample per device of the last discover
// at most, values in range, text bounded and escaped. Used in this process (LoadedPlugin) and
// again on what an isolated plugin's host sends back (RemotePlugin).
#ifndef RAYACCEL_LOADER_TELEMETRY_H_
#define RAYACCEL_LOADER_TELEMETRY_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "rayaccel/plugin.h"
#include "rayaccel/snapshot.h"

namespace rayaccel {

// Every RAYACCEL_SAMPLE_* bit of this ABI.
inline constexpr uint32_t kAllSampleFields = RAYACCEL_SAMPLE_UTILIZATION | RAYACCEL_SAMPLE_MEMORY |
                                             RAYACCEL_SAMPLE_POWER | RAYACCEL_SAMPLE_TEMPERATURE |
                                             RAYACCEL_SAMPLE_ECC | RAYACCEL_SAMPLE_RETIRED_PAGES |
                                             RAYACCEL_SAMPLE_LINK_ERRORS;

struct TelemetryReport {
  std::vector<DeviceSample> samples;        // device_id and plugin left to the registry
  std::map<uint32_t, std::string> unknown;  // explain_unknown: fields -> why
  std::vector<std::string> problems;        // samples refused, and why
};

// Why `s` cannot be taken ("utilization 140 is over 100"), or empty. `reported`: the indices
// of the plugin's last discover.
std::string CheckSample(const DeviceSample& s, const std::set<uint32_t>& reported);

// The sink get_telemetry is given: add_sample and explain_unknown take, everything else refuses.
class SampleCollector {
 public:
  SampleCollector(TelemetryReport* report, std::set<uint32_t> reported);
  SampleCollector(const SampleCollector&) = delete;
  SampleCollector& operator=(const SampleCollector&) = delete;
  const rayaccel_sink* sink() const { return &sink_; }

 private:
  static rayaccel_status AddSample(void* ctx, const rayaccel_device_sample* sample) noexcept;
  static rayaccel_status ExplainUnknown(void* ctx, uint32_t fields,
                                        rayaccel_string reason) noexcept;
  static rayaccel_string LastRefusal(void* ctx) noexcept;
  rayaccel_status Refuse(std::string why);

  TelemetryReport* report_;
  std::set<uint32_t> reported_;
  std::set<uint32_t> sampled_;
  std::string last_refusal_;
  rayaccel_sink sink_{};
};

}  // namespace rayaccel

#endif  // RAYACCEL_LOADER_TELEMETRY_H_
