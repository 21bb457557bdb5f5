// What a plugin does to the process that hosts it (the raylet, in-process): its stdout, the
// text it logs, the process's state, its heap, the processes and threads it leaves behind, and
// the signals it sends.
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "conformance/check_support.h"
#include "conformance/checks.h"
#include "model/validate.h"

namespace rayaccel::conformance {

Outcome QuietStdout(const Options& o) {
  return RunIn(
      o,
      [](const LoadedPlugin& p) {
        Discovery d = Discover(p, true, true, true);
        return d.error.empty() ? Outcome::Pass() : Outcome::Fail(d.error);
      },
      /*quiet_stdout=*/true);
}

// Log text and error messages are read by operators: no escape sequences, carriage returns
// or newlines that could colour a terminal or forge a line (the host escapes them anyway).
Outcome CleanText(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    Discovery d = Discover(p, true, true, true);
    std::string error_text = d.error;
    if (p.unclean_log_lines() > 0) {
      return Outcome::Fail(absl::StrCat(p.unclean_log_lines(),
                                        " log line(s) with control characters or invalid UTF-8"));
    }
    if (error_text.find("\\x1b") != std::string::npos ||
        error_text.find("\\n") != std::string::npos ||
        error_text.find("\\r") != std::string::npos) {
      return Outcome::Fail("an error message with control characters: " + error_text);
    }
    return Outcome::Pass();
  });
}

namespace {

// What a plugin shares with the process that hosts it and must leave as it found it.
struct ProcessState {
  std::string cwd;
  mode_t umask = 0;
  std::vector<std::string> signals;  // per signal: "default", "ignored" or "handled"
  std::vector<std::string> std_fds;  // fds 0-2: device and inode, or "closed"

  static ProcessState Now() {
    ProcessState s;
    char buf[PATH_MAX];
    if (getcwd(buf, sizeof(buf)) != nullptr) s.cwd = buf;
    s.umask = ::umask(022);
    ::umask(s.umask);
    for (int sig = 1; sig < NSIG; ++sig) {
      struct sigaction sa {};
      if (sigaction(sig, nullptr, &sa) != 0) {
        s.signals.emplace_back();
        continue;
      }
      s.signals.push_back(sa.sa_handler == SIG_DFL   ? "default"
                          : sa.sa_handler == SIG_IGN ? "ignored"
                                                     : "handled");
    }
    for (int fd = 0; fd < 3; ++fd) {
      struct stat st {};
      s.std_fds.push_back(fstat(fd, &st) != 0 ? std::string("closed")
                                              : absl::StrCat(st.st_dev, ":", st.st_ino));
    }
    return s;
  }
};

}  // namespace

// The working directory, umask, signal dispositions and standard descriptors are the host's:
// a plugin that changes them changes how the raylet runs. Checked around a whole
// initialize/discover/shutdown cycle.
Outcome ProcessStateUntouched(const Options& o) {
  return Isolated(o, false, [&]() -> Outcome {
    ProcessState before = ProcessState::Now();
    {
      Loaded l = Load(o);
      if (l.plugin == nullptr) return Outcome::Fail(l.error);
      Discovery d = Discover(*l.plugin, true, true, true);
      if (!d.error.empty()) return Outcome::Fail(d.error);
    }
    ProcessState after = ProcessState::Now();
    std::vector<std::string> changed;
    if (after.cwd != before.cwd) {
      changed.push_back(
          absl::StrCat("the working directory (", before.cwd, " -> ", after.cwd, ")"));
    }
    if (after.umask != before.umask) {
      changed.push_back(absl::StrFormat("the umask (%04o -> %04o)", before.umask, after.umask));
    }
    for (size_t i = 0; i < before.signals.size() && i < after.signals.size(); ++i) {
      if (before.signals[i] != after.signals[i]) {
        int sig = static_cast<int>(i) + 1;
        changed.push_back(absl::StrCat("signal ", sig, " (", strsignal(sig), ") ",
                                       before.signals[i], " -> ", after.signals[i]));
      }
    }
    for (int fd = 0; fd < 3; ++fd) {
      if (before.std_fds[fd] != after.std_fds[fd]) {
        changed.push_back(absl::StrCat("file descriptor ", fd));
      }
    }
    if (!changed.empty()) {
      return Outcome::Fail("changed the host process's state: " + absl::StrJoin(changed, ", "));
    }
    return Outcome::Pass();
  });
}

