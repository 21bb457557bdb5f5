#include "ascend/dcmi_telemetry.h"

#include <dlfcn.h>

#include <vector>

#include "common/plugin_util.h"

namespace rayaccel::ascend {
namespace {

std::string Said(const char* call, int rc) {
  switch (rc) {
    case DCMI_ERR_CODE_NOT_SUPPORT:
      return std::string(call) + ": not supported on this chip";
    case DCMI_ERR_CODE_NOT_SUPPORT_IN_CONTAINER:
      return std::string(call) + ": not supported in a container";
    case DCMI_ERR_CODE_DEVICE_NOT_EXIST:
      return std::string(call) + ": no such device";
    default:
      return std::string(call) + ": DCMI error " + std::to_string(rc);
  }
}

}  // namespace

Dcmi::~Dcmi() { plugin::CloseLibrary(handle_); }

bool Dcmi::Open(const std::string& library, std::string* why) {
  if (tried_) {
    *why = why_;
    return handle_ != nullptr;
  }
  tried_ = true;
  std::vector<std::string> candidates = {library};
  if (library.empty()) {
    candidates = {"libdcmi.so", "/usr/local/Ascend/driver/lib64/driver/libdcmi.so"};
  }
  for (const std::string& c : candidates) {
    handle_ = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ != nullptr) break;
    const char* e = dlerror();
    why_ = "no libdcmi.so (" + std::string(e != nullptr ? e : c) +
           "): the Ascend driver keeps no telemetry in sysfs";
  }
  if (handle_ != nullptr) {
    why_.clear();
// NOLINTBEGIN(bugprone-macro-parentheses): `f` names a member and a symbol, not a value
#define RAYACCEL_DCMI_LOAD(f)                               \
  f = reinterpret_cast<decltype(&::f)>(dlsym(handle_, #f)); \
  if (f == nullptr && why_.empty()) why_ = "libdcmi.so lacks " #f;
    // NOLINTEND(bugprone-macro-parentheses)
    RAYACCEL_DCMI_FUNCTIONS(RAYACCEL_DCMI_LOAD)
#undef RAYACCEL_DCMI_LOAD
    if (int rc = why_.empty() ? dcmi_init() : DCMI_OK; rc != DCMI_OK) {
      why_ = Said("dcmi_init", rc);
    }
    if (!why_.empty()) {
      plugin::CloseLibrary(handle_);
      handle_ = nullptr;
    }
  }
  *why = why_;
  return handle_ != nullptr;
}

void Dcmi::Sample(uint32_t phy_id, rayaccel_device_sample* s,
                  std::map<uint32_t, std::string>* unknown) const {
  int card = 0, device = 0;
  if (int rc = dcmi_get_card_id_device_id_from_phyid(&card, &device, phy_id); rc != DCMI_OK) {
    unknown->emplace(plugin::kEverySampleField, Said("dcmi_get_card_id_device_id_from_phyid", rc));
    return;
  }
  unsigned int busy = 0;
  if (int rc = dcmi_get_device_utilization_rate(card, device, DCMI_UTILIZATION_RATE_AICORE, &busy);
      rc != DCMI_OK) {
    unknown->emplace(RAYACCEL_SAMPLE_UTILIZATION, Said("dcmi_get_device_utilization_rate", rc));
  } else if (busy <= 100) {
    s->known |= RAYACCEL_SAMPLE_UTILIZATION;
    s->utilization_percent = busy;
  }
  dcmi_hbm_info hbm{};
  if (int rc = dcmi_get_device_hbm_info(card, device, &hbm); rc != DCMI_OK) {
    unknown->emplace(RAYACCEL_SAMPLE_MEMORY, Said("dcmi_get_device_hbm_info", rc));
  } else if (hbm.memory_usage <= hbm.memory_size && hbm.memory_size < (1ull << 30)) {
    s->known |= RAYACCEL_SAMPLE_MEMORY;
    s->memory_used_bytes = hbm.memory_usage << 20;
    s->memory_total_bytes = hbm.memory_size << 20;
  }
  int tenths = 0;
  if (int rc = dcmi_get_device_power_info(card, device, &tenths); rc != DCMI_OK) {
    unknown->emplace(RAYACCEL_SAMPLE_POWER, Said("dcmi_get_device_power_info", rc));
  } else if (tenths >= 0) {
    s->known |= RAYACCEL_SAMPLE_POWER;
    s->power_mw = static_cast<uint32_t>(tenths) * 100;  // 0.1 W
  }
  int celsius = 0;
  if (int rc = dcmi_get_device_temperature(card, device, &celsius); rc != DCMI_OK) {
    unknown->emplace(RAYACCEL_SAMPLE_TEMPERATURE, Said("dcmi_get_device_temperature", rc));
  } else {
    s->known |= RAYACCEL_SAMPLE_TEMPERATURE;
    s->temperature_c = celsius;
  }
  // HBM's counts: single-bit errors are the corrected ones, double-bit the uncorrected; the
  // totals never go back, and pages isolated for either are the retired ones.
  dcmi_ecc_info ecc{};
  if (int rc = dcmi_get_device_ecc_info(card, device, DCMI_DEVICE_TYPE_HBM, &ecc); rc != DCMI_OK) {
    unknown->emplace(RAYACCEL_SAMPLE_ECC, Said("dcmi_get_device_ecc_info", rc));
    unknown->emplace(RAYACCEL_SAMPLE_RETIRED_PAGES, Said("dcmi_get_device_ecc_info", rc));
  } else if (ecc.enable_flag == 0) {
    unknown->emplace(RAYACCEL_SAMPLE_ECC, "ECC is off on this NPU's HBM");
    unknown->emplace(RAYACCEL_SAMPLE_RETIRED_PAGES, "ECC is off on this NPU's HBM");
  } else {
    s->known |= RAYACCEL_SAMPLE_ECC | RAYACCEL_SAMPLE_RETIRED_PAGES;
    s->ecc_corrected = ecc.total_single_bit_error_cnt;
    s->ecc_uncorrected = ecc.total_double_bit_error_cnt;
    s->retired_pages = static_cast<uint64_t>(ecc.single_bit_isolated_pages_cnt) +
                       ecc.double_bit_isolated_pages_cnt;
  }
  unknown->emplace(RAYACCEL_SAMPLE_LINK_ERRORS, "DCMI keeps no HCCS error total");
}

}  // namespace rayaccel::ascend
