#include "isolation/remote_plugin.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "isolation/report_codec.h"
#include "isolation/wire.h"
#include "model/validate.h"

namespace rayaccel::isolation {
namespace {

// A sanitizer build's plugin host reserves terabytes of shadow memory at start, which any
// data limit refuses: those builds run their hosts unlimited.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizedBuild = true;
#else
constexpr bool kSanitizedBuild = false;
#endif

json::Writer Request(const char* op) {
  json::Writer w;
  w.BeginObject().Key("op").String(op);
  return w;
}

std::string Done(json::Writer& w) {
  w.EndObject();
  return w.Finish();
}

// A string field of a reply, checked like any plugin text (the child may be corrupted).
std::string Field(const json::Value& v, const char* key) {
  const json::Value* f = v.Find(key);
  if (f == nullptr || !f->is_string()) return "";
  return CheckText(f->string(), key).ok() ? f->string() : "<malformed>";
}

absl::Status ReplyStatus(const json::Value& reply) {
  const json::Value* ok = reply.Find("ok");
  if (ok != nullptr && ok->is_bool() && ok->bool_value()) return absl::OkStatus();
  const json::Value* code = reply.Find("code");
  int c = code != nullptr ? static_cast<int>(code->as_int64().value_or(13)) : 13;
  if (c <= 0 || c > 16) c = 13;  // INTERNAL
  return absl::Status(static_cast<absl::StatusCode>(c), Field(reply, "error"));
}

}  // namespace

// Children killed but not yet reaped (stuck in the kernel, e.g. a wedged driver call): tried
// again, without blocking, whenever a plugin host starts or dies.
std::mutex g_unreaped_mu;
std::vector<pid_t> g_unreaped;

void ReapLeftovers() {
  std::lock_guard<std::mutex> lock(g_unreaped_mu);
  g_unreaped.erase(std::remove_if(g_unreaped.begin(), g_unreaped.end(),
                                  [](pid_t p) { return waitpid(p, nullptr, WNOHANG) != 0; }),
                   g_unreaped.end());
}

// Kills a plugin host and everything it started (its process group). The host itself through
// its pidfd where there is one: if someone else reaped it (SIGCHLD ignored), its pid may
// already name another process. Its group id stays reserved while any helper of it lives.
void KillGroup(pid_t pid, int pidfd) {
  kill(-pid, SIGKILL);
  if (pidfd >= 0) {
    syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0);
  } else {
    kill(pid, SIGKILL);  // in case the child had not yet made its group
  }
}

enum class Reaped { kYes, kGone, kStuck };

// Waits up to a second for a killed child; leaves it for later rather than hang the registry.
// kGone: the kernel or another part of this process reaped it (SIGCHLD ignored, or a
// waitpid(-1) loop such as a raylet's), so its exit status is lost.
Reaped Reap(pid_t pid, int* status) {
  for (int i = 0; i < 1000; ++i) {
    pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid) return Reaped::kYes;
    if (r < 0 && errno != EINTR) return Reaped::kGone;
    usleep(1000);
  }
  std::lock_guard<std::mutex> lock(g_unreaped_mu);
  g_unreaped.push_back(pid);
  return Reaped::kStuck;
}

