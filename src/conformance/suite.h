// The conformance suite: checks one plugin .so against the ABI's promises and assigns a
// maturity tier. Every check loads the plugin in a child process of its own, so a plugin that
// crashes, aborts, hangs or writes to stdout fails that check and nothing else.
// The checks, their tiers and the reason for each are in docs/conformance.md.
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
};

struct Outcome {
  // kWarn passes, with something the vendor should know (the registry warns the same way).
  enum class Status { kPass, kFail, kSkip, kWarn };
  Status status = Status::kPass;
  std::string message;
  static Outcome Pass(std::string m = "") { return {Status::kPass, std::move(m)}; }
  static Outcome Fail(std::string m) { return {Status::kFail, std::move(m)}; }
  static Outcome Skip(std::string m) { return {Status::kSkip, std::move(m)}; }
  static Outcome Warn(std::string m) { return {Status::kWarn, std::move(m)}; }
};

struct Check {
  std::string name;  // "discovery.ids_stable"
  int tier = 1;      // 1 discoverable, 2 schedulable, 3 transport
  std::string why;   // one line: the promise it checks
  // A skip counts as passing for the tier (a hook the plugin need not have).
  bool skip_passes = true;
  std::function<Outcome(const Options&)> run;
  // When this check fails, the checks after it cannot run (the plugin does not load): they are
  // not run, and the failure is reported once.
  bool gates = false;
};

const std::vector<Check>& AllChecks();

const char* TierName(int tier);  // "discoverable", "schedulable", "transport"

}  // namespace rayaccel::conformance

#endif  // RAYACCEL_CONFORMANCE_SUITE_H_
