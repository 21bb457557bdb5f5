// rayaccel-plugin-host PLUGIN.so: hosts one plugin in a process of its own, for a registry in
// isolation mode. It speaks the framed protocol of src/isolation/wire.h on file descriptor 3
// and sends health events on 4;
// the plugin's stdout goes to stderr so it can never corrupt anything. A crash, abort, hang or
// runaway allocation here costs this process only: the registry sees it, marks the plugin
// failed with the cause, and restarts the host later.
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "isolation/report_codec.h"
#include "isolation/wire.h"
#include "loader/plugin_loader.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "util/json.h"
#include "util/log.h"

namespace rayaccel::isolation {
namespace {

constexpr int kFd = 3;        // requests and replies
constexpr int kHealthFd = 4;  // health events, host -> registry

std::string Error(const absl::Status& st) {
  json::Writer w;
  w.BeginObject().Key("ok").Bool(false);
  w.Key("code").Int(static_cast<int>(st.code()));
  w.Key("error").String(std::string(st.message()));
  w.EndObject();
  return w.Finish();
}

std::string Ok(json::Writer& w) {
  w.EndObject();
  return w.Finish();
}

json::Writer Begin() {
  json::Writer w;
  w.BeginObject().Key("ok").Bool(true);
  return w;
}

// Runs the plugin's wait_health_events on a thread of its own (the ABI has it run alongside
// the other hooks) and sends each outcome on kHealthFd, so a health wait never holds up a
// query, a lease or a shutdown on the request channel.
class HealthWatch {
 public:
  explicit HealthWatch(LoadedPlugin* plugin) : plugin_(plugin), thread_([this] { Run(); }) {}
  ~HealthWatch() { Stop(); }
  // True when the thread ended in time: each wait is bounded (kWait), but a plugin may ignore
  // its timeout. The thread is then left behind, and the plugin must not be shut down under it.
  bool Stop() {
    std::unique_lock<std::mutex> lock(mu_);
    stop_ = true;
    bool ended = done_cv_.wait_for(lock, 2 * kWait, [this] { return done_; });
    lock.unlock();
    if (thread_.joinable()) ended ? thread_.join() : thread_.detach();
    return ended;
  }

 private:
  static constexpr std::chrono::milliseconds kWait{250};

  bool stopping() {
    std::lock_guard<std::mutex> lock(mu_);
    return stop_;
  }

  void Run() {
    // A wait that fails, or answers OK without reporting a change, is retried after a pause
    // that doubles (10 ms up to 1 s) until a reported change: never a tight loop.
    std::chrono::milliseconds pause{0};
    while (!stopping()) {
      PluginReport report;
      absl::Status st = plugin_->WaitHealthEvents(static_cast<uint32_t>(kWait.count()), &report);
      if (stopping()) break;
      if (st.code() == absl::StatusCode::kDeadlineExceeded) continue;
      json::Writer w = Begin();
      if (!wire::WriteFrame(kHealthFd, st.ok() ? Ok(w) : Error(st)).ok()) break;
      if (st.code() == absl::StatusCode::kUnimplemented) break;
      if (st.ok() && !report.health.empty()) {
        pause = std::chrono::milliseconds(0);
        continue;
      }
      pause = std::min(std::chrono::milliseconds(1000),
                       std::max(std::chrono::milliseconds(10), 2 * pause));
      std::unique_lock<std::mutex> lock(mu_);
      done_cv_.wait_for(lock, pause, [this] { return stop_; });
    }
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    done_cv_.notify_all();
  }