absl::StatusOr<std::unique_ptr<RemotePlugin>> RemotePlugin::Open(const std::string& path,
                                                                 const RemoteOptions& options) {
  ReapLeftovers();
  if (options.host_binary.empty() || options.host_binary[0] != '/') {
    return absl::NotFoundError(
        "rayaccel-plugin-host not found next to this program or in the bin/ beside "
        "librayaccel's folder (RegistryOptions::plugin_host names it, as an absolute path)");
  }
  // Requests and replies on one socket, health events on another (the host's fds 3 and 4).
  int sv[2], hv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return absl::InternalError(absl::StrCat("socketpair: ", std::strerror(errno)));
  }
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, hv) != 0) {
    int err = errno;
    close(sv[0]);
    close(sv[1]);
    return absl::InternalError(absl::StrCat("socketpair: ", std::strerror(err)));
  }
  // The host's last words (plugin_host_main.cc): the fatal signal, should its exit status be
  // taken by someone else.
  int cv[2];
  if (pipe2(cv, O_CLOEXEC | O_NONBLOCK) != 0) {
    int err = errno;
    for (int fd : {sv[0], sv[1], hv[0], hv[1]}) close(fd);
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(err)));
  }
  // The child: a process group of its own (a plugin that signals "its" group, or spawns
  // helpers, reaches only this one), the protocol on fds 3 and 4 and the crash note on 5,
  // nothing else inherited, stdin from /dev/null, no signal blocked, then the host, which
  // bounds its own memory before it loads the plugin. posix_spawn, never fork: the registry
  // runs in raylets and Python processes full of threads, and fork() runs every library's
  // pthread_atfork handlers (gRPC's join its threads and may abort the whole process), while
  // glibc's posix_spawn runs none. The host ends with the registry by watching fd 3 for the
  // registry's end closing (plugin_host_main.cc), not with PR_SET_PDEATHSIG, which follows the
  // thread that created it: a raylet creates registries on threads that come and go.
  auto spawn = [&]() -> pid_t {
    // Out of the way first (>= 6, close-on-exec), so that no dup2 below lands on a source.
    int request = fcntl(sv[1], F_DUPFD_CLOEXEC, 6);
    int health = fcntl(hv[1], F_DUPFD_CLOEXEC, 6);
    int crash = fcntl(cv[1], F_DUPFD_CLOEXEC, 6);
    int err = request < 0 || health < 0 || crash < 0 ? errno : 0;
    std::string limit = absl::StrCat("--data-limit=", options.memory_limit_bytes);
    std::vector<char*> argv = {const_cast<char*>(options.host_binary.c_str())};
    if (options.memory_limit_bytes > 0 && !kSanitizedBuild) argv.push_back(limit.data());
    argv.push_back(const_cast<char*>(path.c_str()));
    argv.push_back(nullptr);
    pid_t child = -1;
    if (err == 0) {
      posix_spawn_file_actions_t actions;
      posix_spawn_file_actions_init(&actions);
      posix_spawn_file_actions_adddup2(&actions, request, 3);  // dup2 clears close-on-exec
      posix_spawn_file_actions_adddup2(&actions, health, 4);
      posix_spawn_file_actions_adddup2(&actions, crash, 5);
      posix_spawn_file_actions_addclosefrom_np(&actions, 6);
      posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
      posix_spawnattr_t attr;
      posix_spawnattr_init(&attr);
      sigset_t none;
      sigemptyset(&none);
      posix_spawnattr_setsigmask(&attr, &none);
      posix_spawnattr_setpgroup(&attr, 0);
      posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
      err = posix_spawn(&child, options.host_binary.c_str(), &actions, &attr, argv.data(), environ);
      posix_spawnattr_destroy(&attr);
      posix_spawn_file_actions_destroy(&actions);
    }
    for (int fd : {request, health, crash}) {
      if (fd >= 0) close(fd);
    }
    if (err != 0) {
      errno = err;
      return -1;
    }
    return child;
  };
  pid_t pid = options.spawn_child ? options.spawn_child(spawn) : spawn();
  if (pid <= 0) {
    int err = errno;
    for (int fd : {sv[0], sv[1], hv[0], hv[1], cv[0], cv[1]}) close(fd);
    return absl::InternalError(
        absl::StrCat("cannot run ", options.host_binary, ": ", std::strerror(err)));
  }
  close(sv[1]);
  close(hv[1]);
  close(cv[1]);
  std::unique_ptr<RemotePlugin> p(new RemotePlugin());
  p->options_ = options;
  p->pid_ = pid;
  p->pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));  // -1 before Linux 5.3
  p->crash_fd_ = cv[0];
  p->fd_ = sv[0];
  p->health_fd_ = hv[0];
  json::Writer w = Request("open");
  absl::StatusOr<json::Value> reply = p->Call(Done(w), "open");
  if (!reply.ok()) return reply.status();
  if (absl::Status st = ReplyStatus(*reply); !st.ok()) return st;
  p->name_ = Field(*reply, "name");
  p->abi_version_ = Field(*reply, "abi_version");
  const json::Value* caps = reply->Find("capabilities");
  p->capabilities_ = caps != nullptr ? caps->as_uint64().value_or(0) : 0;
  const json::Value* prep = reply->Find("has_prepare_allocation");
  p->has_prepare_allocation_ = prep != nullptr && prep->is_bool() && prep->bool_value();
  const json::Value* validates = reply->Find("has_validate_quantity");
  p->has_validate_quantity_ =
      validates == nullptr || !validates->is_bool() || validates->bool_value();
  return p;
}

