// --listen, --agent and --raylet addresses.
#include <cstddef>
#include <cstdint>

#include "rpc/listen_address.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)rayaccel::rpc::ParseListenAddress(
      absl::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
