// The registry reading a plugin host's reply: a compromised or broken host may send any bytes,
// and the registry must refuse them without crashing, reading out of bounds, or building more
// than the bytes describe.
#include <cstddef>
#include <cstdint>

#include "isolation/report_codec.h"
#include "isolation/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<rayaccel::isolation::ReportReply> reply =
      rayaccel::isolation::DecodeReportReply(bytes);
  rayaccel::PluginReport report;
  (void)rayaccel::isolation::DecodeReport(reply.ok() ? reply->report : bytes, &report);
  return 0;
}
