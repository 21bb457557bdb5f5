#include "cli/installed_ray.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ray/unit_instances.h"

extern char** environ;

namespace rayaccel::cli {
namespace {

constexpr auto kAskTimeout = std::chrono::seconds(10);

// Where `ray` is, without importing it (importlib finds the package), and its version.
constexpr char kAskPython[] =
    "import importlib.util as u, importlib.metadata as m\n"
    "s = u.find_spec('ray')\n"
    "print(s.submodule_search_locations[0] if s and s.submodule_search_locations else '')\n"
    "print(m.version('ray') if s else '')\n";

bool IsExecutable(const std::string& path) {
  return !path.empty() && access(path.c_str(), X_OK) == 0;
}

std::string OnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", name);
    if (IsExecutable(candidate)) return candidate;
  }
  return "";
}

// The interpreter of a `#!/path/python` launcher such as pip writes for `ray`.
std::string ShebangInterpreter(const std::string& script) {
  std::ifstream in(script, std::ios::binary);
  std::string line;
  if (!std::getline(in, line) || line.rfind("#!", 0) != 0) return "";
  std::vector<std::string> words =
      absl::StrSplit(absl::StripAsciiWhitespace(line.substr(2)), ' ', absl::SkipEmpty());
  if (words.empty() || words[0].find("python") == std::string::npos) return "";
  return IsExecutable(words[0]) ? words[0] : "";
}

std::string BuildTreePython() {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "";
  std::string exe(self, static_cast<size_t>(n));
  std::string bin = exe.substr(0, exe.rfind('/'));
  std::string candidate = bin.substr(0, bin.rfind('/')) + "/venv/bin/python3";
  return IsExecutable(candidate) ? candidate : "";
}

// Runs `python -c kAskPython` and returns its standard output; killed past kAskTimeout.
absl::StatusOr<std::string> Ask(const std::string& python) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError(std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  std::vector<char*> argv = {const_cast<char*>(python.c_str()), const_cast<char*>("-c"),
                             const_cast<char*>(kAskPython), nullptr};
  pid_t pid = -1;
  int err = posix_spawn(&pid, python.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  if (err != 0) {
    close(out[0]);
    return absl::UnavailableError(absl::StrCat(python, ": ", std::strerror(err)));
  }
  std::string text;
  auto deadline = std::chrono::steady_clock::now() + kAskTimeout;
  bool timed_out = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      timed_out = r == 0;
      break;
    }
    char buf[4096];
    ssize_t n = read(out[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (text.size() < 65536) text.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) return absl::DeadlineExceededError(absl::StrCat(python, " did not answer"));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::UnavailableError(absl::StrCat(python, " failed to say where ray is"));
  }
  return text;
}

}  // namespace

absl::StatusOr<InstalledRay> FindInstalledRay() {
  std::string python;
  if (const char* chosen = std::getenv("RAYACCEL_RAY_PYTHON"); chosen != nullptr && *chosen) {
    python = chosen;
    if (!IsExecutable(python)) {
      return absl::NotFoundError(
          absl::StrCat("RAYACCEL_RAY_PYTHON=", python, " is not an executable"));
    }
  }
  if (python.empty()) python = ShebangInterpreter(OnPath("ray"));
  if (python.empty()) python = BuildTreePython();
  if (python.empty()) python = OnPath("python3");
  if (python.empty())
    return absl::NotFoundError("no Python with Ray found (set RAYACCEL_RAY_PYTHON)");
  absl::StatusOr<std::string> said = Ask(python);
  if (!said.ok()) return said.status();
  std::vector<std::string> lines = absl::StrSplit(*said, '\n');
  if (lines.size() < 2 || lines[0].empty()) {
    return absl::NotFoundError(absl::StrCat(python, " has no ray package"));
  }
  return InstalledRay{python, lines[0], lines[1]};
}

RayUnitInstances FindRayUnitInstances() {
  if (const char* set = std::getenv(kRayUnitInstanceVariable); set != nullptr) {
    return {set, absl::StrCat("Ray's list from this environment's ", kRayUnitInstanceVariable)};
  }
  absl::StatusOr<InstalledRay> ray = FindInstalledRay();
  std::string why;
  if (ray.ok()) {
    absl::StatusOr<std::string> list =
        ReadRayletUnitInstanceDefault(ray->package_dir + "/_raylet.so");
    if (list.ok()) {
      return {*list, absl::StrCat("Ray ", ray->version, "'s default, read from ", ray->package_dir,
                                  "/_raylet.so")};
    }
    why = std::string(list.status().message());
  } else {
    why = std::string(ray.status().message());
  }
  return {kTestedRayCustomUnitInstances,
          absl::StrCat("the default of Ray ", kTestedRayVersion,
                       ", which rayaccel is tested with (the installed Ray's could not be read: ",
                       why, ")")};
}

}  // namespace rayaccel::cli