Outcome NoLeak(const Options& o) {
  return Isolated(o, false, [&]() -> Outcome {
    auto heap = [] {
      struct mallinfo2 m = mallinfo2();
      return m.uordblks + m.hblkhd;
    };
    auto cycle = [&]() -> std::string {
      Loaded l = Load(o);
      if (l.plugin == nullptr) return l.error;
      return Discover(*l.plugin, true, true, true).error;
    };
    for (int i = 0; i < 3; ++i) {
      if (std::string e = cycle(); !e.empty()) return Outcome::Fail(e);
      Progress();
    }
    size_t before = heap();
    constexpr int kCycles = 40;
    for (int i = 0; i < kCycles; ++i) {
      if (std::string e = cycle(); !e.empty()) return Outcome::Fail(e);
      Progress();
    }
    size_t after = heap();
    constexpr size_t kSlack = 4 << 20;
    if (after > before + kSlack) {
      return Outcome::Fail(absl::StrCat("heap grew by ", (after - before) >> 10, " KiB over ",
                                        kCycles, " initialize/discover/shutdown cycles"));
    }
    return Outcome::Pass();
  });
}

// --- What a plugin does to the process around it.

namespace {

// One lifecycle through the raw table, with a host API of the check's own that stays valid
// after shutdown and counts what arrives then: initialize, discover, labels, topology, health,
// shutdown. The library stays loaded, so that a thread the plugin left running cannot crash
// the check instead of being caught. `between` runs after shutdown returns. Returns why the
// lifecycle itself failed, or "".
struct Lifecycle {
  std::atomic<uint64_t> calls_after_shutdown{0};
  std::atomic<bool> shut{false};
};

std::string RunLifecycle(const Options& o, Lifecycle* seen) {
  setenv("RAYACCEL_NO_DLCLOSE", "1", 1);  // this child's own copy of the environment
  absl::StatusOr<std::unique_ptr<LoadedPlugin>> p = LoadedPlugin::Open(o.plugin_path);
  if (!p.ok()) return std::string(p.status().message());
  const rayaccel_plugin_api& api = (*p)->api();
  static rayaccel_host_api host{};
  host.struct_size = sizeof(host);
  host.host_context = seen;
  host.log = [](void* context, rayaccel_log_level, rayaccel_string) {
    auto* s = static_cast<Lifecycle*>(context);
    if (s->shut.load()) s->calls_after_shutdown.fetch_add(1);
  };
  std::vector<rayaccel_config_entry> entries;
  for (const auto& [key, value] : o.config) {
    entries.push_back(
        {sizeof(rayaccel_config_entry), {key.data(), key.size()}, {value.data(), value.size()}});
  }
  rayaccel_initialize_args args{};
  args.struct_size = sizeof(args);
  args.host = &host;
  args.config = entries.data();
  args.config_count = entries.size();
  ErrorBuffer err;
  rayaccel_status rc = api.initialize(&args, &err.error);
  if (rc != RAYACCEL_STATUS_OK || args.instance == nullptr) {
    return std::string(FromPluginStatus(rc, err.text, "initialize failed").message());
  }
  PluginReport report;
  Collector collector(&report);
  for (auto hook : {api.discover, api.get_labels, api.get_topology, api.get_health}) {
    if (hook != nullptr) hook(args.instance, collector.sink(), &err.error);
  }
  api.shutdown(args.instance, &err.error);
  seen->shut = true;
  // Whatever it started winds down now, or never: a moment for a daemon's second fork.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  p->release();  // kept loaded: its threads may still run its code
  return "";
}

}  // namespace

