// Tier 5: the plugin inside a real Ray on this host. Ray is Python, so the checks themselves are
// python/rayaccel/_certify.py, run once for all of them with a Python that has Ray; each check
// here reads its entry of that run's JSON.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "conformance/checks.h"
#include "ray/unit_instances.h"
#include "util/json.h"

extern char** environ;

namespace rayaccel::conformance {
namespace {

struct RayRun {
  // Set when the run could not happen or failed as a whole: every check gets it.
  std::optional<Outcome> all;
  // Set when the run ended before every check: what a check it did not reach fails with.
  std::string cut_short;
  std::optional<json::Value> report;
  RayVersions versions;
};

std::mutex g_mu;
std::optional<RayRun> g_run;

bool Executable(const std::string& path) {
  return !path.empty() && access(path.c_str(), X_OK) == 0;
}

std::string SelfDir() {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return ".";
  std::string path(exe, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

// --ray-python, else RAYACCEL_RAY_PYTHON, else the build tree's environment beside this program
// (<build>/bin -> <build>/venv), else python3 on PATH.
std::string FindPython(const Options& o) {
  if (!o.ray_python.empty()) return o.ray_python;
  if (const char* env = std::getenv("RAYACCEL_RAY_PYTHON"); env != nullptr && *env) return env;
  std::string dir = SelfDir();
  std::string venv = dir.substr(0, dir.rfind('/')) + "/venv/bin/python3";
  if (Executable(venv)) return venv;
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    for (absl::string_view d : absl::StrSplit(path, ':', absl::SkipEmpty())) {
      std::string candidate = absl::StrCat(d, "/python3");
      if (Executable(candidate)) return candidate;
    }
  }
  return "";
}

// Runs `argv`, its stdout and stderr into `log`, for at most `timeout`: the exit status, or -1
// when it ran past it (then it and its process group are killed).
int RunLogged(const std::vector<std::string>& argv, const std::string& log,
              std::chrono::seconds timeout) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);  // its own group: Ray's processes too
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int err = posix_spawn(&pid, argv[0].c_str(), &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (err != 0) return -2;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) return -2;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    usleep(50 * 1000);
  }
  // Whatever Ray left in the group (a raylet the run could not stop) goes with it.
  kill(-pid, SIGKILL);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string Tail(const std::string& path, size_t bytes) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  if (s.size() > bytes) s = "..." + s.substr(s.size() - bytes);
  for (char& c : s) {
    if (c == '\n') c = ' ';
  }
  return std::string(absl::StripAsciiWhitespace(s));
}

