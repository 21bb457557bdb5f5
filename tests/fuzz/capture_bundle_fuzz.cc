// `rayaccel --replay FILE` reading a capture bundle: a bundle comes from someone else's machine
// (a bug report), so any bytes must be refused with an error, never a crash; the answers it
// carries then pass the registry's own Collector.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cli/capture_bundle.h"
#include "isolation/report_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<rayaccel::cli::Bundle> bundle =
      rayaccel::cli::ParseBundle(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!bundle.ok()) return 0;
  for (const rayaccel::CapturedPlugin& plugin : bundle->node.plugins) {
    rayaccel::PluginReport report;
    (void)rayaccel::isolation::DecodeReport(plugin.report, &report);
  }
  return 0;
}