  LoadedPlugin* plugin_;
  std::mutex mu_;
  std::condition_variable done_cv_;  // done_, or stop_ for the retry pause
  bool stop_ = false;
  bool done_ = false;
  std::thread thread_;  // last: starts once the rest is built
};

int Serve(const std::string& path) {
  std::unique_ptr<LoadedPlugin> plugin;
  std::unique_ptr<HealthWatch> watch;
  // Ends the plugin: not while a health wait it ignores the timeout of is still inside it.
  auto finish = [&] {
    if (watch != nullptr && !watch->Stop()) _exit(0);
    watch.reset();
    plugin.reset();
  };
  // The last answer sent in full, and its id: a query whose answer encodes the same is
  // answered "unchanged" when the registry holds that id.
  std::string last_report;
  uint64_t answer_id = 0;
  const auto forever = std::chrono::steady_clock::now() + std::chrono::hours(24 * 365);
  while (true) {
    absl::StatusOr<std::string> frame = wire::ReadFrame(kFd, forever, wire::kMaxJsonReplyBytes);
    if (!frame.ok()) {  // the registry went away
      finish();
      return 0;
    }
    json::ParseError error;
    std::optional<json::Value> request = json::Parse(*frame, &error);
    const json::Value* op = request ? request->Find("op") : nullptr;
    std::string reply;
    if (op == nullptr || !op->is_string()) {
      reply = Error(absl::InvalidArgumentError("malformed request"));
    } else if (op->string() == "open") {
      absl::StatusOr<std::unique_ptr<LoadedPlugin>> opened = LoadedPlugin::Open(path);
      if (!opened.ok()) {
        reply = Error(opened.status());
      } else {
        plugin = *std::move(opened);
        json::Writer w = Begin();
        w.Key("name").String(plugin->name());
        w.Key("abi_version").String(plugin->abi_version());
        w.Key("capabilities").Uint(plugin->capabilities());
        w.Key("has_prepare_allocation").Bool(plugin->has_prepare_allocation());
        w.Key("has_validate_quantity").Bool(plugin->has_validate_quantity());
        reply = Ok(w);
      }
    } else if (plugin == nullptr) {
      reply = Error(absl::FailedPreconditionError("not open"));
    } else if (op->string() == "initialize") {
      std::map<std::string, std::string> config;
      if (const json::Value* c = request->Find("config"); c != nullptr && c->is_object()) {
        for (const auto& [k, v] : c->members()) {
          if (v.is_string()) config[k] = v.string();
        }
      }
      absl::Status st = plugin->Initialize(config);
      json::Writer w = Begin();
      reply = st.ok() ? Ok(w) : Error(st);
    } else if (op->string() == "properties") {
      absl::StatusOr<PluginProperties> p = plugin->GetProperties();
      if (!p.ok()) {
        reply = Error(p.status());
      } else {
        json::Writer w = Begin();
        w.Key("vendor").String(p->vendor);
        w.Key("resource_name").String(p->resource_name);
        w.Key("visible_devices_env").String(p->visible_devices_env);
        w.Key("plugin_version").String(p->plugin_version);
        reply = Ok(w);
      }
    } else if (op->string() == "query") {
      // The plugin meets the same Collector as in-process: same rules, same sink answers.
      PluginReport report;
      absl::Status st = plugin->Query(&report);
      const json::Value* have = request->Find("have");
      ReportReply head;
      head.discover_error = st.ok() ? "" : std::string(st.message());
      head.zero_devices_reason = plugin->zero_devices_reason();
      if (answer_id == 0 || !EncodesAs(report, last_report)) {
        ++answer_id;
        last_report.clear();
        EncodeReport(report, &last_report);
        // A new answer usually follows a plugin reading something anew (a spec, a driver's
        // tables): hand the memory it freed back, so that an idle host stays small.
        malloc_trim(0);
      }
      head.answer_id = answer_id;
      head.unchanged = have != nullptr && have->as_uint64().value_or(0) == answer_id;
      if (!head.unchanged) head.report = last_report;
      reply = EncodeReportReply(head);
    } else if (op->string() == "validate_quantity") {
      const json::Value* q = request->Find("quantity");
      absl::Status st = plugin->ValidateQuantity(
          static_cast<uint32_t>(q != nullptr ? q->as_uint64().value_or(0) : 0));
      json::Writer w = Begin();
      reply = st.ok() ? Ok(w) : Error(st);
    } else if (op->string() == "prepare_allocation") {
      std::vector<uint32_t> indices;
      if (const json::Value* list = request->Find("indices"); list != nullptr && list->is_array()) {
        for (const json::Value& i : list->array()) {
          indices.push_back(static_cast<uint32_t>(i.as_uint64().value_or(UINT32_MAX)));
        }
      }
      absl::StatusOr<EnvList> env = plugin->PrepareAllocation(indices);
      if (!env.ok()) {
        reply = Error(env.status());
      } else {
        PluginReport report;
        report.env = *std::move(env);
        std::string encoded;
        EncodeReport(report, &encoded);
        ReportReply head;
        head.report = encoded;
        reply = EncodeReportReply(head);
      }
    } else if (op->string() == "telemetry") {
      TelemetryReport report;
      absl::Status st = plugin->Telemetry(&report);
      if (!st.ok()) {
        reply = Error(st);
      } else {
        json::Writer w = Begin();
        w.Key("samples").BeginArray();
        for (const DeviceSample& s : report.samples) {
          w.BeginArray().Uint(s.index).Uint(s.known).Uint(s.utilization_percent).Uint(s.power_mw);
          w.Uint(s.memory_used_bytes).Uint(s.memory_total_bytes).Int(s.temperature_c);
          w.Uint(s.ecc_corrected).Uint(s.ecc_uncorrected).Uint(s.retired_pages);
          w.Uint(s.link_errors).EndArray();
        }
        w.EndArray();
        w.Key("unknown").BeginObject();
        for (const auto& [fields, why] : report.unknown) w.Key(std::to_string(fields)).String(why);
        w.EndObject();
        w.Key("problems").BeginArray();
        for (const std::string& p : report.problems) w.String(p);
        w.EndArray();
        reply = Ok(w);
      }
    } else if (op->string() == "watch_health") {
      if (watch == nullptr) watch = std::make_unique<HealthWatch>(plugin.get());
      json::Writer w = Begin();
      reply = Ok(w);
    } else if (op->string() == "shutdown") {
      finish();
      json::Writer w = Begin();
      (void)wire::WriteFrame(kFd, Ok(w));
      return 0;
    } else {
      reply = Error(absl::InvalidArgumentError("unknown op " + op->string()));
    }
    absl::Status sent = wire::WriteFrame(kFd, reply);
    if (sent.code() == absl::StatusCode::kResourceExhausted) {
      // Cannot happen within the Collector's limits; if it does, say so rather than vanish.
      sent = wire::WriteFrame(kFd, Error(absl::ResourceExhaustedError(sent.message())));
    }
    if (!sent.ok()) return 0;
  }
}

}  // namespace
}  // namespace rayaccel::isolation

