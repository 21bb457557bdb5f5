// The conformance suite: checks one plugin .so against the ABI's promises and assigns a
// maturity tier. Every check loads the plugin in a child process of its own, so a plugin that
// crashes, aborts, hangs or writes to stdout fails that check and nothing else.
// The checks are listed in checks.cc, with their tiers and what each proves: docs/conformance.md's
// table of the checks is generated from that list (--list-checks=markdown).
#ifndef RAYACCEL_CONFORMANCE_SUITE_H_
#define RAYACCEL_CONFORMANCE_SUITE_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace rayaccel::conformance {

struct Options {
  std::string plugin_path;
  std::map<std::string, std::string> config;  // passed to the plugin's initialize
  int timeout_seconds = 10;                   // per check
  // This machine has none of the plugin's devices: finding some is a failure, and finding none
  // is what tier 1 expects (a vendor's CI without the hardware).
  bool expect_no_devices = false;
  // Run the performance checks (tier 4): they measure rather than judge, and take seconds.
  bool perf = false;
  // Tier 5: run the Ray checks (a real Ray on this host, started and stopped by the suite).
  bool ray = false;
  std::string ray_python;  // the Python with Ray (--ray-python, RAYACCEL_RAY_PYTHON, ...)
  std::string rayaccel;    // the rayaccel command, whose ray-start-args Ray is started with
};

// A measured figure (the performance checks): "discovery.rescan_us", 41.3.
struct Figure {
  std::string name;  // its unit is the suffix: _us, _ms, _gbps (10^9 bytes/s), _per_s
  double value = 0;
  bool HigherIsBetter() const;
};

struct Outcome {
  // kWarn passes, with something the vendor should know (the registry warns the same way).
  enum class Status { kPass, kFail, kSkip, kWarn };
  Status status = Status::kPass;
  std::string message;
  std::vector<Figure> figures;
  static Outcome Pass(std::string m = "") { return {Status::kPass, std::move(m), {}}; }
  static Outcome Fail(std::string m) { return {Status::kFail, std::move(m), {}}; }
  static Outcome Skip(std::string m) { return {Status::kSkip, std::move(m), {}}; }
  static Outcome Warn(std::string m) { return {Status::kWarn, std::move(m), {}}; }
};

struct Check {
  std::string name;  // "discovery.ids_stable"
  int tier = 1;      // 1 discoverable, 2 schedulable, 3 transport, 4 measured, 5 in Ray
  std::string why;   // one line: the promise it checks (--json's checks[].why)
  // A skip counts as passing for the tier (a hook the plugin need not have).
  bool skip_passes = true;
  std::function<Outcome(const Options&)> run;
  // What a pass proves, and why it matters, for the vendor who reads docs/conformance.md.
  std::string proves;
  // The fix a failure's message leads with ("copy the configuration in initialize"); empty
  // where the check's failures have no single fix (the table then leaves it out: hence = "").
  std::string fix = "";
  // When this check fails, the checks after it cannot run (the plugin does not load): they are
  // not run, and the failure is reported once.
  bool gates = false;
};

const std::vector<Check>& AllChecks();

// "discoverable", "schedulable", "transport", "measured", "certified in Ray"
const char* TierName(int tier);
constexpr int kTopTier = 5;

// What the Ray checks' run said of the versions that decide its result ("" when it did not run):
// the Ray and Python it ran with.
struct RayVersions {
  std::string ray;
  std::string python;
  std::string python_path;
};
RayVersions RayRunVersions();

// The checks as a Markdown table, one row each: | check | tier | skip passes | what it proves |
// fix it leads with |. docs/conformance.md carries it between its "checks" markers.
std::string ChecksMarkdown(const std::vector<Check>& checks);

// Whether `now` regressed past `factor` against `baseline` (a figure of the same name): the
// reason, or empty. Times also need to be worse by 50 us, so that noise on a figure of a few
// microseconds is no regression.
std::string Regression(const Figure& now, double baseline, double factor);

}  // namespace rayaccel::conformance

#endif  // RAYACCEL_CONFORMANCE_SUITE_H_
