// The JSON reader: sim specs, the plugin host's requests and small replies.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "util/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rayaccel::json::ParseError error;
  (void)rayaccel::json::Parse(std::string_view(reinterpret_cast<const char*>(data), size), &error);
  return 0;
}
