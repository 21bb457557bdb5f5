#include "cli/serve_command.h"

#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "cli/sd_notify.h"
#include "present/render.h"
#include "rpc/device_loss.h"
#include "rpc/listen_address.h"
#include "rpc/publisher.h"
#include "rpc/ray_gcs.h"
#include "rpc/registry_service.h"
#include "rpc/sink_state.h"
#include "spdlog/spdlog.h"
#include "web/http_server.h"
#include "web/metrics.h"
#include "web/node_view.h"
#include "web/telemetry_history.h"

namespace rayaccel::cli {
namespace {

constexpr auto kDrainTime = std::chrono::seconds(1);

int Fail(const std::string& what, const absl::Status& status, int code) {
  std::fprintf(stderr, "rayaccel: %s%s\n", what.c_str(), std::string(status.message()).c_str());
  return code;
}

// The publisher's settings from the flags, or why they do not work.
absl::StatusOr<rpc::PublisherOptions> PublisherSettings(const ServeArgs& args) {
  absl::StatusOr<rpc::ListenAddress> raylet = rpc::ParseListenAddress(args.raylet);
  if (!raylet.ok()) return raylet.status();
  if (!args.node_id.empty()) {
    if (absl::Status st = rpc::CheckNodeId(args.node_id); !st.ok()) return st;
  }
  rpc::PublisherOptions publish;
  publish.target = raylet->grpc_uri;
  publish.node_id = args.node_id;
  if (!args.raylet_token_file.empty()) {
    absl::StatusOr<std::string> token = rpc::ReadTokenFile(args.raylet_token_file);
    if (!token.ok()) return token.status();
    publish.token = *std::move(token);
  }
  if (!args.raylet_tls_ca_file.empty()) {
    absl::StatusOr<std::string> ca = rpc::ReadCredentialFile(args.raylet_tls_ca_file, "TLS CA");
    if (!ca.ok()) return ca.status();
    publish.tls_root_certs = *std::move(ca);
  }
  if (absl::Status st = rpc::CheckPlainTcp(*raylet, !publish.tls_root_certs.empty(),
                                           args.server.allow_insecure_tcp);
      !st.ok()) {
    return st;
  }
  return publish;
}

}  // namespace

web::HttpOptions HttpOptionsFor(const std::string& listen, const rpc::ServerOptions& server,
                                const rpc::BearerToken* token) {
  web::HttpOptions http;
  http.listen = listen;
  http.allow_insecure_tcp = server.allow_insecure_tcp;
  http.tls_cert_file = server.tls_cert_file;
  http.tls_key_file = server.tls_key_file;
  http.tls_client_ca_file = server.tls_client_ca_file;
  http.token = token;
  return http;
}

absl::StatusOr<std::string> DefaultAgentSocket() {
  if (geteuid() == 0) return std::string(kDefaultAgentSocket);
  // A service whose unit has RuntimeDirectory=rayaccel (systemd names it here), or a
  // /run/rayaccel this user may write: where clients look first.
  if (const char* dirs = std::getenv("RUNTIME_DIRECTORY"); dirs != nullptr && dirs[0] == '/') {
    std::string first(dirs, std::strcspn(dirs, ":"));
    return absl::StrCat("unix:", first, "/agent.sock");
  }
  if (access("/run/rayaccel", W_OK | X_OK) == 0) return std::string(kDefaultAgentSocket);
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (runtime != nullptr && runtime[0] == '/') {
    return absl::StrCat("unix:", runtime, "/rayaccel/agent.sock");
  }
  const std::string dir = absl::StrCat("/tmp/rayaccel-", geteuid());
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", dir, ": ", std::strerror(errno)));
  }
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
      (st.st_mode & 0077) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        dir,
        " is not a folder of this user's alone (mode 0700); not listening there: choose "
        "a socket with --listen unix:PATH"));
  }
  return absl::StrCat("unix:", dir, "/agent.sock");
}

