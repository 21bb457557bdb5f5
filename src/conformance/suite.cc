#include "conformance/suite.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "loader/collector.h"
#include "loader/elf_file.h"
#include "loader/plugin_loader.h"
#include "model/validate.h"
#include "ray/accelerator_type.h"
#include "ray/ray_mapping.h"
#include "rayaccel/transport.h"
#include "transport/descriptor.h"
#include "transport/table.h"

namespace rayaccel::conformance {
namespace {

// ---------------------------------------------------------------------------------------
// Isolation: a check's body runs in a forked child that loads the plugin itself.

void WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

std::string Tail(const std::string& text, size_t max) {
  std::string t = text.size() > max ? "..." + text.substr(text.size() - max) : text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t;
}

// Runs `body` in a child; the child's stdout and stderr are captured. `quiet_stdout` makes any
// stdout output a failure (the host's stdout may carry JSON).
// In a check's child: the result pipe, for Progress().
int g_progress_fd = -1;

// A check that runs many cycles says each one is done: the parent's timeout then runs per
// cycle, not for all of them together (a slow but working plugin is not "hung").
void Progress() {
  if (g_progress_fd >= 0) WriteAll(g_progress_fd, "+");
}

// In a check's child: what runs once the check's verdict is written (the plugin's shutdown).
// Its stdout and helpers still count (quiet_stdout, a helper left behind), but a crash or hang
// in shutdown is lifecycle.repeated's to report, once, not every check's.
std::function<void()> g_after_verdict;

Outcome Isolated(const Options& options, bool quiet_stdout, const std::function<Outcome()>& body) {
  // Close-on-exec, so that a helper the plugin starts cannot hold the pipes open.
  int result_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  auto close_all = [&] {
    for (int* p : {result_pipe, out_pipe, err_pipe}) {
      for (int i = 0; i < 2; ++i) {
        if (p[i] >= 0) close(p[i]);
      }
    }
  };
  if (pipe2(result_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0 ||
      pipe2(err_pipe, O_CLOEXEC) != 0) {
    close_all();
    return Outcome::Fail(absl::StrCat("suite: pipe: ", std::strerror(errno)));
  }
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    close_all();
    return Outcome::Fail(absl::StrCat("suite: fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    setpgid(0, 0);  // a group of its own: a plugin signalling its group reaches only the check
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    close(result_pipe[0]);
    close(out_pipe[0]);
    close(err_pipe[0]);
    g_progress_fd = result_pipe[1];
    Outcome o;
    try {
      o = body();
    } catch (const std::exception& e) {
      o = Outcome::Fail(std::string("a C++ exception escaped a hook: ") + e.what());
    } catch (...) {
      o = Outcome::Fail("a C++ exception escaped a hook");
    }
    std::fflush(stdout);
    const char* tag = o.status == Outcome::Status::kPass   ? "P"
                      : o.status == Outcome::Status::kSkip ? "S"
                      : o.status == Outcome::Status::kWarn ? "W"
                                                           : "F";
    std::string figures;
    for (const Figure& f : o.figures) absl::StrAppend(&figures, "\x1e", f.name, "=", f.value);
    WriteAll(result_pipe[1], tag + o.message + figures);
    if (g_after_verdict) {
      try {
        g_after_verdict();
      } catch (...) {
      }
    }
    std::fflush(stdout);
    _exit(0);
  }
  setpgid(pid, pid);
  close(result_pipe[1]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  std::string result, out, err;
  pollfd fds[3] = {{result_pipe[0], POLLIN, 0}, {out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[3] = {&result, &out, &err};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(options.timeout_seconds);
  int open_fds = 3;
  bool timed_out = false;
  bool held_open = false;  // the check ended, but a process it left keeps its output open
  std::optional<std::chrono::steady_clock::time_point> exited_at;
  while (open_fds > 0) {
    auto now = std::chrono::steady_clock::now();
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    // Notice the check's own exit (without reaping it, so its group id stays ours): output
    // still open 200 ms later belongs to something it left running.
    siginfo_t info{};
    if (!exited_at &&
        waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == pid) {
      exited_at = now;
    }
    if (exited_at && now - *exited_at > std::chrono::milliseconds(200)) {
      held_open = true;
      kill(-pid, SIGKILL);
      break;
    }
    if (poll(fds, 3, static_cast<int>(std::min<int64_t>(left.count(), 50))) < 0 && errno != EINTR) {
      timed_out = true;  // cannot watch the child any more: treat as hung
      break;
    }
    for (int i = 0; i < 3; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP)) == 0) continue;
      char buf[4096];
      ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0 && i == 0 && result.find_first_not_of('+') == std::string::npos && buf[0] == '+') {
        // Progress from a cycling check: the next cycle gets a whole timeout of its own.
        deadline = now + std::chrono::seconds(options.timeout_seconds);
      }
      if (n > 0) {
        if (sinks[i]->size() < (1 << 20)) sinks[i]->append(buf, static_cast<size_t>(n));
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  if (timed_out) kill(-pid, SIGKILL);
  for (pollfd& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  // The child closed its pipes; give it until the deadline to exit, then kill it.
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      timed_out = true;
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    usleep(2000);
  }
  // Helpers the plugin started outlive nothing: the rest of the check's group goes too. (The
  // group outlives its leader while members remain, so this is safe after the wait.)
  kill(-pid, SIGKILL);
  result.erase(0, std::min(result.size(), result.find_first_not_of('+')));  // progress marks
  // A verdict was written before the plugin's shutdown: a crash or hang after it is shutdown's.
  const bool verdict = !result.empty();
  if (timed_out && !verdict) {
    return Outcome::Fail(
        absl::StrCat("hung: no answer within ", options.timeout_seconds, " s (killed)"));
  }
  if (held_open) {
    return Outcome::Fail(
        "left a process running that holds the check's stdout or stderr open (killed): a "
        "plugin must not leave helpers or daemons behind");
  }
  if (WIFSIGNALED(status) && !verdict) {
    int sig = WTERMSIG(status);
    std::string why =
        sig == SIGKILL
            ? "was killed with SIGKILL, not by the suite (the kernel's out-of-memory killer "
              "sends this)"
            : absl::StrCat("crashed with signal ", sig, " (", strsignal(sig), ")");
    if (err.find("terminate called") != std::string::npos) {
      why += ": a C++ exception escaped a hook";
    }
    if (!err.empty()) why += "; stderr: " + Tail(err, 300);
    return Outcome::Fail(why);
  }
  if (result.empty()) {
    return Outcome::Fail(absl::StrCat("the plugin ended the process (exit status ",
                                      WIFEXITED(status) ? WEXITSTATUS(status) : -1, ")"));
  }
  if (quiet_stdout && !out.empty()) {
    return Outcome::Fail(absl::StrCat("wrote ", out.size(), " bytes to stdout (\"", Tail(out, 60),
                                      "\"); plugins must never write there"));
  }
  Outcome o;
  o.status = result[0] == 'P'   ? Outcome::Status::kPass
             : result[0] == 'S' ? Outcome::Status::kSkip
             : result[0] == 'W' ? Outcome::Status::kWarn
                                : Outcome::Status::kFail;
  std::vector<std::string> parts = absl::StrSplit(result.substr(1), '\x1e');
  o.message = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    Figure f;
    f.name = parts[i].substr(0, eq);
    if (eq != std::string::npos && absl::SimpleAtod(parts[i].substr(eq + 1), &f.value)) {
      o.figures.push_back(f);
    }
  }
  return o;
}

// ---------------------------------------------------------------------------------------
// Harness used inside the child.

struct Loaded {
  std::unique_ptr<LoadedPlugin> plugin;
  std::string error;
};

Loaded Load(const Options& options, bool initialize = true) {
  Loaded l;
  absl::StatusOr<std::unique_ptr<LoadedPlugin>> p = LoadedPlugin::Open(options.plugin_path);
  if (!p.ok()) {
    l.error = absl::StrCat("does not load: ", p.status().message());
    return l;
  }
  if (initialize) {
    if (absl::Status st = (*p)->Initialize(options.config); !st.ok()) {
      l.error = std::string(st.message());
      return l;
    }
  }
  l.plugin = *std::move(p);
  return l;
}

// Forwards every sink call to a Collector, recording the raw strings of add_device first (the
// collector stores them normalised).
class Recorder {
 public:
  explicit Recorder(const Collector& collector) : inner_(*collector.sink()) {
    sink.struct_size = sizeof(sink);
    sink.host_context = this;
    sink.add_device = [](void* ctx, const rayaccel_device_info* d) {
      auto* self = static_cast<Recorder*>(ctx);
      self->Record(d);
      return self->inner_.add_device(self->inner_.host_context, d);
    };
    sink.add_attribute = [](void* ctx, const rayaccel_attribute* a) {
      auto* self = static_cast<Recorder*>(ctx);
      return self->inner_.add_attribute(self->inner_.host_context, a);
    };
    sink.add_label = [](void* ctx, rayaccel_string k, rayaccel_string v) {
      auto* self = static_cast<Recorder*>(ctx);
      return self->inner_.add_label(self->inner_.host_context, k, v);
    };
    sink.add_link = [](void* ctx, const rayaccel_link* l) {
      auto* self = static_cast<Recorder*>(ctx);
      return self->inner_.add_link(self->inner_.host_context, l);
    };
    sink.add_domain = [](void* ctx, const rayaccel_domain* d) {
      auto* self = static_cast<Recorder*>(ctx);
      return self->inner_.add_domain(self->inner_.host_context, d);
    };
    sink.set_health = [](void* ctx, uint32_t i, rayaccel_health h, rayaccel_string r) {
      auto* self = static_cast<Recorder*>(ctx);
      return self->inner_.set_health(self->inner_.host_context, i, h, r);
    };
    sink.set_env = [](void* ctx, rayaccel_string n, rayaccel_string v) {
      auto* self = static_cast<Recorder*>(ctx);
      return self->inner_.set_env(self->inner_.host_context, n, v);
    };
    sink.last_refusal = [](void* ctx) {
      auto* self = static_cast<Recorder*>(ctx);
      return self->inner_.last_refusal(self->inner_.host_context);
    };
  }
  rayaccel_sink sink{};
  std::vector<std::string> pci_bus_ids;               // one per add_device call
  std::map<uint32_t, std::string> accelerator_types;  // by device index, as sent

 private:
  static std::string Text(rayaccel_string s) {
    return s.data != nullptr && s.size <= kMaxStringBytes ? std::string(s.data, s.size) : "";
  }
  void Record(const rayaccel_device_info* d) {
    bool pci = d != nullptr && RAYACCEL_HAS_FIELD(d, rayaccel_device_info, pci_bus_id);
    bool type = d != nullptr && RAYACCEL_HAS_FIELD(d, rayaccel_device_info, accelerator_type);
    pci_bus_ids.push_back(pci ? Text(d->pci_bus_id) : "");
    if (type) accelerator_types.emplace(d->index, Text(d->accelerator_type));
  }
  rayaccel_sink inner_;
};

using Hook = rayaccel_status (*)(rayaccel_plugin_instance*, const rayaccel_sink*, rayaccel_error*);

// Calls a query hook; a non-OK status is a problem unless it passes a refusal back.
std::string Call(const LoadedPlugin& p, Hook hook, const rayaccel_sink* sink, const char* what,
                 const Collector& collector) {
  ErrorBuffer err;
  rayaccel_status rc = hook(p.instance(), sink, &err.error);  // exceptions: see Isolated
  if (rc == RAYACCEL_STATUS_OK) return "";
  if (rc == RAYACCEL_STATUS_INVALID_ARGUMENT && collector.refused_any() && err.text[0] == '\0') {
    return "";
  }
  return std::string(FromPluginStatus(rc, err.text, absl::StrCat(what, " failed")).message());
}

struct Discovery {
  PluginReport report;
  size_t discover_problems = 0;  // report.problems from discover itself come first
  std::vector<std::string> raw_pci;
  std::map<uint32_t, std::string> raw_types;
  std::string error;
};

Discovery Discover(const LoadedPlugin& p, bool labels, bool topology, bool health) {
  Discovery d;
  Collector collector(&d.report);
  Recorder recorder(collector);
  const rayaccel_plugin_api& api = p.api();
  d.error = Call(p, api.discover, &recorder.sink, "discover", collector);
  d.discover_problems = d.report.problems.size();
  if (d.error.empty() && labels && api.get_labels != nullptr) {
    d.error = Call(p, api.get_labels, &recorder.sink, "get_labels", collector);
  }
  if (d.error.empty() && topology && api.get_topology != nullptr) {
    d.error = Call(p, api.get_topology, &recorder.sink, "get_topology", collector);
  }
  if (d.error.empty() && health && api.get_health != nullptr) {
    d.error = Call(p, api.get_health, &recorder.sink, "get_health", collector);
  }
  d.raw_pci = recorder.pci_bus_ids;
  d.raw_types = recorder.accelerator_types;
  return d;
}

std::string Problems(const PluginReport& r) { return absl::StrJoin(r.problems, "; "); }

// The problems of the hooks a check is about, after discover's own (which
// discovery.answers_valid reports): the devices they name may be the ones discover lost.
std::string ProblemsAfterDiscover(const Discovery& d) {
  std::vector<std::string> own(
      d.report.problems.begin() + static_cast<std::ptrdiff_t>(d.discover_problems),
      d.report.problems.end());
  std::string text = absl::StrJoin(own, "; ");
  if (d.discover_problems > 0) {
    text = absl::StrCat(text, text.empty() ? "" : " ",
                        "(discover's own answers were refused too: discovery.answers_valid says "
                        "why)");
  }
  return text;
}

// The body of most checks: load, initialize, run `fn`; the plugin shuts down after the verdict
// is written (g_after_verdict), so a plugin that crashes in shutdown fails lifecycle.repeated
// once, not every check.
Outcome WithPlugin(const Options& o, const std::function<Outcome(const LoadedPlugin&)>& fn) {
  Loaded l = Load(o);
  if (l.plugin == nullptr) return Outcome::Fail(l.error);
  Outcome outcome = fn(*l.plugin);
  std::shared_ptr<LoadedPlugin> plugin = std::move(l.plugin);
  g_after_verdict = [plugin]() mutable { plugin.reset(); };
  return outcome;
}

Outcome RunIn(const Options& o, const std::function<Outcome(const LoadedPlugin&)>& fn,
              bool quiet_stdout = false) {
  return Isolated(o, quiet_stdout, [&] { return WithPlugin(o, fn); });
}

// ---------------------------------------------------------------------------------------
// The checks.

Outcome ExportsOnlyEntry(const Options& o) {
  absl::StatusOr<std::vector<std::string>> symbols = ExportedSymbols(o.plugin_path);
  if (!symbols.ok()) return Outcome::Fail(std::string(symbols.status().message()));
  std::vector<std::string> extra;
  bool entry = false;
  for (const std::string& s : *symbols) {
    if (s == RAYACCEL_PLUGIN_ENTRY_SYMBOL) {
      entry = true;
    } else {
      extra.push_back(s);
    }
  }
  if (!entry) return Outcome::Fail("rayaccel_plugin_entry is not exported");
  if (!extra.empty()) {
    size_t cxx = std::count_if(extra.begin(), extra.end(),
                               [](const std::string& s) { return s.rfind("_Z", 0) == 0; });
    if (extra.size() > 8) extra.resize(8), extra.push_back("...");
    return Outcome::Fail(
        absl::StrCat("exports more than its entry point (", cxx > 0 ? "C++ symbols included: " : "",
                     absl::StrJoin(extra, ", "), "); use hidden visibility and a version script"));
  }
  return Outcome::Pass();
}

// The registry's own rule (CheckPermissions): the file, its folder and every folder its
// RUNPATH/RPATH names must be writable only by their owner, who must be root or the user.
Outcome FilesTrusted(const Options& o) {
  absl::Status ok = CheckPermissions(o.plugin_path);
  if (ok.ok()) return Outcome::Pass();
  if (absl::IsPermissionDenied(ok)) {
    return Outcome::Fail(absl::StrCat(
        "make every folder the plugin and its libraries load from writable only by its owner "
        "(chmod go-w), or link without a RUNPATH into one that is not; the registry refuses "
        "the plugin: ",
        ok.message()));
  }
  return Outcome::Fail(std::string(ok.message()));
}

Outcome Negotiation(const Options& o) {
  return Isolated(o, false, [&]() -> Outcome {
    void* h = dlopen(o.plugin_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) return Outcome::Fail(absl::StrCat("dlopen: ", dlerror()));
    auto entry = reinterpret_cast<rayaccel_plugin_entry_fn>(dlsym(h, RAYACCEL_PLUGIN_ENTRY_SYMBOL));
    if (entry == nullptr) return Outcome::Fail("no entry symbol");
    ErrorBuffer err;
    auto ask = [&](uint32_t major, uint32_t minor, rayaccel_negotiation* n) {
      *n = rayaccel_negotiation{};
      n->struct_size = sizeof(*n);
      n->host_abi_major = major;
      n->host_abi_minor = minor;
      err.text[0] = '\0';
      return entry(n, &err.error);
    };
    // What the plugin answered, in the words a vendor compares with its source.
    auto answered = [&](rayaccel_status rc, const rayaccel_negotiation& n) {
      if (rc != RAYACCEL_STATUS_OK) {
        return absl::StrCat("it returned status ", rc, err.text[0] != '\0' ? " (" : "",
                            EscapeControl(err.text), err.text[0] != '\0' ? ")" : "");
      }
      return absl::StrCat("it chose ", n.chosen_abi_major, ".", n.chosen_abi_minor,
                          n.api == nullptr ? " and gave no table" : "");
    };
    rayaccel_negotiation n;
    rayaccel_status rc = ask(1, 0, &n);
    if (rc != RAYACCEL_STATUS_OK || n.chosen_abi_major != 1 || n.chosen_abi_minor != 0 ||
        n.api == nullptr) {
      const char* fix =
          rc != RAYACCEL_STATUS_OK || n.chosen_abi_major != 1
              ? "answer a 1.0 host with ABI 1.0 and a table (major 1, the same as the host's)"
          : n.chosen_abi_minor != 0
              ? "answer a 1.0 host with ABI 1.0: chosen_abi_minor = "
                "rayaccel_choose_minor(host_abi_minor, yours), not your own minor"
              : "answer a 1.0 host with a table (negotiation->api)";
      return Outcome::Fail(absl::StrCat(fix, "; ", answered(rc, n)));
    }
    rc = ask(1, 99, &n);
    if (rc != RAYACCEL_STATUS_OK || n.chosen_abi_major != 1 || n.api == nullptr ||
        n.chosen_abi_minor > 99) {
      return Outcome::Fail(absl::StrCat(
          "answer a newer 1.x host (1.99) with your own 1.x and a table: ", answered(rc, n)));
    }
    for (uint32_t major : {0u, 2u}) {
      rayaccel_status rc = ask(major, 0, &n);
      if (rc != RAYACCEL_STATUS_INCOMPATIBLE) {
        return Outcome::Fail(absl::StrCat("a major-", major,
                                          " host must be refused with RAYACCEL_STATUS_INCOMPATIBLE"
                                          " (got status ",
                                          rc, ")"));
      }
    }
    return Outcome::Pass();
  });
}

Outcome Table(const Options& o) {
  return Isolated(o, false, [&]() -> Outcome {
    Loaded l = Load(o, /*initialize=*/false);  // Open checks size, major, name, hooks, caps
    return l.plugin == nullptr ? Outcome::Fail(l.error)
                               : Outcome::Pass(absl::StrCat("plugin \"", l.plugin->name(), "\""));
  });
}

// The resource the plugin's devices count toward must be a name Ray takes, and not one of
// Ray's own (CPU, memory, ...): the registry refuses both, so a plugin that passed here would
// fail on every node.
Outcome ResourceName(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    absl::StatusOr<PluginProperties> props = p.GetProperties();
    if (!props.ok()) return Outcome::Fail(std::string(props.status().message()));
    const std::string& r = props->resource_name;
    if (absl::Status st = CheckResourceName(r); !st.ok()) {
      return Outcome::Fail(std::string(st.message()));
    }
    if (std::string warning = ForeignResourceWarning(r, props->vendor); !warning.empty()) {
      return Outcome::Warn(warning);
    }
    return Outcome::Pass(r);
  });
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

Outcome AnswersValid(const Options& o) {
  return RunIn(o, [&o](const LoadedPlugin& p) {
    Discovery d = Discover(p, false, false, true);
    if (!d.error.empty()) return Outcome::Fail(d.error);
    if (!d.report.problems.empty()) return Outcome::Fail(Problems(d.report));
    if (o.expect_no_devices && !d.report.devices.empty()) {
      return Outcome::Fail(absl::StrCat(d.report.devices.size(),
                                        " devices found, and --expect-no-devices says this "
                                        "machine has none"));
    }
    return Outcome::Pass(absl::StrCat(d.report.devices.size(), " devices"));
  });
}

// The gate: the plugin loads, negotiates and initializes with the given configuration. Every
// later check needs this; its failure is reported here, once. (Shutdown, after the verdict, is
// lifecycle.repeated's to judge.)
Outcome Initializes(const Options& o) {
  return RunIn(o, [](const LoadedPlugin&) { return Outcome::Pass(); });
}

Outcome IdsStable(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    Discovery a = Discover(p, false, false, false);
    Discovery b = Discover(p, false, false, false);
    if (!a.error.empty() || !b.error.empty()) return Outcome::Fail(a.error + b.error);
    auto ids = [](const PluginReport& r) {
      std::set<std::pair<uint32_t, std::string>> s;
      for (const Device& d : r.devices) s.insert({d.index, d.id});
      return s;
    };
    if (ids(a.report) != ids(b.report)) {
      return Outcome::Fail("two discoveries in a row gave different (index, id) pairs");
    }
    return Outcome::Pass();
  });
}

Outcome PciNormalised(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    Discovery d = Discover(p, false, false, false);
    if (!d.error.empty()) return Outcome::Fail(d.error);
    // The registry's own rule (NormalizePciBusId): a malformed id fails; another accepted form
    // passes, with what the host makes of it, so the suite and the registry cannot disagree.
    std::string note;
    for (const std::string& raw : d.raw_pci) {
      if (raw.empty()) continue;
      std::optional<std::string> normal = NormalizePciBusId(raw);
      if (!normal) {
        return Outcome::Fail(absl::StrCat("pci_bus_id \"", EscapeControl(raw),
                                          "\" is not of the form dddd:bb:dd.f"));
      }
      if (*normal != raw && note.empty()) {
        note = absl::StrCat("accepted: the host reads \"", raw, "\" as ", *normal);
      }
    }
    return Outcome::Pass(note);
  });
}

