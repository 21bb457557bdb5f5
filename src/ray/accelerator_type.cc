#include "ray/accelerator_type.h"

#include <regex>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace rayaccel {

std::string NvidiaAcceleratorType(absl::string_view device_name) {
  // Ray: NVIDIA_GPU_NAME_PATTERN.match(name): a first word, then the leading all-caps words
  // up to and including the first token holding a digit; spaces become '-'. A result of one
  // character or none falls back to the name without a leading "NVIDIA ".
  static const std::regex kPattern(R"(\w+\s+((?:[A-Z]+\s+)*[A-Z0-9]*\d[A-Z0-9]*))");
  std::string name(device_name);
  std::smatch match;
  if (std::regex_search(name, match, kPattern, std::regex_constants::match_continuous)) {
    std::string result = absl::StrReplaceAll(match[1].str(), {{" ", "-"}});
    if (result.size() > 1) return result;
  }
  static const std::regex kVendorPrefix(R"(^NVIDIA\s+)");
  std::string cleaned =
      std::regex_replace(name, kVendorPrefix, "", std::regex_constants::format_first_only);
  cleaned = std::string(absl::StripAsciiWhitespace(cleaned));
  return absl::StrReplaceAll(cleaned, {{" ", "-"}});
}

std::string AmdAcceleratorType(uint32_t pci_device_id) {
  // Ray's AMD_GPU_DEVICE_ID-to-product table (amd_gpu.py), each prefixed "AMD-Instinct-".
  struct Entry {
    uint32_t id;
    const char* product;
  };
  static constexpr Entry kTable[] = {
      {0x66a1, "MI50"},         {0x738c, "MI100"},      {0x7408, "MI250X"},
      {0x740c, "MI250X-MI250"}, {0x740f, "MI210"},      {0x74a0, "MI300A"},
      {0x74a1, "MI300X-OAM"},   {0x74a2, "MI308X-OAM"}, {0x74a9, "MI300X-HF"},
      {0x74a5, "MI325X-OAM"},   {0x75a0, "MI350X-OAM"}, {0x75a3, "MI355X-OAM"},
  };
  for (const Entry& e : kTable) {
    if (e.id == pci_device_id) return std::string("AMD-Instinct-") + e.product;
  }
  return "";
}

std::string TpuAcceleratorType(uint32_t pci_device_id) {
  switch (pci_device_id) {
    case 0x005e:
      return "TPU-V4";
    case 0x0062:
      return "TPU-V5P";
    case 0x0063:
      return "TPU-V5LITEPOD";
    case 0x006f:
      return "TPU-V6E";
    case 0x0076:
      return "TPU-V7X";
    default:
      return "";  // 0x0027 is shared by v2 and v3: only the plugin can tell
  }
}

std::string GaudiAcceleratorType(uint32_t pci_device_id) {
  switch (pci_device_id) {
    case 0x1000:
    case 0x1001:
    case 0x1010:
    case 0x1011:
      return "Intel-GAUDI";
    case 0x1020:
    case 0x1021:
      return "Intel-GAUDI2";
    case 0x1030:
    case 0x1060:
    case 0x1061:
    case 0x1062:
    case 0x1063:
      return "Intel-GAUDI3";
    default:
      return "";
  }
}

std::string DeriveAcceleratorType(absl::string_view vendor, absl::string_view device_name,
                                  uint32_t pci_vendor_id, uint32_t pci_device_id) {
  std::string v = absl::AsciiStrToLower(vendor);
  if (pci_vendor_id == kPciVendorNvidia || (pci_vendor_id == 0 && v == "nvidia")) {
    return NvidiaAcceleratorType(device_name);
  }
  if (pci_vendor_id == kPciVendorAmd || (pci_vendor_id == 0 && v == "amd")) {
    return AmdAcceleratorType(pci_device_id);
  }
  if (pci_vendor_id == kPciVendorGoogle || (pci_vendor_id == 0 && v == "google")) {
    return TpuAcceleratorType(pci_device_id);
  }
  if (pci_vendor_id == kPciVendorHabana ||
      (pci_vendor_id == 0 && (v == "intel" || v == "habana"))) {
    return GaudiAcceleratorType(pci_device_id);
  }
  return "";
}

}  // namespace rayaccel