Outcome QuietAfterShutdown(const Options& o) {
  return Isolated(o, false, [&o]() -> Outcome {
    static Lifecycle seen;
    if (std::string why = RunLifecycle(o, &seen); !why.empty()) return Outcome::Fail(why);
    if (const uint64_t n = seen.calls_after_shutdown.load(); n > 0) {
      return Outcome::Fail(absl::StrCat(
          "stop every thread that calls the host before shutdown returns: the host API was "
          "called ",
          n,
          " time(s) in the 300 ms after shutdown returned, when rayaccel_host_api is no "
          "longer valid (a host that freed it crashes or runs freed code)"));
    }
    return Outcome::Pass();
  });
}

// The processes a plugin starts must be gone when shutdown returns. The check's process is a
// child subreaper, so even a daemon that forks twice and calls setsid stays its descendant.
Outcome NothingLeftBehind(const Options& o) {
  return Isolated(o, false, [&o]() -> Outcome {
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    static Lifecycle seen;
    if (std::string why = RunLifecycle(o, &seen); !why.empty()) return Outcome::Fail(why);
    while (waitpid(-1, nullptr, WNOHANG) > 0) {  // those that ended: gone
    }
    std::vector<std::string> left;
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
      std::ifstream children(task.path() / "children");
      for (std::string pid; children >> pid;) {
        std::ifstream comm("/proc/" + pid + "/comm");
        std::string name;
        std::getline(comm, name);
        left.push_back(absl::StrCat(pid, " (", EscapeControl(name), ")"));
        kill(std::stoi(pid), SIGKILL);
      }
    }
    if (left.empty()) return Outcome::Pass();
    return Outcome::Fail(absl::StrCat(
        "stop and wait for every process the plugin starts before shutdown returns: ", left.size(),
        " outlived it (", absl::StrJoin(left, ", "),
        "), and a daemon (setsid, a second fork) outlives the host too; the suite killed them"));
  });
}

// A signal the plugin sends to its process group reaches the host's other processes (the
// raylet's workers, when it runs in the raylet): a witness in the group reports any it gets.
Outcome GroupUnsignalled(const Options& o) {
  return Isolated(o, false, [&o]() -> Outcome {
    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) return Outcome::Fail("suite: pipe failed");
    const pid_t witness = fork();
    if (witness == 0) {
      // Dies with the check, and holds none of its output open.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      const int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
      dup2(null, 1);
      dup2(null, 2);
      static int out = report[1];
      for (int sig = 1; sig < NSIG; ++sig) {
        if (sig == SIGKILL || sig == SIGSTOP || sig == SIGCHLD) continue;
        signal(sig, [](int s) {
          const char byte = static_cast<char>(s);
          (void)!write(out, &byte, 1);
        });
      }
      (void)!write(out, "", 1);  // ready
      for (;;) pause();
    }
    close(report[1]);
    char ready = 1;
    if (witness < 0 || read(report[0], &ready, 1) != 1 || ready != 0) {
      return Outcome::Fail("suite: the witness process did not start");
    }
    static Lifecycle seen;
    std::string why = RunLifecycle(o, &seen);
    int status = 0;
    const bool ended = waitpid(witness, &status, WNOHANG | WUNTRACED) == witness;
    fcntl(report[0], F_SETFL, O_NONBLOCK);
    std::set<int> got;
    for (char s; read(report[0], &s, 1) == 1;) got.insert(s);
    kill(witness, SIGKILL);
    waitpid(witness, nullptr, 0);
    if (ended && WIFSIGNALED(status)) got.insert(WTERMSIG(status));
    if (ended && WIFSTOPPED(status)) got.insert(WSTOPSIG(status));
    if (!got.empty()) {
      std::vector<std::string> names;
      for (int s : got) names.push_back(absl::StrCat(s, " (", strsignal(s), ")"));
      return Outcome::Fail(absl::StrCat(
          "signal only processes the plugin started, by their pid: it sent signal ",
          absl::StrJoin(names, ", "),
          " to its whole process group (kill(0, ...) or killpg), which in the raylet is the "
          "host's and its workers'"));
    }
    return why.empty() ? Outcome::Pass() : Outcome::Fail(why);
  });
}

}  // namespace rayaccel::conformance