RemotePlugin::~RemotePlugin() {
  if (pid_ > 0) {
    // A plugin's shutdown gets a second at most: a hung one must not hold up every command
    // that ends, and the host is killed below whatever it does.
    json::Writer w = Request("shutdown");
    (void)Call(Done(w), "shutdown", std::min(options_.call_timeout, kShutdownTimeout));
  }
  if (pid_ > 0) {
    KillGroup(pid_, pidfd_);
    int status = 0;
    (void)Reap(pid_, &status);
  }
  for (int fd : {pidfd_, crash_fd_}) {
    if (fd >= 0) close(fd);
  }
  if (fd_ >= 0) close(fd_);
  if (health_fd_ >= 0) close(health_fd_);
}

absl::StatusOr<json::Value> RemotePlugin::Call(const std::string& request, const char* what,
                                               std::chrono::milliseconds timeout) const {
  std::lock_guard<std::mutex> lock(call_mu_);
  absl::StatusOr<std::string> frame = Exchange(request, wire::kMaxJsonReplyBytes, timeout);
  absl::StatusOr<json::Value> reply = frame.ok() ? ParseJson(*frame) : frame.status();
  return reply.ok() ? reply : Fail(reply.status(), what);
}

absl::StatusOr<std::string> RemotePlugin::Exchange(const std::string& request, size_t max_reply,
                                                   std::chrono::milliseconds timeout) const {
  if (pid_ <= 0) return absl::UnavailableError("the plugin host is down");
  if (timeout.count() <= 0) timeout = options_.call_timeout;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  absl::Status st = wire::WriteFrame(fd_, request);
  // Most answers (a rescan of 72 GPUs included) come within a millisecond: looked for without
  // sleeping, they cost no wake-up, which is most of an isolated call on a virtual machine.
  return st.ok() ? wire::ReadFrame(fd_, deadline, max_reply, std::chrono::microseconds(1000))
                 : absl::StatusOr<std::string>(st);
}

absl::StatusOr<json::Value> RemotePlugin::ParseJson(const std::string& frame) {
  if (frame.size() > wire::kMaxJsonReplyBytes) {
    return absl::DataLossError("the plugin host sent an oversized reply");
  }
  json::ParseError error;
  std::optional<json::Value> reply = json::Parse(frame, &error);
  if (reply && reply->is_object()) return *std::move(reply);
  return absl::DataLossError("the plugin host sent garbage");
}

absl::StatusOr<ReportReply> RemotePlugin::CallForReport(const std::string& request,
                                                        const char* what,
                                                        std::string* frame) const {
  absl::StatusOr<std::string> got = Exchange(request, wire::kMaxFrameBytes, {});  // default
  if (!got.ok()) return Fail(got.status(), what);
  *frame = *std::move(got);
  if (!frame->empty() && (*frame)[0] == '{') {  // the host could not run the call
    absl::StatusOr<json::Value> reply = ParseJson(*frame);
    if (!reply.ok()) return Fail(reply.status(), what);
    absl::Status st = ReplyStatus(*reply);
    return st.ok() ? Fail(absl::DataLossError("the plugin host sent no report"), what) : st;
  }
  absl::StatusOr<ReportReply> reply = DecodeReportReply(*frame);
  if (!reply.ok()) return Fail(reply.status(), what);
  return reply;
}