namespace {

// fd 5: the registry reads the fatal signal from here when the host's exit status went to
// someone else (a process that ignores SIGCHLD, or reaps every child it has).
constexpr int kCrashNoteFd = 5;

void NoteFatalSignal(int sig) {
  char note[8] = {'S'};
  int n = 1;
  if (sig >= 10) note[n++] = static_cast<char>('0' + sig / 10);
  note[n++] = static_cast<char>('0' + sig % 10);
  note[n++] = '\n';
  (void)!write(kCrashNoteFd, note, static_cast<size_t>(n));
  signal(sig, SIG_DFL);  // and die of it as before, once this handler returns
  raise(sig);
}

void WatchFatalSignals() {
  static char alternate_stack[64 * 1024];  // a stack overflow still gets its note
  stack_t ss{};
  ss.ss_sp = alternate_stack;
  ss.ss_size = sizeof(alternate_stack);
  sigaltstack(&ss, nullptr);
  struct sigaction action {};
  action.sa_handler = NoteFatalSignal;
  action.sa_flags = SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGSYS, SIGTRAP}) {
    sigaction(sig, &action, nullptr);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // rayaccel-plugin-host [--data-limit=BYTES] PLUGIN.so: the limit is set here, before the
  // plugin is loaded (the registry starts this program with posix_spawn, which cannot).
  constexpr absl::string_view kLimit = "--data-limit=";
  uint64_t limit = 0;
  if (argc == 3 && absl::StartsWith(argv[1], kLimit) &&
      absl::SimpleAtoi(absl::string_view(argv[1]).substr(kLimit.size()), &limit) && limit > 0) {
    // RLIMIT_DATA, not RLIMIT_AS: GPU runtimes reserve huge address ranges they never touch.
    rlimit bound{limit, limit};
    setrlimit(RLIMIT_DATA, &bound);
    argv[1] = argv[2];
    argc = 2;
  }
  if (argc != 2) {
    std::fprintf(stderr,
                 "usage: rayaccel-plugin-host [--data-limit=BYTES] PLUGIN.so (protocol on fd 3)\n");
    return 2;
  }
  dup2(2, 1);  // whatever the plugin prints lands on stderr, never in a protocol
  // SIG_IGN survives exec: a registry in a process that ignores SIGCHLD must not hand that to
  // a plugin that waits for helpers it starts.
  signal(SIGCHLD, SIG_DFL);
  WatchFatalSignals();
  // Ends with the registry: when its end of the request socket closes (the registry's process
  // exited, however), this host goes too, even while a plugin call is stuck on the main thread.
  std::thread([] {
    pollfd p{3, POLLRDHUP, 0};
    while (true) {
      if (poll(&p, 1, -1) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0) {
        _exit(0);
      }
    }
  }).detach();
  spdlog::set_default_logger(spdlog::stderr_color_mt("plugin-host"));
  spdlog::set_level(spdlog::level::warn);
  rayaccel::SetLogSink(rayaccel::LogLevel::kWarning, nullptr);  // stderr, like the rest
  return rayaccel::isolation::Serve(argv[1]);
}
