// What the checks share: each runs its body in a child process of its own (isolated.cc), and
// there loads the plugin and reads its answers through the registry's own Collector
// (harness.cc). Internal to the conformance suite.
#ifndef RAYACCEL_CONFORMANCE_CHECK_SUPPORT_H_
#define RAYACCEL_CONFORMANCE_CHECK_SUPPORT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "conformance/suite.h"
#include "loader/collector.h"
#include "loader/plugin_loader.h"

namespace rayaccel::conformance {

// ---------------------------------------------------------------------------------------
// Isolation: a check's body runs in a forked child that loads the plugin itself.

void WriteAll(int fd, const std::string& text);

// A check that runs many cycles says each one is done: the parent's timeout then runs per
// cycle, not for all of them together (a slow but working plugin is not "hung").
void Progress();

// In a check's child: what runs once the check's verdict is written (the plugin's shutdown).
// Its stdout and helpers still count (quiet_stdout, a helper left behind), but a crash or hang
// in shutdown is lifecycle.repeated's to report, once, not every check's.
extern std::function<void()> g_after_verdict;

// Runs `body` in a child; the child's stdout and stderr are captured. `quiet_stdout` makes any
// stdout output a failure (the host's stdout may carry JSON).
Outcome Isolated(const Options& options, bool quiet_stdout, const std::function<Outcome()>& body);

// ---------------------------------------------------------------------------------------
// Harness used inside the child.

struct Loaded {
  std::unique_ptr<LoadedPlugin> plugin;
  std::string error;
};

Loaded Load(const Options& options, bool initialize = true);

struct Discovery {
  PluginReport report;
  size_t discover_problems = 0;  // report.problems from discover itself come first
  std::vector<std::string> raw_pci;
  std::map<uint32_t, std::string> raw_types;
  std::string error;
};

Discovery Discover(const LoadedPlugin& p, bool labels, bool topology, bool health);

std::string Problems(const PluginReport& r);

// The problems of the hooks a check is about, after discover's own (which
// discovery.answers_valid reports): the devices they name may be the ones discover lost.
std::string ProblemsAfterDiscover(const Discovery& d);

// The body of most checks: load, initialize, run `fn`; the plugin shuts down after the verdict
// is written (g_after_verdict), so a plugin that crashes in shutdown fails lifecycle.repeated
// once, not every check.
Outcome WithPlugin(const Options& o, const std::function<Outcome(const LoadedPlugin&)>& fn);

// WithPlugin in a child of its own (Isolated).
Outcome RunIn(const Options& o, const std::function<Outcome(const LoadedPlugin&)>& fn,
              bool quiet_stdout = false);

}  // namespace rayaccel::conformance

#endif  // RAYACCEL_CONFORMANCE_CHECK_SUPPORT_H_