absl::Status RemotePlugin::Fail(absl::Status cause, const char* what) const {
  if (pid_ <= 0) return cause;  // already down, and said why then
  // The host is dead, silent or confused: end it and say why.
  bool timed_out = cause.code() == absl::StatusCode::kDeadlineExceeded;
  // The host closed its end before we killed it: whatever signal ended it was not ours.
  bool died_first = cause.code() == absl::StatusCode::kUnavailable;
  KillGroup(pid_, pidfd_);
  int status = 0;
  Reaped reaped = Reap(pid_, &status);
  pid_ = -1;
  if (timed_out) {
    return absl::DeadlineExceededError(absl::StrCat("no answer within ",
                                                    options_.call_timeout.count(), " ms during ",
                                                    what, "; the plugin host was killed"));
  }
  if (reaped == Reaped::kGone) {
    // Its exit status went elsewhere; a fatal signal it caught itself is in its last words.
    char note[32] = {};
    ssize_t n = read(crash_fd_, note, sizeof(note) - 1);
    int sig = 0;
    if (n > 1 && note[0] == 'S') sig = std::atoi(note + 1);
    if (sig > 0 && sig < NSIG) {
      return absl::UnavailableError(absl::StrCat("the plugin crashed with signal ", sig, " (",
                                                 strsignal(sig), ") during ", what));
    }
    return absl::UnavailableError(absl::StrCat(
        "the plugin host ended during ", what,
        " without a word; its exit status went to another part of this process (one that "
        "ignores SIGCHLD or reaps every child), so how is unknown"));
  }
  if (reaped == Reaped::kStuck) {
    return absl::UnavailableError(absl::StrCat("the plugin host stopped answering during ", what,
                                               " and was killed (not yet exited)"));
  }
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && died_first) {
    return absl::UnavailableError(
        absl::StrCat("the plugin host was killed with SIGKILL during ", what,
                     " (not by rayaccel: the kernel's out-of-memory killer sends this)"));
  }
  if (WIFSIGNALED(status) && WTERMSIG(status) != SIGKILL) {
    int sig = WTERMSIG(status);
    return absl::UnavailableError(absl::StrCat("the plugin crashed with signal ", sig, " (",
                                               strsignal(sig), ") during ", what));
  }
  if (WIFEXITED(status)) {
    return absl::UnavailableError(absl::StrCat(
        "the plugin host exited with status ", WEXITSTATUS(status), " during ", what,
        WEXITSTATUS(status) == 127 ? " (cannot run " + options_.host_binary + ")" : ""));
  }
  if (cause.code() == absl::StatusCode::kDataLoss) {
    return absl::UnavailableError(
        absl::StrCat(cause.message(), " during ", what, "; the plugin host was killed"));
  }
  return absl::UnavailableError(
      absl::StrCat("the plugin host failed during ", what, ": ", cause.message()));
}

absl::Status RemotePlugin::Initialize(const std::map<std::string, std::string>& config) {
  json::Writer w = Request("initialize");
  w.Key("config").BeginObject();
  for (const auto& [k, v] : config) w.Key(k).String(v);
  w.EndObject();
  absl::StatusOr<json::Value> reply = Call(Done(w), "initialize");
  return reply.ok() ? ReplyStatus(*reply) : reply.status();
}

