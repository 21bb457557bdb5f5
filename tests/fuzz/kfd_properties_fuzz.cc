// A KFD sysfs properties file ("name value" lines), as the ROCm plugin reads it.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/sysfs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  (void)rayaccel::plugin::ParseProperties(text);
  (void)rayaccel::plugin::ParseHexId(text);
  (void)rayaccel::plugin::ParseSigned(text);
  return 0;
}
