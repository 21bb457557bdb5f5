// The configuration file and --config assignments.
#include <cstddef>
#include <cstdint>

#include "registry/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  (void)rayaccel::ParseConfig(text, "fuzz.conf");
  rayaccel::PluginConfig config;
  (void)rayaccel::AddConfigAssignment(text, &config);
  return 0;
}