absl::StatusOr<PluginProperties> RemotePlugin::GetProperties() const {
  json::Writer w = Request("properties");
  absl::StatusOr<json::Value> reply = Call(Done(w), "get_properties");
  if (!reply.ok()) return reply.status();
  if (absl::Status st = ReplyStatus(*reply); !st.ok()) return st;
  return PluginProperties{Field(*reply, "vendor"), Field(*reply, "resource_name"),
                          Field(*reply, "visible_devices_env"), Field(*reply, "plugin_version")};
}

absl::Status RemotePlugin::Query(PluginReport* report) {
  std::shared_ptr<const PluginReport> shared;
  absl::Status st = QueryShared(&shared);
  if (shared != nullptr) *report = *shared;
  return st;
}

absl::Status RemotePlugin::QueryShared(std::shared_ptr<const PluginReport>* report) {
  std::lock_guard<std::mutex> lock(call_mu_);
  json::Writer w = Request("query");
  w.Key("have").Uint(answer_id_);
  std::string frame;
  absl::StatusOr<ReportReply> reply = CallForReport(Done(w), "discover", &frame);
  if (!reply.ok()) return reply.status();
  if (!(reply->unchanged && reply->answer_id == answer_id_ && answer_ != nullptr)) {
    // Everything the plugin said goes through this process's own checks.
    auto decoded = std::make_shared<PluginReport>();
    if (absl::Status st = DecodeReport(reply->report, decoded.get()); !st.ok()) {
      return Fail(st, "discover");
    }
    answer_ = std::move(decoded);
    answer_id_ = reply->answer_id;
  }
  *report = answer_;
  zero_devices_reason_ = reply->zero_devices_reason;
  if (!reply->discover_error.empty()) return absl::InternalError(reply->discover_error);
  return absl::OkStatus();
}

void RemotePlugin::AppendAnswerKey(const PluginReport& /*report*/, std::string* key) const {
  absl::StrAppend(key, "host ", pid_.load(), " answer ", answer_id_, ";");
}

absl::Status RemotePlugin::Telemetry(TelemetryReport* report) {
  if ((capabilities_ & RAYACCEL_CAP_TELEMETRY) == 0) {
    return absl::UnimplementedError("the plugin has no get_telemetry");
  }
  json::Writer w = Request("telemetry");
  absl::StatusOr<json::Value> reply = Call(Done(w), "get_telemetry");
  if (!reply.ok()) return reply.status();
  if (absl::Status st = ReplyStatus(*reply); !st.ok()) return st;
  // The host process's answer is checked again here: it runs the plugin's code.
  std::set<uint32_t> reported;
  if (answer_ != nullptr) {
    for (const Device& d : answer_->devices) reported.insert(d.index);
  }
  auto number = [](const json::Value& row, size_t i) {
    return i < row.array().size() ? row.array()[i].as_uint64().value_or(0) : 0;
  };
  if (const json::Value* samples = reply->Find("samples");
      samples != nullptr && samples->is_array()) {
    std::set<uint32_t> seen;
    for (const json::Value& row : samples->array()) {
      if (!row.is_array() || row.array().size() != 11 || report->samples.size() >= 65536) {
        return absl::DataLossError("the plugin host sent a malformed sample");
      }
      DeviceSample s;
      s.index = static_cast<uint32_t>(number(row, 0));
      s.known = static_cast<uint32_t>(number(row, 1));
      s.utilization_percent = static_cast<uint32_t>(number(row, 2));
      s.power_mw = static_cast<uint32_t>(number(row, 3));
      s.memory_used_bytes = number(row, 4);
      s.memory_total_bytes = number(row, 5);
      s.temperature_c = static_cast<int32_t>(row.array()[6].as_int64().value_or(0));
      s.ecc_corrected = number(row, 7);
      s.ecc_uncorrected = number(row, 8);
      s.retired_pages = number(row, 9);
      s.link_errors = number(row, 10);
      if (std::string why = CheckSample(s, reported);
          !why.empty() || !seen.insert(s.index).second) {
        report->problems.push_back(why.empty() ? "a second sample of one device" : why);
        continue;
      }
      report->samples.push_back(s);
    }
  }
  if (const json::Value* unknown = reply->Find("unknown");
      unknown != nullptr && unknown->is_object()) {
    for (const auto& [fields, why] : unknown->members()) {
      uint32_t bits = 0;
      if (!absl::SimpleAtoi(fields, &bits) || !why.is_string() || report->unknown.size() >= 32) {
        continue;
      }
      report->unknown[bits] = CheckText(why.string(), "reason").ok() ? why.string() : "<malformed>";
    }
  }
  if (const json::Value* problems = reply->Find("problems");
      problems != nullptr && problems->is_array()) {
    for (const json::Value& p : problems->array()) {
      if (p.is_string() && report->problems.size() < 32) {
        report->problems.push_back(CheckText(p.string(), "problem").ok() ? p.string()
                                                                         : "<malformed>");
      }
    }
  }
  return absl::OkStatus();
}

