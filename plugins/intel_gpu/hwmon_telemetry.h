// What the i915 and xe drivers' hwmon says of a card: its energy counter (energy1_input,
// microjoules since the driver loaded; power is its rate between two readings) and, on xe
// since Linux 6.15, the package temperature (temp2_input, millidegrees C). Neither driver has
// utilization, memory in use or error counters in sysfs.
#ifndef RAYACCEL_PLUGINS_INTEL_GPU_HWMON_TELEMETRY_H_
#define RAYACCEL_PLUGINS_INTEL_GPU_HWMON_TELEMETRY_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace rayaccel::intel_gpu {

struct CardHwmon {
  std::optional<uint64_t> energy_uj;     // energy1_input
  std::optional<int32_t> temperature_c;  // temp2_input (xe), whole degrees
  std::string why_no_energy, why_no_temperature;
};

// The card's own hwmon folder under its PCI function (`pci_dir`/hwmon/hwmon<N> whose `name`
// is "i915" or "xe"; i915's per-GT "i915_gt<K>" ones are left out), read once.
CardHwmon ReadCardHwmon(const std::string& pci_dir);

// Power from an energy counter: the rate between this reading and the previous one (at least
// 100 ms apart; nullopt for the first, a counter that went back, or one read too soon).
class EnergyRate {
 public:
  std::optional<uint32_t> PowerMw(uint64_t energy_uj, std::chrono::steady_clock::time_point now);

 private:
  std::optional<uint64_t> last_uj_;
  std::chrono::steady_clock::time_point last_at_;
};

}  // namespace rayaccel::intel_gpu

#endif  // RAYACCEL_PLUGINS_INTEL_GPU_HWMON_TELEMETRY_H_
