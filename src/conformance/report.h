// The maturity report (`--report DIR`): report.json and report.md, what a vendor publishes with
// a result: the plugin, the tier reached, every check's verdict and figures, and the versions
// that decide the result (rayaccel, Ray, Python, the kernel, the plugin's driver and runtime).
#ifndef RAYACCEL_CONFORMANCE_REPORT_H_
#define RAYACCEL_CONFORMANCE_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "conformance/suite.h"
#include "util/json.h"

namespace rayaccel::conformance {

struct CheckResult {
  const Check* check;
  Outcome outcome;
};

// "pass", "fail", "skip", "warn".
const char* StatusName(Outcome::Status status);

// One check's entry of `--json` and of report.json: name, tier, status, message, why,
// figures.
void WriteCheck(json::Writer& w, const CheckResult& result);

// What the plugin says of itself, read in a child (a plugin that crashes costs nothing here):
// name, ABI version, vendor, version, and the driver and version attributes of its devices.
struct PluginFacts {
  std::string name, abi_version, vendor, version;
  std::vector<std::string> drivers;  // "driver_version=535.104.05", "cuda_driver=12.2", ...
  std::string error;                 // why the facts are missing, if they are
};
PluginFacts ReadPluginFacts(const Options& options);

// Writes DIR/report.json and DIR/report.md (DIR is created).
absl::Status WriteReport(const std::string& dir, const Options& options, int tier,
                         const std::vector<CheckResult>& results, const std::string& note);

}  // namespace rayaccel::conformance

#endif  // RAYACCEL_CONFORMANCE_REPORT_H_