RayRun Start(const Options& o) {
  RayRun run;
  if (!o.ray) {
    run.all = Outcome::Skip("not run: tier 5's checks start a Ray of their own with --tier 5");
    return run;
  }
  const std::string install = absl::StrCat(
      "install Ray and rayaccel's package in it (python3 -m pip install ray==", kTestedRayVersion,
      " and `pip install ./python` of rayaccel), or name one with --ray-python");
  std::string python = FindPython(o);
  run.versions.python_path = python;
  if (!Executable(python)) {
    run.all = Outcome::Skip("not run: no Python found; " + install);
    return run;
  }
  char dir_template[] = "/tmp/rayaccel-tier5-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    run.all = Outcome::Fail(absl::StrCat("mkdtemp: ", std::strerror(errno)));
    return run;
  }
  const std::string dir = dir_template;
  const std::string log = dir + "/certify.log";
  // The run's folder goes, whatever happens: Ray's sessions, its HOME, the log.
  struct RemoveAfter {
    std::string dir;
    ~RemoveAfter() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } remove_after{dir};
  // Ray and rayaccel's package in that Python?
  int has_ray = RunLogged({python, "-c", "import ray, rayaccel; print(ray.__version__)"}, log,
                          std::chrono::seconds(60));
  if (has_ray != 0) {
    run.all = Outcome::Skip(absl::StrCat("not run: ", python, " has no Ray with rayaccel (",
                                         Tail(log, 200), "); ", install));
    return run;
  }
  std::string rayaccel = o.rayaccel.empty() ? SelfDir() + "/rayaccel" : o.rayaccel;
  std::vector<std::string> argv = {python,
                                   "-m",
                                   "rayaccel._certify",
                                   "--plugin",
                                   o.plugin_path,
                                   "--rayaccel",
                                   rayaccel,
                                   "--timeout",
                                   std::to_string(o.timeout_seconds),
                                   "--out",
                                   dir + "/certify.json",
                                   "--root",
                                   dir + "/run"};
  for (const auto& [key, value] : o.config) {
    argv.push_back("--config");
    argv.push_back(key + "=" + value);
  }
  if (o.perf) argv.push_back("--perf");
  // Ray's start and five checks, each bounded by its own timeouts; the whole run too.
  const auto limit = std::chrono::seconds(300 + 40 * o.timeout_seconds);
  int rc = RunLogged(argv, log, limit);
  std::ifstream in(dir + "/certify.json");
  std::stringstream text;
  text << in.rdbuf();
  json::ParseError error;
  std::optional<json::Value> report = json::Parse(text.str(), &error);
  const std::string ended = rc == -1 ? absl::StrCat("the Ray checks ran past ", limit.count(), " s")
                                     : absl::StrCat("the Ray checks exited ", rc);
  if (!report || report->Find("checks") == nullptr) {
    run.all = Outcome::Fail(absl::StrCat(ended, ": ", Tail(log, 600)));
  } else {
    // A run cut short (past its time, or dying) still says what it found; the checks it did
    // not reach say why.
    if (rc != 0) run.cut_short = absl::StrCat("not run: ", ended, " (", Tail(log, 300), ")");
    run.report = std::move(report);
    if (const json::Value* v = run.report->Find("ray_version"); v && v->is_string()) {
      run.versions.ray = v->string();
    }
    if (const json::Value* v = run.report->Find("python"); v && v->is_string()) {
      run.versions.python = v->string();
    }
  }
  return run;
}

const RayRun& Run(const Options& o) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_run) g_run = Start(o);
  return *g_run;
}

Outcome Entry(const Options& o, const std::string& name) {
  const RayRun& run = Run(o);
  if (run.all) return *run.all;
  const json::Value* entry = run.report->Find("checks")->Find(name);
  if (entry == nullptr) {
    return Outcome::Fail(run.cut_short.empty() ? "the Ray checks said nothing of " + name
                                               : run.cut_short);
  }
  const json::Value* status = entry->Find("status");
  const json::Value* message = entry->Find("message");
  std::string text = message != nullptr && message->is_string() ? message->string() : "";
  Outcome out = !status || !status->is_string() ? Outcome::Fail("no status: " + text)
                : status->string() == "pass"    ? Outcome::Pass(text)
                : status->string() == "skip"    ? Outcome::Skip(text)
                                                : Outcome::Fail(text);
  if (const json::Value* figures = entry->Find("figures");
      figures != nullptr && figures->type() == json::Value::Type::kObject) {
    for (const auto& [figure, value] : figures->members()) {
      if (value.type() == json::Value::Type::kNumber)
        out.figures.push_back({figure, value.number()});
    }
  }
  return out;
}

}  // namespace

RayVersions RayRunVersions() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_run ? g_run->versions : RayVersions{};
}

Outcome RayStartAccepted(const Options& o) { return Entry(o, "ray.start_accepted"); }
Outcome RayOneDevicePerTask(const Options& o) { return Entry(o, "ray.one_device_per_task"); }
Outcome RayDistributedWorkload(const Options& o) { return Entry(o, "ray.distributed_workload"); }
Outcome RayRecovery(const Options& o) { return Entry(o, "ray.recovery"); }
Outcome RayPerf(const Options& o) { return Entry(o, "ray.perf"); }

}  // namespace rayaccel::conformance