int RunServe(ServeArgs args) {
  if (args.server.listen.empty()) {
    absl::StatusOr<std::string> socket = DefaultAgentSocket();
    if (!socket.ok()) return Fail("", socket.status(), 1);
    args.server.listen = *std::move(socket);
  }
  if (absl::Status st = rpc::CheckServerOptions(args.server).status(); !st.ok()) {
    return Fail("--listen: ", st, 2);
  }
  std::unique_ptr<rpc::BearerToken> token;
  if (!args.server.token_file.empty()) {
    absl::StatusOr<rpc::BearerToken> read = rpc::BearerToken::FromFile(args.server.token_file);
    if (!read.ok()) return Fail("", read.status(), 2);
    token = std::make_unique<rpc::BearerToken>(*std::move(read));
  }
  rpc::PublisherOptions publish;
  if (!args.raylet.empty()) {
    absl::StatusOr<rpc::PublisherOptions> settings = PublisherSettings(args);
    if (!settings.ok()) return Fail("--raylet: ", settings.status(), 2);
    publish = *std::move(settings);
  }
  rpc::DeviceLossOptions loss;
  if (args.drain_on_device_loss) {
    loss.policy = rpc::OnDeviceLoss::kDrain;
    loss.gcs.address = args.gcs_address;
    absl::StatusOr<std::string> gcs_token = args.gcs_token_file.empty()
                                                ? rpc::GcsTokenFromEnvironment()
                                                : rpc::ReadTokenFile(args.gcs_token_file);
    if (!gcs_token.ok()) return Fail("--gcs-token-file: ", gcs_token.status(), 2);
    loss.gcs.token = *std::move(gcs_token);
    absl::StatusOr<rpc::GcsOptions::Tls> gcs_tls = rpc::GcsTlsFromEnvironment();
    if (!gcs_tls.ok()) return Fail("Ray's GCS: ", gcs_tls.status(), 2);
    loss.gcs.tls = *std::move(gcs_tls);
    if (!args.node_id.empty()) {
      if (absl::Status st = rpc::CheckNodeId(args.node_id); !st.ok()) {
        return Fail("--node-id: ", st, 2);
      }
    }
  }
  // Blocked before any thread starts, so that only sigwait below receives them.
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  rpc::HoldGrpcUntilExit();  // after the mask: its threads inherit it

  args.options.watch_health = true;  // a plugin's health change is published at once
  absl::StatusOr<std::unique_ptr<Registry>> registry = Registry::Create(args.options);
  if (!registry.ok()) return Fail("", registry.status(), 1);

  rpc::RegistryService::Options service_options;
  service_options.token = token.get();
  auto service = std::make_unique<rpc::RegistryService>(registry->get(), service_options);
  absl::StatusOr<std::unique_ptr<rpc::Server>> server =
      rpc::Server::Start(args.server, {service.get()});
  if (!server.ok()) return Fail("", server.status(), 1);
  spdlog::info("serve: serving generation {} on {}", (*registry)->snapshot()->generation,
               (*server)->target());
  // Where it listens, whatever the log level: one line per listener.
  std::fprintf(stderr, "rayaccel serve: AcceleratorRegistry on %s\n", (*server)->target().c_str());

  // Each device's telemetry, sampled on a thread of its own, for the HTTP view and the sink.
  std::unique_ptr<web::TelemetryHistory> telemetry;
  if (args.telemetry_interval_s > 0 && (!args.http.empty() || !args.raylet.empty())) {
    telemetry = std::make_unique<web::TelemetryHistory>(
        registry->get(), std::chrono::seconds(args.telemetry_interval_s));
  }

  std::unique_ptr<rpc::Publisher> publisher;
  if (!args.raylet.empty()) {
    if (telemetry != nullptr) {
      publish.telemetry = [history = telemetry.get()] { return history->latest(); };
    }
    publisher = std::make_unique<rpc::Publisher>(publish, registry->get());
    spdlog::info("serve: node {} session {}: publishing to {}",
                 args.node_id.empty() ? "(named by the sink)" : args.node_id, publisher->session(),
                 publish.target);
  }

  // A device the node had at start and loses later: reported, and with drain, Ray's GCS asked
  // to drain the node (as the node the sink named when --node-id is not given).
  rpc::Publisher* named_by = publisher.get();
  // The labels Ray was given: the ones at start (a lost device changes some, the count).
  loss.node_id = [given = args.node_id, named_by, labels = (*registry)->snapshot()->ray.labels,
                  gcs = loss.gcs, found = std::string()]() mutable -> absl::StatusOr<std::string> {
    if (!given.empty()) return given;
    if (named_by != nullptr && !named_by->node_id().empty()) return named_by->node_id();
    if (found.empty()) {
      absl::StatusOr<std::string> here = rpc::FindNodeOnThisHost(gcs, labels);
      if (!here.ok()) return here.status();
      found = *here;
      spdlog::info("serve: this is Ray's node {} (Ray's GCS at {})", found, gcs.address);
    }
    return found;
  };
  auto device_loss = std::make_unique<rpc::DeviceLossWatch>(registry->get(), loss);
  if (args.drain_on_device_loss) {
    spdlog::info("serve: a device lost after start drains this node through Ray's GCS at {}",
                 args.gcs_address);
  }

  // The HTTP view: the node's page, its data, and /metrics (Prometheus).
  std::unique_ptr<web::HttpServer> http;
  if (!args.http.empty()) {
    rpc::RegistryService* served = service.get();
    rpc::Publisher* published = publisher.get();
    const rpc::DeviceLossWatch* lost = device_loss.get();
    auto counts = [served, published, lost] {
      web::AgentCounts counts;
      counts.watchers = served->watchers();
      counts.device_loss = lost->state();
      if (published != nullptr) {
        counts.publishing = true;
        counts.publish_acked_generation = published->acked_generation();
        counts.publish_acks = published->acks();
        counts.publish_connects = published->connects();
        counts.publish_failures = published->failures();
      }
      return counts;
    };
    const web::HttpOptions options = HttpOptionsFor(args.http, args.server, token.get());
    web::RaiseOpenFilesLimitFor(options);
    absl::StatusOr<std::unique_ptr<web::HttpServer>> started = web::HttpServer::Start(
        options,
        web::AgentRoutes(registry->get(), counts, args.conformance_reports, telemetry.get()));
    if (!started.ok()) {
      return Fail("", started.status(),
                  started.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1);
    }
    http = *std::move(started);
    spdlog::info("serve: web view on {}://{}/ (metrics at /metrics)", http->scheme(),
                 http->address());
    std::fprintf(stderr, "rayaccel serve: web view on %s://%s/ (metrics at /metrics)\n",
                 std::string(http->scheme()).c_str(), std::string(http->address()).c_str());
  }

  // Ready: systemd (Type=notify) learns it now, with what is served; a watchdog it asks for is
  // fed from this loop, so a wedged agent is restarted.
  auto status = [&](uint64_t generation) {
    return absl::StrCat("STATUS=serving generation ", generation, " on ", (*server)->target());
  };
  SdNotify(absl::StrCat("READY=1\n", status((*registry)->snapshot()->generation),
                        "\nMAINPID=", getpid()));
  const auto watchdog = SdWatchdogInterval() / 2;
  using Clock = std::chrono::steady_clock;
  auto next_rescan = Clock::now() + std::chrono::seconds(args.rescan_interval_s);
  while (true) {
    // Until the next rescan or watchdog ping, whichever is first; with neither, until a signal.
    std::chrono::nanoseconds wait = std::chrono::hours(24 * 365);
    if (args.rescan_interval_s > 0) wait = std::max(next_rescan - Clock::now(), wait.zero());
    if (watchdog.count() > 0) wait = std::min<std::chrono::nanoseconds>(wait, watchdog);
    timespec timeout{static_cast<time_t>(wait.count() / 1000000000),
                     static_cast<long>(wait.count() % 1000000000)};
    siginfo_t info{};
    const int received = sigtimedwait(&signals, &info, &timeout);
    if (received < 0 && errno != EAGAIN) continue;  // EINTR
    if (received == SIGINT || received == SIGTERM) {
      spdlog::info("serve: {} received, stopping", strsignal(received));
      SdNotify("STOPPING=1\nSTATUS=draining");
      break;
    }
    if (watchdog.count() > 0) SdNotify("WATCHDOG=1");
    const bool interval_due = args.rescan_interval_s > 0 && Clock::now() >= next_rescan;
    if (received == SIGHUP || interval_due) {
      if (received == SIGHUP) {
        // systemd (253 and later, Type=notify-reload) takes the reload's start time with it.
        timespec now{};
        clock_gettime(CLOCK_MONOTONIC, &now);
        SdNotify(absl::StrCat("RELOADING=1\nMONOTONIC_USEC=",
                              static_cast<uint64_t>(now.tv_sec) * 1000000 + now.tv_nsec / 1000));
      }
      auto snap = (*registry)->Rescan();
      spdlog::info("serve: rescanned ({}): generation {}",
                   received == SIGHUP ? "SIGHUP" : "interval", snap->generation);
      SdNotify(absl::StrCat(received == SIGHUP ? "READY=1\n" : "", status(snap->generation)));
      next_rescan = Clock::now() + std::chrono::seconds(args.rescan_interval_s);
    }
  }
  http.reset();  // its routes read the service, the publisher, the telemetry and the loss watch
  device_loss.reset();
  // Drain: the stream to the sink ends cleanly, clients' calls get a moment to finish, and
  // watchers are ended; then the registry (and its plugins) go.
  publisher.reset();
  telemetry.reset();  // after the publisher, which reads it
  service->EndWatches();
  (*server)->Shutdown(std::chrono::system_clock::now() + kDrainTime);
  service.reset();
  return 0;
}

}  // namespace rayaccel::cli
