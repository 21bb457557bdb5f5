// The sim plugin's spec: any text is a spec or an error naming where it went wrong.
#include <cstddef>
#include <cstdint>
#include <string>

#include "sim/sim_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rayaccel::sim::SimSpec spec;
  std::string error;
  (void)rayaccel::sim::ParseSpec(std::string(reinterpret_cast<const char*>(data), size),
                                 "fuzz.json", &spec, &error);
  return 0;
}