Outcome AcceleratorTypes(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    Discovery d = Discover(p, false, false, false);
    if (!d.error.empty()) return Outcome::Fail(d.error);
    absl::StatusOr<PluginProperties> props = p.GetProperties();
    if (!props.ok()) return Outcome::Fail(std::string(props.status().message()));
    const std::string& vendor = props->vendor;
    for (const Device& dev : d.report.devices) {
      auto raw = d.raw_types.find(dev.index);
      if (raw == d.raw_types.end() || raw->second.empty()) continue;
      const std::string& type = raw->second;
      if (!CheckLabelValue(type).ok()) {
        return Outcome::Fail(
            absl::StrCat("accelerator_type \"", type, "\" cannot be a Ray label value"));
      }
      std::string ray =
          DeriveAcceleratorType(vendor, dev.name, dev.pci_vendor_id, dev.pci_device_id);
      if (!ray.empty() && ray != type) {
        return Outcome::Fail(absl::StrCat("device ", dev.index, ": accelerator_type \"", type,
                                          "\" but Ray derives \"", ray,
                                          "\": leave it empty and the host applies Ray's rule"));
      }
    }
    return Outcome::Pass();
  });
}

Outcome LabelsValid(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    if (p.api().get_labels == nullptr) return Outcome::Skip("no get_labels hook");
    Discovery d = Discover(p, true, false, false);
    if (!d.error.empty()) return Outcome::Fail(d.error);
    if (!d.report.problems.empty()) return Outcome::Fail(ProblemsAfterDiscover(d));
    return Outcome::Pass(absl::StrCat(d.report.labels.size(), " labels"));
  });
}

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

