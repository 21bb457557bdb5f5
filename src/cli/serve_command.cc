#include "cli/serve_command.h"

#include <signal.h>
#include <time.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "rpc/listen_address.h"
#include "rpc/publisher.h"
#include "rpc/sink_state.h"
#include "spdlog/spdlog.h"

namespace rayaccel::cli {

int RunServe(ServeArgs args) {
  absl::StatusOr<rpc::ListenAddress> raylet = rpc::ParseListenAddress(args.raylet);
  if (!raylet.ok()) {
    std::fprintf(stderr, "rayaccel: --raylet: %s\n",
                 std::string(raylet.status().message()).c_str());
    return 2;
  }
  if (absl::Status st = rpc::CheckNodeId(args.node_id); !st.ok()) {
    std::fprintf(stderr, "rayaccel: --node-id: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  // Blocked before any thread starts, so that only sigwait below receives them.
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  args.options.watch_health = true;  // a plugin's health change is published at once
  absl::StatusOr<std::unique_ptr<Registry>> registry = Registry::Create(args.options);
  if (!registry.ok()) {
    std::fprintf(stderr, "rayaccel: %s\n", std::string(registry.status().message()).c_str());
    return 1;
  }
  rpc::PublisherOptions publish;
  publish.target = raylet->grpc_uri;
  publish.node_id = args.node_id;
  auto publisher = std::make_unique<rpc::Publisher>(publish, registry->get());
  spdlog::info("serve: node {} session {}: generation {} published to {}", args.node_id,
               publisher->session(), (*registry)->snapshot()->generation, raylet->grpc_uri);

  while (true) {
    siginfo_t info{};
    int received = 0;
    if (args.rescan_interval_s > 0) {
      timespec interval{static_cast<time_t>(args.rescan_interval_s), 0};
      received = sigtimedwait(&signals, &info, &interval);
    } else {
      received = sigwaitinfo(&signals, &info);
    }
    if (received < 0 && errno != EAGAIN) continue;  // EINTR
    if (received == SIGINT || received == SIGTERM) {
      spdlog::info("serve: {} received, stopping", strsignal(received));
      break;
    }
    if (received == SIGHUP || received < 0) {  // SIGHUP, or the interval passed
      auto snap = (*registry)->Rescan();
      spdlog::info("serve: rescanned ({}): generation {}",
                   received == SIGHUP ? "SIGHUP" : "interval", snap->generation);
    }
  }
  publisher.reset();  // ends the stream cleanly before the registry goes
  return 0;
}

}  // namespace rayaccel::cli
