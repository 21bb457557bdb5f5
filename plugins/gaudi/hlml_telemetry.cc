#include "gaudi/hlml_telemetry.h"

#include <dlfcn.h>

#include <string>

namespace rayaccel::gaudi {
namespace {

std::string Said(const char* call, hlml_return_t rc) {
  switch (rc) {
    case HLML_ERROR_NOT_SUPPORTED:
      return std::string(call) + ": not supported";
    case HLML_ERROR_TIMEOUT:
      return std::string(call) + ": timed out";
    case HLML_ERROR_DRIVER_NOT_LOADED:
      return std::string(call) + ": the driver is not loaded";
    default:
      return std::string(call) + ": HLML error " + std::to_string(rc);
  }
}

}  // namespace

HlmlTelemetryCalls LoadHlmlTelemetry(void* handle) {
  HlmlTelemetryCalls h;
#define RAYACCEL_HLML_TELEMETRY_LOAD(f) h.f = reinterpret_cast<decltype(&::f)>(dlsym(handle, #f));
  RAYACCEL_HLML_TELEMETRY_FUNCTIONS(RAYACCEL_HLML_TELEMETRY_LOAD)
#undef RAYACCEL_HLML_TELEMETRY_LOAD
  return h;
}

bool SampleAip(const HlmlTelemetryCalls& h, hlml_device_t device, rayaccel_device_sample* s,
               std::map<uint32_t, std::string>* unknown) {
  // Records why `bit` is unknown; false when the device itself is gone.
  auto failed = [&](uint32_t bit, const char* call, hlml_return_t rc) {
    if (rc == HLML_ERROR_AIP_IS_LOST) return false;
    unknown->emplace(bit, Said(call, rc));
    return true;
  };
  auto missing = [&](uint32_t bit, const char* call) {
    unknown->emplace(bit, std::string(call) + " is not in this libhlml.so");
  };

  if (h.hlml_device_get_utilization_rates == nullptr) {
    missing(RAYACCEL_SAMPLE_UTILIZATION, "hlml_device_get_utilization_rates");
  } else if (hlml_utilization_t u{};
             hlml_return_t rc = h.hlml_device_get_utilization_rates(device, &u)) {
    if (!failed(RAYACCEL_SAMPLE_UTILIZATION, "hlml_device_get_utilization_rates", rc)) {
      return false;
    }
  } else if (u.aip <= 100) {
    s->known |= RAYACCEL_SAMPLE_UTILIZATION;
    s->utilization_percent = u.aip;
  } else {
    unknown->emplace(RAYACCEL_SAMPLE_UTILIZATION, "hlml_device_get_utilization_rates: " +
                                                      std::to_string(u.aip) + " is not a percent");
  }

  if (h.hlml_device_get_memory_info == nullptr) {
    missing(RAYACCEL_SAMPLE_MEMORY, "hlml_device_get_memory_info");
  } else if (hlml_memory_t m{}; hlml_return_t rc = h.hlml_device_get_memory_info(device, &m)) {
    if (!failed(RAYACCEL_SAMPLE_MEMORY, "hlml_device_get_memory_info", rc)) return false;
  } else {
    s->known |= RAYACCEL_SAMPLE_MEMORY;
    s->memory_used_bytes = m.used;
    s->memory_total_bytes = m.total;
  }

  if (h.hlml_device_get_power_usage == nullptr) {
    missing(RAYACCEL_SAMPLE_POWER, "hlml_device_get_power_usage");
  } else if (unsigned mw = 0; hlml_return_t rc = h.hlml_device_get_power_usage(device, &mw)) {
    if (!failed(RAYACCEL_SAMPLE_POWER, "hlml_device_get_power_usage", rc)) return false;
  } else {
    s->known |= RAYACCEL_SAMPLE_POWER;
    s->power_mw = mw;
  }

  if (h.hlml_device_get_temperature == nullptr) {
    missing(RAYACCEL_SAMPLE_TEMPERATURE, "hlml_device_get_temperature");
  } else if (unsigned c = 0; hlml_return_t rc = h.hlml_device_get_temperature(
                                 device, HLML_TEMPERATURE_ON_AIP, &c)) {
    if (!failed(RAYACCEL_SAMPLE_TEMPERATURE, "hlml_device_get_temperature", rc)) return false;
  } else {
    s->known |= RAYACCEL_SAMPLE_TEMPERATURE;
    s->temperature_c = static_cast<int32_t>(c);
  }

  // The ABI's ECC pair needs the corrected count too, which HLML does not keep: asked anyway,
  // so that a libhlml.so that starts answering it is used.
  if (h.hlml_device_get_total_ecc_errors == nullptr) {
    missing(RAYACCEL_SAMPLE_ECC, "hlml_device_get_total_ecc_errors");
  } else {
    unsigned long long corrected = 0, uncorrected = 0;  // NOLINT(runtime/int)
    hlml_return_t rc = h.hlml_device_get_total_ecc_errors(device, HLML_MEMORY_ERROR_TYPE_CORRECTED,
                                                          HLML_VOLATILE_ECC, &corrected);
    if (rc == HLML_SUCCESS) {
      rc = h.hlml_device_get_total_ecc_errors(device, HLML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                              HLML_VOLATILE_ECC, &uncorrected);
    }
    if (rc != HLML_SUCCESS) {
      if (!failed(RAYACCEL_SAMPLE_ECC, "hlml_device_get_total_ecc_errors (corrected)", rc)) {
        return false;
      }
    } else {
      s->known |= RAYACCEL_SAMPLE_ECC;
      s->ecc_corrected = corrected;
      s->ecc_uncorrected = uncorrected;
    }
  }

  // HBM rows replaced, for either cause: Gaudi's retired pages.
  if (h.hlml_device_get_replaced_rows == nullptr) {
    missing(RAYACCEL_SAMPLE_RETIRED_PAGES, "hlml_device_get_replaced_rows");
  } else {
    unsigned single = 0, dual = 0;
    hlml_return_t rc = h.hlml_device_get_replaced_rows(
        device, HLML_ROW_REPLACEMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, &single, nullptr);
    if (rc == HLML_SUCCESS) {
      rc = h.hlml_device_get_replaced_rows(device, HLML_ROW_REPLACEMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
                                           &dual, nullptr);
    }
    if (rc != HLML_SUCCESS) {
      if (!failed(RAYACCEL_SAMPLE_RETIRED_PAGES, "hlml_device_get_replaced_rows", rc)) {
        return false;
      }
    } else {
      s->known |= RAYACCEL_SAMPLE_RETIRED_PAGES;
      s->retired_pages = static_cast<uint64_t>(single) + dual;
    }
  }

  unknown->emplace(RAYACCEL_SAMPLE_LINK_ERRORS,
                   "HLML keeps no link error total (its NIC counters are per port, by name)");
  return true;
}

}  // namespace rayaccel::gaudi
