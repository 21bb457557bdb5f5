// initialize and shutdown: with the given configuration, repeatedly, two instances at once,
// without initialize, and a refused request explained.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "conformance/check_support.h"
#include "conformance/checks.h"
#include "model/validate.h"

namespace rayaccel::conformance {

// The gate: the plugin loads, negotiates and initializes with the given configuration. Every
// later check needs this; its failure is reported here, once. (Shutdown, after the verdict, is
// lifecycle.repeated's to judge.)
Outcome Initializes(const Options& o) {
  return RunIn(o, [](const LoadedPlugin&) { return Outcome::Pass(); });
}

Outcome LifecycleRepeated(const Options& o) {
  return Isolated(o, false, [&]() -> Outcome {
    for (int i = 0; i < 3; ++i) {
      Loaded l = Load(o);
      if (l.plugin == nullptr) return Outcome::Fail(absl::StrCat("cycle ", i + 1, ": ", l.error));
    }
    return Outcome::Pass();
  });
}

Outcome TwoInstances(const Options& o) {
  return Isolated(o, false, [&]() -> Outcome {
    // Two instances from one library: both answer, and shutting one down leaves the other.
    Loaded a = Load(o);
    Loaded b = Load(o);
    if (a.plugin == nullptr || b.plugin == nullptr) return Outcome::Fail(a.error + b.error);
    Discovery da = Discover(*a.plugin, false, false, false);
    Discovery db = Discover(*b.plugin, false, false, false);
    if (!da.error.empty() || !db.error.empty()) return Outcome::Fail(da.error + db.error);
    if (da.report.devices.size() != db.report.devices.size()) {
      return Outcome::Fail("two instances report different devices");
    }
    a.plugin.reset();  // shutdown, and dlclose of one reference
    Discovery again = Discover(*b.plugin, false, false, false);
    if (!again.error.empty()) return Outcome::Fail("after the other's shutdown: " + again.error);
    if (again.report.devices.size() != db.report.devices.size()) {
      return Outcome::Fail("shutting one instance down changed the other's devices");
    }
    return Outcome::Pass();
  });
}

// initialize_args.config is valid for the call only. A plugin that keeps the host's pointers
// instead of copying works in a host that happens to keep them (as this suite's options do)
// and reads freed memory in one that does not (the registry). So: one instance whose
// configuration values are overwritten, same length, once initialize returns, against one whose
// are kept; their answers must agree.
Outcome ConfigCopied(const Options& o) {
  return Isolated(o, false, [&]() -> Outcome {
    std::map<std::string, std::string> config = o.config;
    if (config.empty()) return Outcome::Skip("no configuration given (--config)");
    absl::StatusOr<std::unique_ptr<LoadedPlugin>> scribbled = LoadedPlugin::Open(o.plugin_path);
    if (!scribbled.ok()) return Outcome::Fail(std::string(scribbled.status().message()));
    if (absl::Status st = (*scribbled)->Initialize(config); !st.ok()) {
      return Outcome::Fail(std::string(st.message()));
    }
    for (auto& [key, value] : config) {  // the host's copies, after the call: any other bytes
      for (char& c : value) c = c == 'x' ? 'y' : 'x';
    }
    Loaded kept = Load(o);
    if (kept.plugin == nullptr) return Outcome::Fail(kept.error);
    Discovery a = Discover(**scribbled, true, false, false);
    Discovery b = Discover(*kept.plugin, true, false, false);
    auto same = [](const Device& x, const Device& y) {
      return x.id == y.id && x.name == y.name && x.accelerator_type == y.accelerator_type &&
             x.architecture == y.architecture && x.memory_bytes == y.memory_bytes &&
             x.pci_bus_id == y.pci_bus_id;
    };
    const bool agree = a.error == b.error && a.report.labels == b.report.labels &&
                       std::equal(a.report.devices.begin(), a.report.devices.end(),
                                  b.report.devices.begin(), b.report.devices.end(), same);
    if (agree) return Outcome::Pass();
    std::string what = a.error != b.error
                           ? absl::StrCat("discover: \"", EscapeControl(a.error),
                                          "\" instead of \"", EscapeControl(b.error), "\"")
                           : "its devices or labels differ";
    return Outcome::Fail(absl::StrCat(
        "copy the configuration in initialize: initialize_args.config is valid for the call "
        "only, and this plugin's answers changed once the host overwrote its copies of the "
        "values after initialize returned (",
        what,
        "); a host that frees them (the registry) "
        "makes the plugin read freed memory"));
  });
}

Outcome ShutdownWithoutInitialize(const Options& o) {
  return Isolated(o, false, [&]() -> Outcome {
    Loaded l = Load(o, /*initialize=*/false);
    if (l.plugin == nullptr) return Outcome::Fail(l.error);
    ErrorBuffer err;
    rayaccel_status rc = l.plugin->api().shutdown(nullptr, &err.error);
    return Outcome::Pass(rc == RAYACCEL_STATUS_OK ? "accepted" : "refused with a status");
  });
}

Outcome FailuresExplained(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    if (p.api().prepare_allocation == nullptr) return Outcome::Skip("no prepare_allocation hook");
    // A device index nobody reported must be refused, with a code and a message.
    auto env = p.PrepareAllocation({0xFFFFFFF0u});
    if (env.ok()) return Outcome::Fail("prepare_allocation accepted device 4294967280");
    if (env.status().message().find("(no message)") != absl::string_view::npos) {
      return Outcome::Fail("prepare_allocation failed without a message");
    }
    return Outcome::Pass(std::string(env.status().message()));
  });
}

}  // namespace rayaccel::conformance
