// Plugin configuration: "plugin.key=value" arguments, config files and the environment.
#ifndef RAYACCEL_REGISTRY_CONFIG_H_
#define RAYACCEL_REGISTRY_CONFIG_H_

#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rayaccel {

// plugin -> key -> value
using PluginConfig = std::map<std::string, std::map<std::string, std::string>>;

// Parses "plugin.key=value" into `config` (replacing an earlier value of the same key).
absl::Status AddConfigAssignment(absl::string_view assignment, PluginConfig* config);

// Reads a config file: one "plugin.key = value" per line, blank lines and '#' comments
// allowed. Errors name the file and line.
absl::StatusOr<PluginConfig> ReadConfigFile(const std::string& path);
// The same on the file's text; `source` names it in errors.
absl::StatusOr<PluginConfig> ParseConfig(absl::string_view text, const std::string& source);

// The RAYACCEL_* entries of this process's environment, as they are now. The registry takes
// this copy before any plugin code runs, so that no plugin's setenv or unsetenv can change
// what another is configured with.
std::vector<std::string> RayaccelEnvironment();

// RAYACCEL_<PLUGIN>_<KEY>=value entries of `environment` for `plugin` ('-' in the plugin name
// reads as '_'); keys come back lower-case: RAYACCEL_SIM_SPEC -> {"spec": ...}. Empty values
// are skipped.
std::map<std::string, std::string> EnvironmentConfig(const std::string& plugin,
                                                     const std::vector<std::string>& environment);

}  // namespace rayaccel

#endif  // RAYACCEL_REGISTRY_CONFIG_H_
