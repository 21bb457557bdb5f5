#include "cuda/nvml_telemetry.h"

#include <string>

namespace rayaccel::cuda {
namespace {

std::string Said(const Nvml& n, const char* call, nvmlReturn_t rc) {
  return std::string(call) + ": " + (n.ErrorString != nullptr ? n.ErrorString(rc) : "error");
}

}  // namespace

bool SampleGpu(const Nvml& n, nvmlDevice_t gpu, rayaccel_device_sample* s,
               std::map<uint32_t, std::string>* unknown) {
  // Records why `bit` is unknown; false when the GPU itself is gone.
  auto failed = [&](uint32_t bit, const char* call, nvmlReturn_t rc) {
    if (rc == NVML_ERROR_GPU_IS_LOST) return false;
    unknown->emplace(bit, Said(n, call, rc));
    return true;
  };
  auto missing = [&](uint32_t bit, const char* call) {
    unknown->emplace(bit, std::string(call) + " is not in this driver's NVML");
  };

  if (n.Utilization == nullptr) {
    missing(RAYACCEL_SAMPLE_UTILIZATION, "nvmlDeviceGetUtilizationRates");
  } else if (nvmlUtilization_t u{}; nvmlReturn_t rc = n.Utilization(gpu, &u)) {
    if (!failed(RAYACCEL_SAMPLE_UTILIZATION, "nvmlDeviceGetUtilizationRates", rc)) return false;
  } else {
    s->known |= RAYACCEL_SAMPLE_UTILIZATION;
    s->utilization_percent = u.gpu;
  }

  if (nvmlMemory_t m{}; nvmlReturn_t rc = n.GetMemory(gpu, &m)) {
    if (!failed(RAYACCEL_SAMPLE_MEMORY, "nvmlDeviceGetMemoryInfo", rc)) return false;
  } else {
    s->known |= RAYACCEL_SAMPLE_MEMORY;
    s->memory_used_bytes = m.used;
    s->memory_total_bytes = m.total;
  }

  if (n.Power == nullptr) {
    missing(RAYACCEL_SAMPLE_POWER, "nvmlDeviceGetPowerUsage");
  } else if (unsigned mw = 0; nvmlReturn_t rc = n.Power(gpu, &mw)) {
    if (!failed(RAYACCEL_SAMPLE_POWER, "nvmlDeviceGetPowerUsage", rc)) return false;
  } else {
    s->known |= RAYACCEL_SAMPLE_POWER;
    s->power_mw = mw;
  }

  if (n.Temperature == nullptr) {
    missing(RAYACCEL_SAMPLE_TEMPERATURE, "nvmlDeviceGetTemperature");
  } else if (unsigned c = 0; nvmlReturn_t rc = n.Temperature(gpu, NVML_TEMPERATURE_GPU, &c)) {
    if (!failed(RAYACCEL_SAMPLE_TEMPERATURE, "nvmlDeviceGetTemperature", rc)) return false;
  } else {
    s->known |= RAYACCEL_SAMPLE_TEMPERATURE;
    s->temperature_c = static_cast<int32_t>(c);
  }

  // Volatile counts: since the driver loaded, as the ABI's counters are.
  if (n.EccErrors == nullptr) {
    missing(RAYACCEL_SAMPLE_ECC, "nvmlDeviceGetTotalEccErrors");
  } else {
    unsigned long long corrected = 0, uncorrected = 0;  // NOLINT(runtime/int)
    nvmlReturn_t rc =
        n.EccErrors(gpu, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, &corrected);
    if (rc == NVML_SUCCESS) {
      rc = n.EccErrors(gpu, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &uncorrected);
    }
    if (rc != NVML_SUCCESS) {
      if (!failed(RAYACCEL_SAMPLE_ECC, "nvmlDeviceGetTotalEccErrors", rc)) return false;
    } else {
      s->known |= RAYACCEL_SAMPLE_ECC;
      s->ecc_corrected = corrected;
      s->ecc_uncorrected = uncorrected;
    }
  }

  // Pages retired (before Ampere), else rows remapped (Ampere and later answer only that).
  unsigned single = 0, dual = 0;
  nvmlReturn_t pages =
      n.RetiredPages == nullptr
          ? NVML_ERROR_NOT_SUPPORTED
          : n.RetiredPages(gpu, NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, &single,
                           nullptr);
  if (pages == NVML_SUCCESS || pages == NVML_ERROR_INSUFFICIENT_SIZE) {
    pages = n.RetiredPages(gpu, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, &dual, nullptr);
  }
  if (pages == NVML_SUCCESS || pages == NVML_ERROR_INSUFFICIENT_SIZE) {
    s->known |= RAYACCEL_SAMPLE_RETIRED_PAGES;
    s->retired_pages = static_cast<uint64_t>(single) + dual;
  } else if (pages == NVML_ERROR_GPU_IS_LOST) {
    return false;
  } else if (unsigned corr = 0, unc = 0, pending = 0, failure = 0;
             n.RemappedRows != nullptr &&
             n.RemappedRows(gpu, &corr, &unc, &pending, &failure) == NVML_SUCCESS) {
    s->known |= RAYACCEL_SAMPLE_RETIRED_PAGES;
    s->retired_pages = static_cast<uint64_t>(corr) + unc;
  } else {
    unknown->emplace(RAYACCEL_SAMPLE_RETIRED_PAGES,
                     Said(n, "nvmlDeviceGetRetiredPages and nvmlDeviceGetRemappedRows", pages));
  }

  // NVLink errors, every link together: flit and data CRC, replays and recoveries.
  if (n.FieldValues == nullptr) {
    missing(RAYACCEL_SAMPLE_LINK_ERRORS, "nvmlDeviceGetFieldValues");
  } else {
    nvmlFieldValue_t v[4] = {};
    const unsigned ids[4] = {NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
                             NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
                             NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,
                             NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL};
    for (int i = 0; i < 4; ++i) v[i].fieldId = ids[i];
    nvmlReturn_t rc = n.FieldValues(gpu, 4, v);
    uint64_t total = 0;
    for (int i = 0; i < 4 && rc == NVML_SUCCESS; ++i) {
      rc = v[i].nvmlReturn;
      total += v[i].value.ullVal;
    }
    if (rc != NVML_SUCCESS) {
      if (!failed(RAYACCEL_SAMPLE_LINK_ERRORS, "NVLink error counters", rc)) return false;
    } else {
      s->known |= RAYACCEL_SAMPLE_LINK_ERRORS;
      s->link_errors = total;
    }
  }
  return true;
}

}  // namespace rayaccel::cuda
