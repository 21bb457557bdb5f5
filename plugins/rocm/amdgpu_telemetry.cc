#include "rocm/amdgpu_telemetry.h"

#include <optional>
#include <string_view>

#include "common/sysfs.h"

namespace rayaccel::rocm {
namespace {

std::optional<uint64_t> Number(const std::string& path) {
  std::optional<std::string> line = plugin::ReadLine(path);
  return line ? plugin::ParseUnsigned(*line) : std::nullopt;
}

// The GPU's hwmon folder: <device>/hwmon/hwmonN, the one amdgpu registers.
std::string Hwmon(const std::string& device_dir) {
  for (const std::string& entry : plugin::Entries(device_dir + "/hwmon")) {
    if (entry.rfind("hwmon", 0) == 0) return device_dir + "/hwmon/" + entry;
  }
  return "";
}

}  // namespace

std::optional<uint64_t> RasCount(const std::string& text, std::string_view key) {
  size_t at = text.find(key);
  if (at == std::string::npos) return std::nullopt;
  std::string_view field = std::string_view(text).substr(at + key.size());
  field = field.substr(0, field.find('\n'));
  while (!field.empty() && field.front() == ' ') field.remove_prefix(1);
  return plugin::ParseUnsigned(field);
}

void SampleAmdgpu(const std::string& dir, rayaccel_device_sample* s,
                  std::map<uint32_t, std::string>* unknown) {
  if (std::optional<uint64_t> busy = Number(dir + "/gpu_busy_percent"); busy && *busy <= 100) {
    s->known |= RAYACCEL_SAMPLE_UTILIZATION;
    s->utilization_percent = static_cast<uint32_t>(*busy);
  } else {
    unknown->emplace(RAYACCEL_SAMPLE_UTILIZATION, "no gpu_busy_percent in sysfs");
  }
  std::optional<uint64_t> used = Number(dir + "/mem_info_vram_used");
  std::optional<uint64_t> total = Number(dir + "/mem_info_vram_total");
  if (used && total && *used <= *total) {
    s->known |= RAYACCEL_SAMPLE_MEMORY;
    s->memory_used_bytes = *used;
    s->memory_total_bytes = *total;
  } else {
    unknown->emplace(RAYACCEL_SAMPLE_MEMORY, "no mem_info_vram_used/_total in sysfs");
  }
  const std::string hwmon = Hwmon(dir);
  std::optional<uint64_t> microwatts = Number(hwmon + "/power1_average");
  if (!microwatts) microwatts = Number(hwmon + "/power1_input");
  if (!hwmon.empty() && microwatts && *microwatts / 1000 <= UINT32_MAX) {
    s->known |= RAYACCEL_SAMPLE_POWER;
    s->power_mw = static_cast<uint32_t>(*microwatts / 1000);
  } else {
    unknown->emplace(RAYACCEL_SAMPLE_POWER, "no hwmon power1_average or power1_input");
  }
  std::optional<std::string> temp = plugin::ReadLine(hwmon + "/temp1_input");
  if (!temp) temp = plugin::ReadLine(hwmon + "/temp2_input");
  std::optional<int64_t> millidegrees = temp ? plugin::ParseSigned(*temp) : std::nullopt;
  if (!hwmon.empty() && millidegrees && *millidegrees > -273000 && *millidegrees < 1000000) {
    s->known |= RAYACCEL_SAMPLE_TEMPERATURE;
    s->temperature_c = static_cast<int32_t>(*millidegrees / 1000);
  } else {
    unknown->emplace(RAYACCEL_SAMPLE_TEMPERATURE, "no hwmon temp1_input or temp2_input");
  }
  std::optional<std::string> umc = plugin::ReadFile(dir + "/ras/umc_err_count");
  std::optional<uint64_t> ce = umc ? RasCount(*umc, "ce:") : std::nullopt;
  std::optional<uint64_t> ue = umc ? RasCount(*umc, "ue:") : std::nullopt;
  if (ce && ue) {
    s->known |= RAYACCEL_SAMPLE_ECC;
    s->ecc_corrected = *ce;
    s->ecc_uncorrected = *ue;
  } else {
    unknown->emplace(RAYACCEL_SAMPLE_ECC, "no ras/umc_err_count (RAS off, or a GPU without it)");
  }
  // One line per bad page, "pfn : size : flags"; R: retired, P: pending retirement.
  if (std::optional<std::string> pages = plugin::ReadFile(dir + "/ras/gpu_vram_bad_pages")) {
    s->known |= RAYACCEL_SAMPLE_RETIRED_PAGES;
    size_t start = 0;
    while (start < pages->size()) {
      size_t end = pages->find('\n', start);
      if (end == std::string::npos) end = pages->size();
      std::string_view line(pages->data() + start, end - start);
      while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.remove_suffix(1);
      if (!line.empty() && line.back() == 'R') ++s->retired_pages;
      start = end + 1;
    }
  } else {
    unknown->emplace(RAYACCEL_SAMPLE_RETIRED_PAGES, "no ras/gpu_vram_bad_pages");
  }
  std::optional<std::string> xgmi = plugin::ReadFile(dir + "/ras/xgmi_wafl_err_count");
  std::optional<uint64_t> xce = xgmi ? RasCount(*xgmi, "ce:") : std::nullopt;
  std::optional<uint64_t> xue = xgmi ? RasCount(*xgmi, "ue:") : std::nullopt;
  if (xce && xue) {
    s->known |= RAYACCEL_SAMPLE_LINK_ERRORS;
    s->link_errors = *xce + *xue;
  } else {
    unknown->emplace(RAYACCEL_SAMPLE_LINK_ERRORS, "no ras/xgmi_wafl_err_count");
  }
}

}  // namespace rayaccel::rocm
