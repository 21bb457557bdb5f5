#include "intel_gpu/hwmon_telemetry.h"

#include "common/sysfs.h"

namespace rayaccel::intel_gpu {

CardHwmon ReadCardHwmon(const std::string& pci_dir) {
  CardHwmon out;
  out.why_no_energy = "no i915 or xe hwmon folder under the card's PCI function";
  out.why_no_temperature = out.why_no_energy;
  for (const std::string& entry : plugin::Entries(pci_dir + "/hwmon")) {
    const std::string dir = pci_dir + "/hwmon/" + entry;
    const std::optional<std::string> name = plugin::ReadLine(dir + "/name");
    if (!name || (*name != "i915" && *name != "xe")) continue;
    out.why_no_energy = *name + " hwmon has no readable energy1_input";
    if (std::optional<std::string> e = plugin::ReadLine(dir + "/energy1_input")) {
      if (std::optional<uint64_t> uj = plugin::ParseUnsigned(*e)) {
        out.energy_uj = *uj;
      } else {
        out.why_no_energy = "energy1_input: \"" + e->substr(0, 32) + "\" is not a count";
      }
    }
    out.why_no_temperature = *name == "i915" ? "i915's hwmon has no temperature"
                                             : "xe's hwmon has no temp2_input (Linux 6.15+)";
    if (std::optional<std::string> t = plugin::ReadLine(dir + "/temp2_input")) {
      std::optional<uint64_t> mc = plugin::ParseUnsigned(*t);
      if (mc && *mc < 200000) {
        out.temperature_c = static_cast<int32_t>(*mc / 1000);
      } else {
        out.why_no_temperature = "temp2_input: \"" + t->substr(0, 32) + "\" is no temperature";
      }
    }
    break;
  }
  return out;
}

std::optional<uint32_t> EnergyRate::PowerMw(uint64_t energy_uj,
                                            std::chrono::steady_clock::time_point now) {
  std::optional<uint32_t> power;
  if (last_uj_) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_at_).count();
    if (ms < 100) return std::nullopt;  // too soon: keep the older reading as the base
    if (energy_uj >= *last_uj_) {
      const uint64_t mw = (energy_uj - *last_uj_) / static_cast<uint64_t>(ms);  // uJ/ms = mW
      if (mw <= 10000000) power = static_cast<uint32_t>(mw);  // over 10 kW: not a card
    }
  }
  last_uj_ = energy_uj;
  last_at_ = now;
  return power;
}

}  // namespace rayaccel::intel_gpu
