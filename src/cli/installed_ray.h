// The Ray that `ray start` on this host would run, found without starting it: which Python,
// where its `ray` package is, its version, and the unit-instance resources its raylet counts
// by default.
#ifndef RAYACCEL_CLI_INSTALLED_RAY_H_
#define RAYACCEL_CLI_INSTALLED_RAY_H_

#include <string>

#include "absl/status/statusor.h"

namespace rayaccel::cli {

struct InstalledRay {
  std::string python;       // the interpreter that imports it
  std::string package_dir;  // .../site-packages/ray
  std::string version;      // "2.60.0"
};

// The Python to ask: RAYACCEL_RAY_PYTHON, else the interpreter named by the `#!` line of `ray`
// on PATH (pip's launcher), else the build tree's environment beside this program
// (`<build>/bin/rayaccel` -> `<build>/venv/bin/python3`), else `python3` on PATH. That Python
// is asked where `ray` is (importlib's find_spec: Ray itself is not imported), within a few
// seconds.
absl::StatusOr<InstalledRay> FindInstalledRay();

// Ray's own list of unit-instance resources, and where it came from.
struct RayUnitInstances {
  std::string list;    // "neuron_cores,TPU,..."
  std::string source;  // said on stderr: which Ray, or the fallback and why
};

// What Ray would use: RAY_custom_unit_instance_resources when this environment sets it (Ray
// reads it from there), else the default compiled into the installed Ray's _raylet.so, else
// the default of the Ray version rayaccel is tested with.
RayUnitInstances FindRayUnitInstances();

}  // namespace rayaccel::cli

#endif  // RAYACCEL_CLI_INSTALLED_RAY_H_