Outcome TopologyValid(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    if (p.api().get_topology == nullptr) return Outcome::Fail("no get_topology hook");
    Discovery d = Discover(p, false, true, false);
    if (!d.error.empty()) return Outcome::Fail(d.error);
    if (!d.report.problems.empty()) return Outcome::Fail(ProblemsAfterDiscover(d));
    return Outcome::Pass(
        absl::StrCat(d.report.links.size(), " links, ", d.report.domains.size(), " domains"));
  });
}

Outcome HealthValid(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    Discovery d = Discover(p, false, false, true);
    if (!d.error.empty()) return Outcome::Fail(d.error);
    if (!d.report.problems.empty()) return Outcome::Fail(ProblemsAfterDiscover(d));
    for (const auto& [index, health] : d.report.health) {
      bool known = std::any_of(d.report.devices.begin(), d.report.devices.end(),
                               [&](const Device& dev) { return dev.index == index; });
      if (!known) return Outcome::Fail(absl::StrCat("health for unknown device ", index));
    }
    return Outcome::Pass();
  });
}

// One wait_health_events call into `report`; the plugin's message lands in `err`.
rayaccel_status WaitHealthOnce(const LoadedPlugin& p, uint32_t timeout_ms, PluginReport* report,
                               ErrorBuffer* err) {
  Collector collector(report);
  rayaccel_health_wait_args args{};
  args.struct_size = sizeof(args);
  args.timeout_ms = timeout_ms;
  args.sink = collector.sink();
  return CallPlugin(
      err, [&](rayaccel_error* e) { return p.api().wait_health_events(p.instance(), &args, e); });
}

// OK without a report tells the host "rescan: something changed that only discover reads". A
// wait that says so at once, again and again, while discover shows the same devices in the same
// health, keeps the host's health watch rescanning in a loop. Empty when the wait is honest.
std::string BusyHealthWait(const LoadedPlugin& p, const Discovery& before, uint32_t timeout_ms) {
  constexpr int kWaits = 4;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kWaits; ++i) {
    PluginReport report;
    ErrorBuffer err;
    const rayaccel_status rc = WaitHealthOnce(p, timeout_ms, &report, &err);
    if (rc != RAYACCEL_STATUS_OK || !report.health.empty()) return "";
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  if (ms >= static_cast<int64_t>(timeout_ms) * kWaits / 2) return "";  // it did wait
  Discovery after = Discover(p, false, false, false);
  if (!after.error.empty()) return "";  // something did change: discover now fails
  auto same = [](const Device& a, const Device& b) {
    return a.id == b.id && a.health == b.health && a.health_reason == b.health_reason;
  };
  if (!std::equal(before.report.devices.begin(), before.report.devices.end(),
                  after.report.devices.begin(), after.report.devices.end(), same)) {
    return "";
  }
  return absl::StrCat(
      "wait_health_events returned OK ", kWaits + 1, " times in a row within ", ms,
      " ms without reporting a change (set_health), and discover shows the same devices in the "
      "same health: a host would rescan in a loop. Return TIMEOUT when nothing changed within "
      "args->timeout_ms; OK only after set_health, or when a rescan would read something new");
}

// wait_health_events returns within its timeout (a host in-process would otherwise wait on it
// forever) and reports only devices of the last discover.
Outcome HealthWaitBounded(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    if ((p.capabilities() & RAYACCEL_CAP_HEALTH_EVENTS) == 0 ||
        p.api().wait_health_events == nullptr) {
      return Outcome::Skip("no health events");
    }
    Discovery d = Discover(p, false, false, false);
    if (!d.error.empty()) return Outcome::Fail(d.error);
    constexpr uint32_t kTimeoutMs = 200;
    PluginReport report;
    ErrorBuffer err;
    auto start = std::chrono::steady_clock::now();
    rayaccel_status rc = WaitHealthOnce(p, kTimeoutMs, &report, &err);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - start)
                  .count();
    if (ms > kTimeoutMs + 1000) {
      return Outcome::Fail(absl::StrCat("took ", ms, " ms with a ", kTimeoutMs, " ms timeout"));
    }
    if (rc == RAYACCEL_STATUS_UNSUPPORTED || rc == RAYACCEL_STATUS_UNAVAILABLE) {
      return Outcome::Skip(absl::StrCat("cannot watch here: ", EscapeControl(err.text)));
    }
    if (rc != RAYACCEL_STATUS_OK && rc != RAYACCEL_STATUS_TIMEOUT) {
      return Outcome::Fail(absl::StrCat("status ", rc, ": ", EscapeControl(err.text)));
    }
    if (!report.problems.empty()) return Outcome::Fail(Problems(report));
    for (const auto& [index, health] : report.health) {
      bool known = std::any_of(d.report.devices.begin(), d.report.devices.end(),
                               [&](const Device& dev) { return dev.index == index; });
      if (!known) return Outcome::Fail(absl::StrCat("health event for unknown device ", index));
    }
    if (rc == RAYACCEL_STATUS_OK && report.health.empty()) {
      if (std::string busy = BusyHealthWait(p, d, kTimeoutMs); !busy.empty()) {
        return Outcome::Fail(busy);
      }
    }
    return Outcome::Pass(rc == RAYACCEL_STATUS_OK ? "reported a change"
                                                  : absl::StrCat("no change in ", ms, " ms"));
  });
}

