#include "registry/config.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

extern char** environ;

namespace rayaccel {

absl::Status AddConfigAssignment(absl::string_view assignment, PluginConfig* config) {
  size_t eq = assignment.find('=');
  size_t dot = assignment.find('.');
  if (eq == absl::string_view::npos || dot == absl::string_view::npos || dot > eq) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", assignment, "\": expected PLUGIN.KEY=VALUE, e.g. sim.spec=spec.json"));
  }
  absl::string_view plugin = absl::StripAsciiWhitespace(assignment.substr(0, dot));
  absl::string_view key = absl::StripAsciiWhitespace(assignment.substr(dot + 1, eq - dot - 1));
  absl::string_view value = absl::StripAsciiWhitespace(assignment.substr(eq + 1));
  if (plugin.empty() || key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", assignment, "\": plugin and key must not be empty"));
  }
  (*config)[std::string(plugin)][std::string(key)] = std::string(value);
  return absl::OkStatus();
}

absl::StatusOr<PluginConfig> ParseConfig(absl::string_view text, const std::string& source) {
  PluginConfig config;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    if (absl::Status st = AddConfigAssignment(line, &config); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ":", number, ": ", st.message()));
    }
  }
  return config;
}

absl::StatusOr<PluginConfig> ReadConfigFile(const std::string& path) {
  // A folder opens as a stream whose first read fails (with an exception, were they on): a
  // regular file (or a pipe, /dev/null) only, read with plain reads.
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {  // a file named by the caller: a bad argument
    return absl::InvalidArgumentError(
        absl::StrCat("config file ", path, ": cannot be read: ", std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("config file ", path, ": is a folder"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("config file ", path, ": cannot be read"));
  std::string text;
  char buffer[4096];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    text.append(buffer, static_cast<size_t>(in.gcount()));
    if (text.size() > (size_t{1} << 20)) {
      return absl::InvalidArgumentError(absl::StrCat("config file ", path, ": over 1 MiB"));
    }
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat("config file ", path, ": read failed"));
  return ParseConfig(text, path);
}

std::vector<std::string> RayaccelEnvironment() {
  std::vector<std::string> out;
  for (char** env = environ; env != nullptr && *env != nullptr; ++env) {
    if (absl::StartsWith(*env, "RAYACCEL_")) out.emplace_back(*env);
  }
  return out;
}

std::map<std::string, std::string> EnvironmentConfig(const std::string& plugin,
                                                     const std::vector<std::string>& environment) {
  std::string prefix = "RAYACCEL_";
  for (char c : plugin) prefix.push_back(c == '-' ? '_' : absl::ascii_toupper(c));
  prefix.push_back('_');
  std::map<std::string, std::string> out;
  for (const std::string& text : environment) {
    absl::string_view entry(text);
    size_t eq = entry.find('=');
    if (eq == absl::string_view::npos || !absl::StartsWith(entry, prefix)) continue;
    std::string key = absl::AsciiStrToLower(entry.substr(prefix.size(), eq - prefix.size()));
    // An empty value reads as unset, as `VAR= command` is the usual way to clear one.
    if (!key.empty() && eq + 1 < entry.size()) out[key] = std::string(entry.substr(eq + 1));
  }
  return out;
}

}  // namespace rayaccel