absl::Status RemotePlugin::WaitHealthEvents(uint32_t timeout_ms, PluginReport* /*report*/) {
  if ((capabilities_ & RAYACCEL_CAP_HEALTH_EVENTS) == 0) {
    return absl::UnimplementedError("the plugin offers no health events");
  }
  // The host waits on a thread of its own and sends what it sees on the health socket, so
  // this waits there, never on the request channel (a query or lease is never held up).
  if (!watching_.exchange(true)) {
    json::Writer w = Request("watch_health");
    absl::StatusOr<json::Value> reply = Call(Done(w), "wait_health_events");
    if (!reply.ok()) return reply.status();
    if (absl::Status st = ReplyStatus(*reply); !st.ok()) return st;
  }
  if (!alive()) return absl::UnavailableError("the plugin host is down");
  pollfd p{health_fd_, POLLIN, 0};
  int ready = poll(&p, 1, static_cast<int>(std::min<uint32_t>(timeout_ms, INT32_MAX)));
  if (ready == 0 || (ready < 0 && errno == EINTR)) return absl::DeadlineExceededError("no change");
  if (ready < 0) return absl::InternalError(absl::StrCat("poll: ", std::strerror(errno)));
  // A frame has begun: the rest follows at once from a working host.
  absl::StatusOr<std::string> frame =
      wire::ReadFrame(health_fd_, std::chrono::steady_clock::now() + options_.call_timeout,
                      wire::kMaxJsonReplyBytes);
  absl::StatusOr<json::Value> reply = frame.ok() ? ParseJson(*frame) : frame.status();
  if (!reply.ok()) {
    std::lock_guard<std::mutex> lock(call_mu_);
    return Fail(reply.status(), "wait_health_events");
  }
  return ReplyStatus(*reply);
}

absl::Status RemotePlugin::ValidateQuantity(uint32_t quantity) const {
  json::Writer w = Request("validate_quantity");
  w.Key("quantity").Uint(quantity);
  absl::StatusOr<json::Value> reply = Call(Done(w), "validate_quantity");
  return reply.ok() ? ReplyStatus(*reply) : reply.status();
}

absl::StatusOr<EnvList> RemotePlugin::PrepareAllocation(
    const std::vector<uint32_t>& indices) const {
  std::lock_guard<std::mutex> lock(call_mu_);
  json::Writer w = Request("prepare_allocation");
  w.Key("indices").BeginArray();
  for (uint32_t i : indices) w.Uint(i);
  w.EndArray();
  std::string frame;
  absl::StatusOr<ReportReply> reply = CallForReport(Done(w), "prepare_allocation", &frame);
  if (!reply.ok()) return reply.status();
  // The variables pass this process's own checks too.
  PluginReport report;
  if (absl::Status st = DecodeReport(reply->report, &report); !st.ok()) {
    return Fail(st, "prepare_allocation");
  }
  if (!report.problems.empty()) return absl::InternalError(report.problems.front());
  return report.env;
}

}  // namespace rayaccel::isolation