Outcome QuantityConsistent(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    if (p.api().validate_quantity == nullptr) return Outcome::Skip("no validate_quantity hook");
    std::vector<uint32_t> accepted;
    for (uint32_t q = 1; q <= 16; ++q) {
      ErrorBuffer e1, e2;
      rayaccel_status a = p.api().validate_quantity(p.instance(), q, &e1.error);
      rayaccel_status b = p.api().validate_quantity(p.instance(), q, &e2.error);
      if (a != b) return Outcome::Fail(absl::StrCat("quantity ", q, ": answers differ"));
      if (a == RAYACCEL_STATUS_OK) {
        accepted.push_back(q);
      } else if (a != RAYACCEL_STATUS_INVALID_ARGUMENT) {
        return Outcome::Fail(
            absl::StrCat("quantity ", q, ": status ", a, " (expected OK or INVALID_ARGUMENT)"));
      } else if (e1.text[0] == '\0') {
        return Outcome::Fail(absl::StrCat("quantity ", q, " refused without a message"));
      }
    }
    return Outcome::Pass(absl::StrCat("accepts ", absl::StrJoin(accepted, ",")));
  });
}

Outcome EnvNamesTheSet(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    Discovery d = Discover(p, false, false, false);
    if (!d.error.empty()) return Outcome::Fail(d.error);
    absl::StatusOr<PluginProperties> props = p.GetProperties();
    if (!props.ok()) return Outcome::Fail(std::string(props.status().message()));
    const std::string& var = props->visible_devices_env;
    std::set<std::string> parents;
    for (const Device& dev : d.report.devices) {
      if (!dev.parent_id.empty()) parents.insert(dev.parent_id);
    }
    std::vector<const Device*> schedulable;
    for (const Device& dev : d.report.devices) {
      if (parents.count(dev.id) == 0) schedulable.push_back(&dev);
    }
    if (schedulable.empty()) return Outcome::Skip("no devices to allocate");
    if (p.api().prepare_allocation == nullptr) {
      return var.empty()
                 ? Outcome::Fail("neither prepare_allocation nor a visible-devices variable")
                 : Outcome::Pass("the host sets " + var);
    }
    std::vector<std::vector<const Device*>> sets;
    for (const Device* dev : schedulable) sets.push_back({dev});
    sets.push_back(schedulable);
    std::vector<std::string> refused_sets;
    for (const auto& set : sets) {
      std::vector<uint32_t> indices;
      for (const Device* dev : set) indices.push_back(dev->index);
      auto env = p.PrepareAllocation(indices);
      // A set of several holding a device marked lease_alone (CUDA enumerates one MIG device
      // per process) may be refused with the reason; every device alone must work.
      const bool has_lease_alone = std::any_of(set.begin(), set.end(), [](const Device* dev) {
        return std::any_of(dev->attributes.begin(), dev->attributes.end(), [](const Attribute& a) {
          return a.name == "lease_alone" && a.kind == Attribute::Kind::kBool && a.int_value != 0;
        });
      });
      if (!env.ok() && set.size() > 1 && has_lease_alone &&
          env.status().code() == absl::StatusCode::kInvalidArgument &&
          !env.status().message().empty()) {
        refused_sets.push_back(std::string(env.status().message()));
        continue;
      }
      if (!env.ok()) return Outcome::Fail(std::string(env.status().message()));
      std::string value;
      bool found = false;
      for (const auto& [name, v] : *env) {
        if (name == var) value = v, found = true;
        if (!InVisibleDevicesFamily(name, var)) {
          return Outcome::Fail(absl::StrCat("prepare_allocation set ", EscapeControl(name),
                                            ": only variables of the visible-devices family of ",
                                            var.empty() ? std::string("(none declared)") : var,
                                            " may be set (the registry refuses the allocation)"));
        }
      }
      // For every schedulable device, leaving the variable unset means "all" (Ray's TPU path
      // sets nothing for a whole host).
      if (!var.empty() && !found && set.size() == schedulable.size()) continue;
      if (!var.empty() && !found) return Outcome::Fail("prepare_allocation did not set " + var);
      if (var.empty()) continue;
      // oneAPI's selector names its backend before the devices ("level_zero:0,1"); an id
      // holds no such lower-case word and colon at its start.
      absl::string_view list = value;
      if (size_t colon = list.find(':');
          colon != absl::string_view::npos && colon > 0 &&
          std::all_of(list.begin(), list.begin() + colon,
                      [](char c) { return (c >= 'a' && c <= 'z') || c == '_'; })) {
        list.remove_prefix(colon + 1);
      }
      std::vector<std::string> named = absl::StrSplit(list, ',', absl::SkipEmpty());
      std::set<std::string> want_index, want_id;
      for (const Device* dev : set) {
        want_index.insert(std::to_string(dev->index));
        want_id.insert(dev->id);
      }
      std::set<std::string> got(named.begin(), named.end());
      if (got.size() != named.size() || (got != want_index && got != want_id)) {
        return Outcome::Fail(absl::StrCat(var, "=", value, " for devices {",
                                          absl::StrJoin(want_index, ","),
                                          "}: must name exactly that set, by index or by id"));
      }
    }
    if (!refused_sets.empty()) {
      return Outcome::Pass(absl::StrCat(sets.size() - refused_sets.size(), " sets; refused ",
                                        refused_sets.size(), ": ", refused_sets.front()));
    }
    return Outcome::Pass(absl::StrCat(sets.size(), " sets"));
  });
}

Outcome ThreadSafe(const Options& o) {
  return RunIn(o, [](const LoadedPlugin& p) {
    if ((p.api().capabilities & RAYACCEL_CAP_THREAD_SAFE) == 0) {
      return Outcome::Skip("RAYACCEL_CAP_THREAD_SAFE not claimed");
    }
    Discovery reference = Discover(p, true, true, true);
    if (!reference.error.empty()) return Outcome::Fail(reference.error);
    std::atomic<int> mismatches{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < 20; ++i) {
          Discovery d = Discover(p, true, true, true);
          if (!d.error.empty() || d.report.devices.size() != reference.report.devices.size() ||
              d.report.links.size() != reference.report.links.size()) {
            ++mismatches;
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
    if (mismatches > 0) {
      return Outcome::Fail(
          absl::StrCat(mismatches.load(), " of 80 concurrent discoveries differed"));
    }
    return Outcome::Pass();
  });
}

// --- transport.round_trip: two processes, each with its own endpoint of the plugin.

// Line-based messages between the check and its peer process over a pipe pair.
struct Channel {
  int in = -1, out = -1;
  bool Send(const std::string& line) {
    WriteAll(out, line + "\n");
    return true;
  }
  // The next line, or "" after `seconds` or when the other side is gone.
  std::string Receive(int seconds = 5) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (buffer.find('\n') == std::string::npos) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{in, POLLIN, 0};
      if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) return "";
      char chunk[4096];
      ssize_t n = read(in, chunk, sizeof(chunk));
      if (n <= 0) return "";
      buffer.append(chunk, static_cast<size_t>(n));
    }
    std::string line = buffer.substr(0, buffer.find('\n'));
    buffer.erase(0, line.size() + 1);
    return line;
  }
  std::string buffer;
};

constexpr size_t kRoundTripBytes = 1 << 20;
constexpr size_t kGuard = 4096;
constexpr char kCanaryByte = '\xc5';

char PatternByte(size_t i, int seed) { return static_cast<char>((i * 131 + seed) ^ (i >> 9)); }

TransportOptions RoundTripOptions(const Options& o) {
  TransportOptions t;
  t.plugin = o.plugin_path;
  t.config = o.config;
  t.check_permissions = false;
  t.peer_timeout = absl::Seconds(std::max(1, o.timeout_seconds / 4));
  return t;
}

// `size` bytes between two PROT_NONE guard pages: a transfer that strays outside a region
// kills the process that serves it.
char* GuardedBuffer(size_t size) {
  const size_t inner = (size + kGuard - 1) / kGuard * kGuard;
  void* area =
      mmap(nullptr, inner + 2 * kGuard, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (area == MAP_FAILED) return nullptr;
  char* base = static_cast<char*>(area);
  mprotect(base, kGuard, PROT_NONE);
  mprotect(base + kGuard + inner, kGuard, PROT_NONE);
  return base + kGuard;
}

// The peer: serves a source and a target region (each between guard pages, with a canary
// page it never registers), checks the target when notified, and deregisters the source when
// asked. Runs in a forked child until killed.
[[noreturn]] void RoundTripPeer(const Options& o, Channel ch) {
  auto t = Transport::Open(RoundTripOptions(o));
  if (!t.ok()) {
    ch.Send("error " + std::string(t.status().message()));
    _exit(1);
  }
  char* source = GuardedBuffer(kRoundTripBytes);
  char* target = GuardedBuffer(kRoundTripBytes);
  char* canary = GuardedBuffer(kGuard);
  if (source == nullptr || target == nullptr || canary == nullptr) {
    ch.Send("error mmap failed");
    _exit(1);
  }
  for (size_t i = 0; i < kRoundTripBytes; ++i) source[i] = PatternByte(i, 1);
  std::memset(target, 0, kRoundTripBytes);
  std::memset(canary, kCanaryByte, kGuard);
  auto src = (*t)->Register(source, kRoundTripBytes);
  auto dst = (*t)->Register(target, kRoundTripBytes);
  if (!src.ok() || !dst.ok()) {
    ch.Send("error register: " + std::string((!src.ok() ? src : dst).status().message()));
    _exit(1);
  }
  ch.Send(absl::StrCat("ready ", absl::WebSafeBase64Escape((*t)->address()), " ",
                       absl::WebSafeBase64Escape(*(*t)->Describe(*src)), " ",
                       absl::WebSafeBase64Escape(*(*t)->Describe(*dst))));
  while (true) {
    std::string cmd = ch.Receive(120);
    if (cmd.empty()) _exit(0);
    if (cmd == "notified?") {
      auto got = (*t)->TakeNotifications(1, absl::Now() + absl::Seconds(5));
      bool landed = true;
      for (size_t i = 0; i < kRoundTripBytes; ++i)
        landed = landed && target[i] == PatternByte(i, 2);
      ch.Send(!got.ok() || got->empty() ? "no notification"
              : (*got)[0] != "landed"   ? "wrong notification " + (*got)[0]
              : landed                  ? "ok"
                                        : "the notification came before the data");
    } else if (cmd == "invalidate") {
      absl::Status s = (*t)->Deregister(*src);
      ch.Send(s.ok() ? "ok" : "error " + std::string(s.message()));
    } else if (cmd == "canary?") {
      bool intact = true;
      for (size_t i = 0; i < kGuard; ++i) intact = intact && canary[i] == kCanaryByte;
      ch.Send(intact ? "ok" : "changed");
    }
  }
}

// A round-trip peer in a forked child, and what it published.
struct Peer {
  pid_t pid = -1;
  Channel ch;
  std::string address, src, dst;
  bool Alive() const { return pid > 0 && waitpid(pid, nullptr, WNOHANG) == 0; }
  void Kill() {
    if (pid <= 0) return;
    kill(pid, SIGCONT);
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    pid = -1;
  }
  ~Peer() {
    Kill();
    close(ch.in);
    close(ch.out);
  }
};

// Starts the peer; returns why not on failure.
absl::StatusOr<std::unique_ptr<Peer>> StartPeer(const Options& o) {
  int to_peer[2], from_peer[2];
  if (pipe2(to_peer, O_CLOEXEC) != 0 || pipe2(from_peer, O_CLOEXEC) != 0) {
    return absl::InternalError("suite: pipe failed");
  }
  pid_t pid = fork();
  if (pid == 0) RoundTripPeer(o, Channel{to_peer[0], from_peer[1], ""});
  close(to_peer[0]);
  close(from_peer[1]);
  auto peer = std::make_unique<Peer>();
  peer->pid = pid;
  peer->ch = Channel{from_peer[0], to_peer[1], ""};
  std::vector<std::string> ready = absl::StrSplit(peer->ch.Receive(10), ' ');
  if (ready.size() != 4 || ready[0] != "ready" ||
      !absl::WebSafeBase64Unescape(ready[1], &peer->address) ||
      !absl::WebSafeBase64Unescape(ready[2], &peer->src) ||
      !absl::WebSafeBase64Unescape(ready[3], &peer->dst)) {
    return absl::InternalError("the peer process did not open an endpoint: " +
                               absl::StrJoin(ready, " "));
  }
  return peer;
}

absl::Status WaitFor(absl::StatusOr<Request> r, absl::Duration limit = absl::Seconds(5)) {
  return r.ok() ? r->Wait(absl::Now() + limit) : r.status();
}

Outcome FailStep(const std::string& step, const absl::Status& s) {
  return Outcome::Fail(absl::StrCat(step, ": ", s.ToString()));
}

// Runs `body` for a plugin that claims a usable transport, with a peer process serving.
Outcome WithPeer(
    const Options& o,
    const std::function<Outcome(Peer&, Transport&, std::vector<char>&, uint64_t)>& body) {
  return RunIn(o, [&](const LoadedPlugin& p) {
    if ((p.api().capabilities & RAYACCEL_CAP_TRANSPORT) == 0) {
      return Outcome::Skip("RAYACCEL_CAP_TRANSPORT not claimed");
    }
    absl::StatusOr<rayaccel_transport_api> table = transport::TransportTable(p);
    if (!table.ok()) return Outcome::Fail(std::string(table.status().message()));
    absl::StatusOr<std::unique_ptr<Peer>> peer = StartPeer(o);
    if (!peer.ok()) return Outcome::Fail(std::string(peer.status().message()));
    std::vector<char> local(kRoundTripBytes, 0);  // outlives the endpoint that registers it
    auto t = Transport::Open(RoundTripOptions(o));
    if (!t.ok()) return FailStep("open_endpoint", t.status());
    auto mine = (*t)->Register(local.data(), local.size());
    if (!mine.ok()) return FailStep("register_memory", mine.status());
    return body(**peer, **t, local, *mine);
  });
}

Outcome Transport(const Options& o) {
  return WithPeer(
      o, [&o](Peer& peer, rayaccel::Transport& t, std::vector<char>& local, uint64_t mine) {
        auto conn = t.Connect(peer.address);
        if (!conn.ok()) return FailStep("connect", conn.status());
        if (absl::Status s = WaitFor(t.Read(*conn, mine, 0, peer.src, 0, local.size())); !s.ok()) {
          return FailStep("read", s);
        }
        for (size_t i = 0; i < local.size(); ++i) {
          if (local[i] != PatternByte(i, 1)) {
            return Outcome::Fail(absl::StrCat("read: byte ", i, " differs from the peer's memory"));
          }
        }
        for (size_t i = 0; i < local.size(); ++i) local[i] = PatternByte(i, 2);
        auto w = t.Write(*conn, mine, 0, peer.dst, 0, local.size());
        if (!w.ok()) return FailStep("write", w.status());
        if (absl::Status s = WaitFor(t.Notify(*conn, "landed")); !s.ok())
          return FailStep("notify", s);
        if (absl::Status s = w->Wait(absl::Now() + absl::Seconds(5)); !s.ok()) {
          return FailStep("write", s);
        }
        peer.ch.Send("notified?");
        if (std::string answer = peer.ch.Receive(10); answer != "ok") {
          return Outcome::Fail("write and notify: the peer says: " + answer);
        }
        if (absl::Status s = WaitFor(t.Flush(*conn)); !s.ok()) return FailStep("flush", s);

        // Malformed descriptors are refused; an invalidated one is refused as stale.
        absl::Status bad =
            t.Read(*conn, mine, 0, peer.src.substr(0, peer.src.size() - 1), 0, 16).status();
        if (!absl::IsInvalidArgument(bad))
          return FailStep("a truncated descriptor must be refused", bad);
        peer.ch.Send("invalidate");
        if (std::string answer = peer.ch.Receive(10); answer != "ok") {
          return Outcome::Fail("deregister_memory in the peer: " + answer);
        }
        absl::Status stale = WaitFor(t.Read(*conn, mine, 0, peer.src, 0, 16));
        if (!IsStale(stale)) {
          return FailStep("a read with a deregistered region's descriptor must fail STALE", stale);
        }

        // The peer dies: the next transfers fail PEER_LOST within the peer timeout.
        peer.Kill();
        absl::Time until = absl::Now() + RoundTripOptions(o).peer_timeout + absl::Seconds(2);
        absl::Status lost;
        while (absl::Now() < until) {
          lost = WaitFor(t.Read(*conn, mine, 0, peer.dst, 0, 16));
          if (!lost.ok()) break;
          absl::SleepFor(absl::Milliseconds(50));
        }
        if (!IsPeerLost(lost)) return FailStep("a killed peer must be reported as PEER_LOST", lost);
        if (absl::Status s = t.Close(*conn); !s.ok()) return FailStep("close", s);
        if (absl::Status s = t.Deregister(mine); !s.ok()) return FailStep("deregister_memory", s);
        return Outcome::Pass("read, write, notify, flush, stale and lost-peer detection");
      });
}

// --- transport.device_memory: the round trip on the plugin's device memory, where it offers any.
//
// Two endpoints of the plugin: bytes written from host memory into device memory, read back,
// copied from one device region into another and read back again; the owner's bounds and
// invalidation hold for device regions too. The suite never touches device memory itself.
// Runs `body` with the plugin's first device, for a plugin that claims a transport.
Outcome WithFirstDevice(const Options& o, const std::function<Outcome(uint32_t device)>& body) {
  return RunIn(o, [&](const LoadedPlugin& p) {
    if ((p.api().capabilities & RAYACCEL_CAP_TRANSPORT) == 0) {
      return Outcome::Skip("RAYACCEL_CAP_TRANSPORT not claimed");
    }
    Discovery d = Discover(p, false, false, false);
    if (!d.error.empty()) return Outcome::Fail(d.error);
    if (d.report.devices.empty()) return Outcome::Skip("no devices");
    return body(d.report.devices[0].index);
  });
}

Outcome DeviceMemory(const Options& o) {
  return WithFirstDevice(o, [&](uint32_t device) {
    auto a = Transport::Open(RoundTripOptions(o));
    auto b = Transport::Open(RoundTripOptions(o));
    if (!a.ok() || !b.ok()) return FailStep("open_endpoint", (!a.ok() ? a : b).status());
    auto owner = (*a)->Allocate(kRoundTripBytes, MemoryKind::kDevice, device);
    if (absl::IsUnimplemented(owner.status())) {
      return Outcome::Skip(absl::StrCat("no device memory: ", owner.status().message()));
    }
    if (!owner.ok()) return FailStep("register_memory (device, allocated)", owner.status());
    auto copy = (*b)->Allocate(kRoundTripBytes, MemoryKind::kDevice, device);
    if (!copy.ok()) return FailStep("register_memory (device, allocated)", copy.status());
    std::vector<char> host(kRoundTripBytes), back(kRoundTripBytes);  // outlive the endpoints
    for (size_t i = 0; i < host.size(); ++i) host[i] = PatternByte(i, 3);
    auto host_region = (*b)->Register(host.data(), host.size());
    auto back_region = (*a)->Register(back.data(), back.size());
    if (!host_region.ok() || !back_region.ok()) {
      return FailStep("register_memory (host)",
                      (!host_region.ok() ? host_region : back_region).status());
    }
    auto ab = (*b)->Connect((*a)->address());
    auto ba = (*a)->Connect((*b)->address());
    if (!ab.ok() || !ba.ok()) return FailStep("connect", (!ab.ok() ? ab : ba).status());
    const std::string owner_desc = *(*a)->Describe(owner->region);
    const std::string copy_desc = *(*b)->Describe(copy->region);
    // host (b) -> device (a); device (a) -> device (b); device (b) -> host (a).
    if (absl::Status s = WaitFor((*b)->Write(*ab, *host_region, 0, owner_desc, 0, kRoundTripBytes));
        !s.ok()) {
      return FailStep("write into device memory", s);
    }
    if (absl::Status s = WaitFor((*b)->Read(*ab, copy->region, 0, owner_desc, 0, kRoundTripBytes));
        !s.ok()) {
      return FailStep("read device memory into device memory", s);
    }
    if (absl::Status s = WaitFor((*a)->Read(*ba, *back_region, 0, copy_desc, 0, kRoundTripBytes));
        !s.ok()) {
      return FailStep("read device memory into host memory", s);
    }
    for (size_t i = 0; i < back.size(); ++i) {
      if (back[i] != host[i]) {
        return Outcome::Fail(
            absl::StrCat("byte ", i, " differs after host -> device -> device -> host"));
      }
    }
    absl::Status past = WaitFor((*b)->Read(*ab, copy->region, 0, owner_desc, 1, kRoundTripBytes));
    if (!absl::IsInvalidArgument(past)) {
      return FailStep("a read past a device region's end must be refused", past);
    }
    if (absl::Status s = (*a)->Deregister(owner->region); !s.ok()) {
      return FailStep("deregister_memory (device)", s);
    }
    absl::Status stale = WaitFor((*b)->Read(*ab, copy->region, 0, owner_desc, 0, 16));
    if (!IsStale(stale)) {
      return FailStep("a read of a deregistered device region must fail STALE", stale);
    }
    return Outcome::Pass(absl::StrCat("device ", device,
                                      ": host to device, device to device, device to host; "
                                      "bounds and invalidation"));
  });
}

// --- transport.device_two_process: another process's device memory, both ways.
//
// A peer process allocates a region of the plugin's first device; this one writes into it from
// host memory and from device memory of its own and reads it back into both, so that whatever
// path the plugin takes (its fabric, its driver's IPC, staging) carries the bytes between two
// processes. Then the owner's bounds, and its deregistration, which must finish within the
// peer timeout even while this process maps the region, and leave it STALE.

// The device peer: one allocated device region; deregisters it when asked ("invalidate").
[[noreturn]] void DevicePeer(const Options& o, uint32_t device, Channel ch) {
  auto t = Transport::Open(RoundTripOptions(o));
  if (!t.ok()) {
    ch.Send("error " + std::string(t.status().message()));
    _exit(1);
  }
  auto region = (*t)->Allocate(kRoundTripBytes, MemoryKind::kDevice, device);
  if (!region.ok()) {
    ch.Send(absl::StrCat(absl::IsUnimplemented(region.status()) ? "unsupported " : "error ",
                         region.status().message()));
    _exit(1);
  }
  ch.Send(absl::StrCat("ready ", absl::WebSafeBase64Escape((*t)->address()), " ",
                       absl::WebSafeBase64Escape(*(*t)->Describe(region->region))));
  while (true) {
    std::string cmd = ch.Receive(120);
    if (cmd.empty()) _exit(0);
    if (cmd == "invalidate") {
      absl::Status s = (*t)->Deregister(region->region);
      ch.Send(s.ok() ? "ok" : "error " + std::string(s.message()));
    }
  }
}

Outcome DeviceMemoryBetweenProcesses(const Options& o) {
  return WithFirstDevice(o, [&](uint32_t device) {
    // The peer is forked before this process touches the device (a driver may not survive a
    // fork after its initialization).
    int to_peer[2], from_peer[2];
    if (pipe2(to_peer, O_CLOEXEC) != 0 || pipe2(from_peer, O_CLOEXEC) != 0) {
      return Outcome::Fail("suite: pipe failed");
    }
    pid_t pid = fork();
    if (pid == 0) DevicePeer(o, device, Channel{to_peer[0], from_peer[1], ""});
    close(to_peer[0]);
    close(from_peer[1]);
    Peer peer;
    peer.pid = pid;
    peer.ch = Channel{from_peer[0], to_peer[1], ""};
    const std::string hello = peer.ch.Receive(10);
    if (absl::StartsWith(hello, "unsupported ")) {
      return Outcome::Skip("no device memory: " + hello.substr(12));
    }
    std::vector<std::string> ready = absl::StrSplit(hello, ' ');
    if (ready.size() != 3 || ready[0] != "ready" ||
        !absl::WebSafeBase64Unescape(ready[1], &peer.address) ||
        !absl::WebSafeBase64Unescape(ready[2], &peer.src)) {
      return Outcome::Fail("the peer process did not allocate device memory: " + hello);
    }
    const std::string& theirs = peer.src;
    auto t = Transport::Open(RoundTripOptions(o));
    if (!t.ok()) return FailStep("open_endpoint", t.status());
    auto mine = (*t)->Allocate(kRoundTripBytes, MemoryKind::kDevice, device);
    if (!mine.ok()) return FailStep("register_memory (device, allocated)", mine.status());
    std::vector<char> pattern(kRoundTripBytes), zeros(kRoundTripBytes, 0), back(kRoundTripBytes);
    for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = PatternByte(i, 5);
    auto pattern_region = (*t)->Register(pattern.data(), pattern.size());
    auto zeros_region = (*t)->Register(zeros.data(), zeros.size());
    auto back_region = (*t)->Register(back.data(), back.size());
    if (!pattern_region.ok() || !zeros_region.ok() || !back_region.ok()) {
      return FailStep("register_memory (host)", !pattern_region.ok() ? pattern_region.status()
                                                : !zeros_region.ok() ? zeros_region.status()
                                                                     : back_region.status());
    }
    auto conn = (*t)->Connect(peer.address);
    if (!conn.ok()) return FailStep("connect", conn.status());
    std::vector<std::string> paths;
    // One transfer of the whole region; its path is kept for the verdict.
    auto move = [&](bool write, uint64_t local, const std::string& step) -> absl::Status {
      absl::StatusOr<Request> r = write ? (*t)->Write(*conn, local, 0, theirs, 0, kRoundTripBytes)
                                        : (*t)->Read(*conn, local, 0, theirs, 0, kRoundTripBytes);
      if (!r.ok()) return r.status();
      const TransferPath path = r->path();
      absl::Status s = WaitFor(std::move(r));
      if (s.ok()) paths.push_back(absl::StrCat(step, " ", TransferPathName(path)));
      return s;
    };
    auto expect = [&](const std::vector<char>& want, const std::string& after) -> Outcome {
      std::fill(back.begin(), back.end(), '\x5a');
      if (absl::Status s = move(false, *back_region, "device to host"); !s.ok()) {
        return FailStep("read the peer's device memory into host memory", s);
      }
      for (size_t i = 0; i < back.size(); ++i) {
        if (back[i] != want[i]) {
          return Outcome::Fail(
              absl::StrCat("byte ", i, " of the peer's device memory differs ", after));
        }
      }
      return Outcome::Pass();
    };
    if (absl::Status s = move(true, *pattern_region, "host to device"); !s.ok()) {
      return FailStep("write host memory into the peer's device memory", s);
    }
    if (Outcome r = expect(pattern, "after a write from host memory");
        r.status != Outcome::Status::kPass)
      return r;
    if (absl::Status s = move(false, mine->region, "device to device"); !s.ok()) {
      return FailStep("read the peer's device memory into device memory", s);
    }
    if (absl::Status s = move(true, *zeros_region, "host to device"); !s.ok()) {
      return FailStep("write host memory into the peer's device memory", s);
    }
    if (Outcome r = expect(zeros, "after a write of zeros"); r.status != Outcome::Status::kPass)
      return r;
    if (absl::Status s = move(true, mine->region, "device to device"); !s.ok()) {
      return FailStep("write device memory into the peer's device memory", s);
    }
    if (Outcome r = expect(pattern, "after a write from device memory (read from it before)");
        r.status != Outcome::Status::kPass) {
      return r;
    }
    absl::Status past = WaitFor((*t)->Read(*conn, mine->region, 0, theirs, 1, kRoundTripBytes));
    if (!absl::IsInvalidArgument(past)) {
      return FailStep("a read past the peer's device region must be refused", past);
    }
    const absl::Time asked = absl::Now();
    peer.ch.Send("invalidate");
    const int limit_s = std::max(1, o.timeout_seconds / 4) * 2 + 5;
    if (std::string answer = peer.ch.Receive(limit_s); answer != "ok") {
      return Outcome::Fail(absl::StrCat(
          "deregister_memory of device memory this process has read from did not finish within ",
          limit_s, " s (", answer.empty() ? "no answer" : answer,
          "): the owner must not wait past its peer timeout for a reader"));
    }
    const absl::Duration took = absl::Now() - asked;
    absl::Status stale = WaitFor((*t)->Read(*conn, mine->region, 0, theirs, 0, 16));
    if (!IsStale(stale)) {
      return FailStep("a read of the peer's deregistered device region must fail STALE", stale);
    }
    return Outcome::Pass(absl::StrCat("device ", device, ": ", absl::StrJoin(paths, ", "),
                                      "; bounds; deregistered in ", absl::FormatDuration(took),
                                      " while read from, then STALE"));
  });
}

// --- transport.owner_bounds: forged descriptors, checksums recomputed, reach nothing.

Outcome OwnerBounds(const Options& o) {
  return WithPeer(
      o, [](Peer& peer, rayaccel::Transport& t, std::vector<char>& /*local*/, uint64_t mine) {
        auto conn = t.Connect(peer.address);
        if (!conn.ok()) return FailStep("connect", conn.status());
        absl::StatusOr<transport::Envelope> genuine = transport::Decode(peer.src);
        if (!genuine.ok()) return FailStep("the peer's descriptor", genuine.status());
        auto forge = [&](uint64_t length, const std::string& payload) {
          DescriptorInfo info = genuine->info;
          info.length = length;
          absl::StatusOr<std::string> d = transport::Encode(info, payload);
          return d.ok() ? *d : std::string();
        };
        const std::string payload(genuine->payload);
        // The envelope claims twice the region: the host's own check passes, the owner must not.
        const std::string doubled = forge(2 * kRoundTripBytes, payload);
        for (bool write : {false, true}) {
          for (uint64_t offset : {kRoundTripBytes - 16, kRoundTripBytes, kRoundTripBytes + 4096}) {
            absl::Status s = write ? WaitFor(t.Write(*conn, mine, 0, doubled, offset, 4096))
                                   : WaitFor(t.Read(*conn, mine, 0, doubled, offset, 4096));
            if (s.ok()) {
              return Outcome::Fail(absl::StrCat(
                  write ? "a write" : "a read", " of 4096 bytes at ", offset,
                  ", past the region's end, through a descriptor whose length was doubled, "
                  "succeeded: the owner must refuse a range outside the region it registered"));
            }
          }
        }
        // The plugin's own bytes: wherever they hold the region's length (a little-endian 64- or
        // 32-bit field), it is doubled, so that a reader-side check passes; then the end of the
        // region and past it must still be refused, by the owner.
        const uint64_t length = genuine->info.length;
        for (size_t at = 0; at + 4 <= payload.size(); ++at) {
          for (size_t width : {size_t{8}, size_t{4}}) {
            if (at + width > payload.size()) continue;
            uint64_t v = 0;
            for (size_t i = 0; i < width; ++i) {
              v |= static_cast<uint64_t>(static_cast<uint8_t>(payload[at + i])) << (8 * i);
            }
            if (v != length) continue;
            std::string p = payload;
            for (size_t i = 0; i < width; ++i)
              p[at + i] = static_cast<char>((2 * length) >> (8 * i));
            const std::string d = forge(2 * length, p);
            absl::Status s = WaitFor(t.Read(*conn, mine, 0, d, length, 4096));
            if (s.ok()) {
              return Outcome::Fail(absl::StrCat(
                  "a read past the region's end, through a descriptor whose length field (byte ",
                  at, " of the plugin's bytes) was doubled, succeeded: the owner must refuse it"));
            }
          }
        }
        // Random damage to the plugin's bytes, checksum recomputed, read around the region's end.
        std::mt19937_64 random(7);
        for (int i = 0; i < 200 && peer.Alive(); ++i) {
          std::string p = payload;
          for (int flips = 1 + static_cast<int>(random() % 3); flips > 0 && !p.empty(); --flips) {
            p[random() % p.size()] ^= static_cast<char>(1 << (random() % 8));
          }
          const std::string d = forge(2 * length, p);
          if (d.empty()) continue;
          const uint64_t offset = length - 4096 + random() % 8192;
          absl::Status s =
              WaitFor(t.Read(*conn, mine, 0, d, offset, 1 + random() % 4096), absl::Seconds(10));
          if (absl::IsDeadlineExceeded(s)) return Outcome::Fail("a forged descriptor's read hung");
        }
        if (!peer.Alive()) {
          return Outcome::Fail(
              "the peer died serving forged descriptors (a transfer strayed outside "
              "its region into a guard page, or its parser crashed)");
        }
        peer.ch.Send("canary?");
        if (std::string answer = peer.ch.Receive(10); answer != "ok") {
          return Outcome::Fail("the peer's unregistered memory was changed: " + answer);
        }
        if (absl::Status s = WaitFor(t.Read(*conn, mine, 0, peer.src, 0, 4096)); !s.ok()) {
          return FailStep("after the forgeries, the genuine descriptor", s);
        }
        return Outcome::Pass(
            "doubled lengths (envelope and plugin bytes) refused by the owner, 200 damaged "
            "descriptors harmless");
      });
}

// --- transport.authentication: a peer without the key is refused.

Outcome Authentication(const Options& o) {
  return WithPeer(
      o, [&o](Peer& peer, rayaccel::Transport& t, std::vector<char>& local, uint64_t mine) {
        TransportOptions wrong = RoundTripOptions(o);
        wrong.key = std::string(32, '\x5a');
        auto stranger = Transport::Open(wrong);
        if (!stranger.ok()) return FailStep("open_endpoint with another key", stranger.status());
        auto refused = (*stranger)->Connect(peer.address);
        if (refused.ok() || !IsUnauthenticatedPeer(refused.status())) {
          return Outcome::Fail(
              "a peer with another key must be refused with UNAUTHENTICATED: " +
              (refused.ok() ? std::string("it was admitted") : refused.status().ToString()));
        }
        auto conn = t.Connect(peer.address);
        if (!conn.ok()) return FailStep("connect with the key", conn.status());
        if (absl::Status s = WaitFor(t.Read(*conn, mine, 0, peer.src, 0, local.size())); !s.ok()) {
          return FailStep("read with the key", s);
        }
        return Outcome::Pass("another key refused (UNAUTHENTICATED), the shared key admitted");
      });
}

// --- transport.stopped_peer: a peer that stops without dying is lost within the timeout.

Outcome StoppedPeer(const Options& o) {
  return WithPeer(
      o, [&o](Peer& peer, rayaccel::Transport& t, std::vector<char>& local, uint64_t mine) {
        auto conn = t.Connect(peer.address);
        if (!conn.ok()) return FailStep("connect", conn.status());
        if (absl::Status s = WaitFor(t.Read(*conn, mine, 0, peer.src, 0, local.size())); !s.ok()) {
          return FailStep("read", s);
        }
        kill(peer.pid, SIGSTOP);
        // Delivered asynchronously: wait until the kernel shows it stopped (state T).
        for (int i = 0; i < 500; ++i) {
          std::string stat;
          std::getline(std::ifstream(absl::StrCat("/proc/", peer.pid, "/stat")), stat);
          const size_t close = stat.rfind(')');
          if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'T')
            break;
          absl::SleepFor(absl::Milliseconds(2));
        }
        const absl::Duration timeout = RoundTripOptions(o).peer_timeout;
        const absl::Time stopped = absl::Now();
        absl::Status s = WaitFor(t.Read(*conn, mine, 0, peer.src, 0, local.size()), 3 * timeout);
        const absl::Duration took = absl::Now() - stopped;
        kill(peer.pid, SIGCONT);
        if (!IsPeerLost(s)) {
          return FailStep(absl::StrCat("a stopped peer must be reported PEER_LOST within the peer "
                                       "timeout (",
                                       absl::FormatDuration(timeout), ")"),
                          s);
        }
        if (took > timeout + absl::Seconds(2)) {
          return Outcome::Fail(
              absl::StrCat("a stopped peer was reported lost after ", absl::FormatDuration(took),
                           ", past the peer timeout of ", absl::FormatDuration(timeout)));
        }
        return Outcome::Pass(absl::StrCat(
            "lost after ", absl::FormatDuration(absl::Trunc(took, absl::Milliseconds(100)))));
      });
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Tier 4, with --perf: figures a vendor's CI records for every driver and firmware update,
// and compares with the last good run (--baseline). Each is the median of repeated
// measurements, over at most about a second, so that one slow moment on a shared machine does
// not move it.

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs `once` (returning seconds, or a negative number on failure) at least 3 and at most
// `most` times, stopping once a second has passed; the median, or why it failed.
absl::StatusOr<double> Measure(int most, const std::function<absl::StatusOr<double>()>& once) {
  std::vector<double> seconds;
  const absl::Time until = absl::Now() + absl::Seconds(1);
  while (seconds.size() < 3 || (static_cast<int>(seconds.size()) < most && absl::Now() < until)) {
    absl::StatusOr<double> s = once();
    if (!s.ok()) return s.status();
    seconds.push_back(*s);
  }
  return Median(seconds);
}

double SecondsSince(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

Outcome NotAsked() { return Outcome::Skip("measured with --perf"); }

Outcome PerfDiscovery(const Options& o) {
  if (!o.perf) return NotAsked();
  return Isolated(o, false, [&o] {
    const absl::Time start = absl::Now();
    Loaded l = Load(o);
    if (l.plugin == nullptr) return Outcome::Fail(l.error);
    Discovery first = Discover(*l.plugin, true, true, false);
    const double cold = SecondsSince(start);
    if (!first.error.empty()) return Outcome::Fail(first.error);
    absl::StatusOr<double> rescan = Measure(200, [&]() -> absl::StatusOr<double> {
      const absl::Time t = absl::Now();
      Discovery d = Discover(*l.plugin, false, true, false);
      if (!d.error.empty()) return absl::InternalError(d.error);
      return SecondsSince(t);
    });
    if (!rescan.ok()) return Outcome::Fail(std::string(rescan.status().message()));
    Outcome out = Outcome::Pass(
        absl::StrFormat("%d devices: load, initialize and first scan %.2f ms; a rescan %.1f us",
                        first.report.devices.size(), cold * 1e3, *rescan * 1e6));
    out.figures = {{"discovery.cold_start_ms", cold * 1e3}, {"discovery.rescan_us", *rescan * 1e6}};
    std::shared_ptr<LoadedPlugin> plugin = std::move(l.plugin);
    g_after_verdict = [plugin]() mutable { plugin.reset(); };
    return out;
  });
}

Outcome PerfAllocation(const Options& o) {
  if (!o.perf) return NotAsked();
  return RunIn(o, [](const LoadedPlugin& p) {
    Discovery d = Discover(p, false, false, false);
    if (!d.error.empty()) return Outcome::Fail(d.error);
    if (d.report.devices.empty()) return Outcome::Skip("no devices to allocate");
    if (p.api().prepare_allocation == nullptr) return Outcome::Skip("no prepare_allocation");
    const std::vector<uint32_t> one = {d.report.devices.front().index};
    absl::StatusOr<double> prepare = Measure(1000, [&]() -> absl::StatusOr<double> {
      const absl::Time t = absl::Now();
      auto env = p.PrepareAllocation(one);
      if (!env.ok()) return env.status();
      return SecondsSince(t);
    });
    if (!prepare.ok()) return Outcome::Fail(std::string(prepare.status().message()));
    Outcome out =
        Outcome::Pass(absl::StrFormat("prepare_allocation of one device %.1f us", *prepare * 1e6));
    out.figures = {{"allocation.prepare_us", *prepare * 1e6}};
    return out;
  });
}

Outcome PerfTransport(const Options& o) {
  if (!o.perf) return NotAsked();
  return WithPeer(
      o, [](Peer& peer, rayaccel::Transport& t, std::vector<char>& local, uint64_t mine) {
        auto conn = t.Connect(peer.address);
        if (!conn.ok()) return FailStep("connect", conn.status());
        auto timed = [&](bool write, uint64_t length) -> absl::StatusOr<double> {
          const absl::Time start = absl::Now();
          absl::Status s = WaitFor(write ? t.Write(*conn, mine, 0, peer.dst, 0, length)
                                         : t.Read(*conn, mine, 0, peer.src, 0, length));
          if (!s.ok()) return s;
          return SecondsSince(start);
        };
        std::vector<Figure> figures;
        auto add = [&](const std::string& name, absl::StatusOr<double> seconds, uint64_t bytes) {
          if (!seconds.ok()) return seconds.status();
          if (bytes == 0) {
            figures.push_back({name, *seconds * 1e6});
          } else {
            figures.push_back({name, static_cast<double>(bytes) / *seconds / 1e9});
          }
          return absl::OkStatus();
        };
        for (int i = 0; i < 10; ++i) timed(false, 8).IgnoreError();  // warm: connections, caches
        absl::Status s =
            add("transport.read_8b_latency_us", Measure(2000, [&] { return timed(false, 8); }), 0);
        if (s.ok())
          s = add("transport.read_64kib_gbps", Measure(500, [&] { return timed(false, 64 << 10); }),
                  64 << 10);
        if (s.ok())
          s = add("transport.read_1mib_gbps",
                  Measure(100, [&] { return timed(false, local.size()); }), local.size());
        if (s.ok())
          s = add("transport.write_1mib_gbps",
                  Measure(100, [&] { return timed(true, local.size()); }), local.size());
        // A batch of 64 reads of 4 KiB: what a request's KV-cache blocks cost.
        std::vector<TransferEntry> entries;
        for (uint64_t i = 0; i < 64; ++i)
          entries.push_back({mine, i * 4096, peer.src, i * 4096, 4096});
        absl::StatusOr<PreparedBatch> batch = t.PrepareBatch(TransferOp::kRead, *conn, entries);
        if (s.ok()) s = batch.status();
        if (s.ok()) {
          s = add("transport.batch_64x4kib_gbps",
                  Measure(500,
                          [&]() -> absl::StatusOr<double> {
                            const absl::Time start = absl::Now();
                            absl::StatusOr<BatchRequest> r = t.Post(*batch);
                            if (!r.ok()) return r.status();
                            if (absl::Status w = r->Wait(absl::Now() + absl::Seconds(5)); !w.ok())
                              return w;
                            return SecondsSince(start);
                          }),
                  64 * 4096);
        }
        if (!s.ok()) return FailStep("measuring", s);
        std::vector<std::string> said;
        for (const Figure& f : figures) said.push_back(absl::StrFormat("%s %.3g", f.name, f.value));
        Outcome out = Outcome::Pass(absl::StrJoin(said, ", "));
        out.figures = figures;
        return out;
      });
}

bool Figure::HigherIsBetter() const {
  return absl::EndsWith(name, "_gbps") || absl::EndsWith(name, "_per_s");
}

std::string Regression(const Figure& now, double baseline, double factor) {
  if (baseline <= 0 || now.value <= 0) return "";
  const bool worse =
      now.HigherIsBetter() ? now.value * factor < baseline : now.value > baseline * factor;
  const double slack_us = absl::EndsWith(now.name, "_ms") ? 0.05 : 50;  // in the figure's unit
  if (!worse || (!now.HigherIsBetter() && now.value - baseline < slack_us)) return "";
  return absl::StrFormat(
      "%s is %.3g against %.3g in the baseline: %.1fx worse, past the %.3gx "
      "tolerated",
      now.name, now.value, baseline,
      now.HigherIsBetter() ? baseline / now.value : now.value / baseline, factor);
}

const char* TierName(int tier) {
  switch (tier) {
    case 1:
      return "discoverable";
    case 2:
      return "schedulable";
    case 3:
      return "transport";
    case 4:
      return "measured";
    default:
      return "none";
  }
}

const std::vector<Check>& AllChecks() {
  static const std::vector<Check> kChecks = {
      {"abi.exports_only_entry", 1,
       "only rayaccel_plugin_entry is exported: no C++ or helper symbols can clash in the host",
       false, ExportsOnlyEntry},
      {"abi.negotiation", 1, "1.0 and newer 1.x hosts get a table; other majors are refused", false,
       Negotiation},
      {"abi.files_trusted", 1,
       "the plugin file, its folder and the folders its RUNPATH names are writable only by "
       "their owner (root or this user): the registry's rule for loading it",
       false, FilesTrusted},
      {"abi.table", 1,
       "the table is at least 1.0-sized, names itself, has every required hook and every hook "
       "its capabilities claim",
       false, Table, /*gates=*/true},
      {"lifecycle.initializes", 1,
       "the plugin loads and initializes with the given configuration; the checks after this "
       "one need it",
       false, Initializes, /*gates=*/true},
      {"identity.resource_name", 1,
       "the Ray resource is a name Ray takes and not one of Ray's own (CPU, memory, ...)", false,
       ResourceName},
      {"lifecycle.repeated", 1, "initialize/shutdown work three times in a row", false,
       LifecycleRepeated},
      {"lifecycle.two_instances", 1, "two instances of one library coexist", false, TwoInstances},
      {"lifecycle.config_copied", 1,
       "the configuration is copied in initialize, not kept by pointer", true, ConfigCopied},
      {"lifecycle.shutdown_without_initialize", 1,
       "shutdown(NULL) returns a status instead of crashing", false, ShutdownWithoutInitialize},
      {"lifecycle.failures_explained", 2,
       "a refused request (an unknown device) comes with a code and a message", true,
       FailuresExplained},
      {"discovery.answers_valid", 1,
       "every device passes the host's checks (ids, UTF-8, limits, health values)", false,
       AnswersValid},
      {"discovery.ids_stable", 1, "ids and indices do not change between discoveries", false,
       IdsStable},
      {"discovery.pci_bus_ids_normalised", 1, "PCI bus ids come as dddd:bb:dd.f", false,
       PciNormalised},
      {"discovery.accelerator_types", 1,
       "reported types are label-safe and equal Ray's own rule where Ray has one", false,
       AcceleratorTypes},
      {"labels.valid", 1, "node labels use Kubernetes syntax and only Ray's own ray.io/ keys", true,
       LabelsValid},
      {"process.quiet_stdout", 1, "no hook writes to stdout", false, QuietStdout},
      {"process.clean_text", 1,
       "log lines and error messages carry no control characters and are valid UTF-8", false,
       CleanText},
      {"process.state_untouched", 1,
       "the working directory, umask, signal dispositions and fds 0-2 are left as they were", false,
       ProcessStateUntouched},
      {"process.no_leak", 1, "repeated lifecycles do not grow the heap", false, NoLeak},
      {"process.nothing_left_behind", 1,
       "every process the plugin starts has ended when shutdown returns (daemons included)", false,
       NothingLeftBehind},
      {"process.group_unsignalled", 1,
       "no signal goes to the plugin's process group (the host's, in the raylet)", false,
       GroupUnsignalled},
      {"lifecycle.quiet_after_shutdown", 1,
       "nothing calls the host API once shutdown returned (its threads are stopped)", false,
       QuietAfterShutdown},
      {"topology.valid", 2,
       "links join reported devices, no self links, each pair once; domains name real devices",
       false, TopologyValid},
      {"health.valid", 2, "health states and reasons are valid and name reported devices", false,
       HealthValid},
      {"health.wait_bounded", 2,
       "wait_health_events returns within its timeout, reports only known devices, and does not "
       "claim changes it cannot show",
       true, HealthWaitBounded},
      {"allocation.quantity_consistent", 2,
       "validate_quantity answers the same twice and explains refusals", true, QuantityConsistent},
      {"allocation.env_names_the_set", 2, "the environment for a device set names exactly that set",
       false, EnvNamesTheSet},
      {"concurrency.thread_safe", 2,
       "hooks declared thread-safe agree when called from four threads", true, ThreadSafe},
      {"transport.round_trip", 3,
       "two processes: register, pack, connect, read, write, notify, flush; a truncated and a "
       "deregistered descriptor are refused; a killed peer is reported lost; close",
       false, Transport},
      {"transport.device_memory", 3,
       "where the plugin offers device memory: host to device, device to device and device to "
       "host move the bytes; the owner's bounds and invalidation hold for device regions",
       true, DeviceMemory},
      {"transport.device_two_process", 3,
       "where the plugin offers device memory: another process's device memory is written from "
       "host and device memory and read back into both, by whatever path the plugin takes; the "
       "owner's bounds hold, and its deregistration ends within the peer timeout, then STALE",
       true, DeviceMemoryBetweenProcesses},
      {"transport.owner_bounds", 3,
       "forged descriptors (a doubled length, damaged plugin bytes, checksums recomputed) reach "
       "nothing outside the region the owner registered, and do not bring the owner down",
       false, OwnerBounds},
      {"transport.authentication", 3,
       "a peer holding another key is refused with UNAUTHENTICATED; the shared key is admitted",
       false, Authentication},
      {"transport.stopped_peer", 3,
       "a peer that stops without dying (SIGSTOP) is reported PEER_LOST within the peer timeout",
       false, StoppedPeer},
      {"perf.discovery", 4,
       "load, initialize and first scan; a rescan (median): measured, and within the baseline's "
       "tolerance where one is given",
       false, PerfDiscovery},
      {"perf.allocation", 4, "prepare_allocation of one device (median)", true, PerfAllocation},
      {"perf.transport", 4,
       "between two processes: an 8-byte read's latency, 64 KiB and 1 MiB read and 1 MiB write "
       "bandwidth, a batch of 64 reads of 4 KiB",
       true, PerfTransport},
  };
  return kChecks;
}

}  // namespace rayaccel::conformance
