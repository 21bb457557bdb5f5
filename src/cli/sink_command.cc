#include "cli/sink_command.h"

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "cli/serve_command.h"
#include "present/render.h"
#include "rpc/raylet_sink.h"
#include "spdlog/spdlog.h"
#include "web/cluster_view.h"

namespace rayaccel::cli {
namespace {

constexpr auto kDrainTime = std::chrono::seconds(1);
constexpr int kMaxMessageBytes = 64 << 20;  // a 4096-device snapshot is far below this

class Printer : public rpc::RayletSink::Listener {
 public:
  explicit Printer(bool json) : json_(json) {}
  void OnNodeResources(const std::string& node_id, const std::map<std::string, double>& resources,
                       const std::map<std::string, std::string>& labels,
                       const v1::NodeSnapshot& snapshot) override {
    RayView view{resources, labels};
    std::string out = json_ ? present::SinkUpdateJson(node_id, snapshot.generation(), view)
                            : present::SinkUpdateText(node_id, snapshot.generation(), view);
    std::lock_guard<std::mutex> lock(mu_);  // streams run on gRPC's threads
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
  }

 private:
  bool json_;
  std::mutex mu_;
};

}  // namespace

int RunSink(const rpc::ServerOptions& server_options, bool json, const std::string& own_node_id,
            const std::string& http_listen) {
  absl::Status usable = rpc::CheckServerOptions(server_options).status();
  if (!usable.ok()) {
    std::fprintf(stderr, "rayaccel: --listen: %s\n", std::string(usable.message()).c_str());
    return 2;
  }
  if (!own_node_id.empty()) {
    if (absl::Status st = rpc::CheckNodeId(own_node_id); !st.ok()) {
      std::fprintf(stderr, "rayaccel: --node-id: %s\n", std::string(st.message()).c_str());
      return 2;
    }
  }
  std::unique_ptr<rpc::BearerToken> token;
  if (!server_options.token_file.empty()) {
    absl::StatusOr<rpc::BearerToken> read = rpc::BearerToken::FromFile(server_options.token_file);
    if (!read.ok()) {
      std::fprintf(stderr, "rayaccel: %s\n", std::string(read.status().message()).c_str());
      return 2;
    }
    token = std::make_unique<rpc::BearerToken>(*std::move(read));
  }
  // Before gRPC starts its threads, so that they inherit the mask and sigwait sees the signal.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  rpc::HoldGrpcUntilExit();  // after the mask: its threads inherit it

  Printer printer(json);
  rpc::RayletSink sink(&printer, token.get(), own_node_id);
  rpc::ServerOptions options = server_options;
  options.max_receive_message_bytes = kMaxMessageBytes;
  absl::StatusOr<std::unique_ptr<rpc::Server>> server = rpc::Server::Start(options, {&sink});
  if (!server.ok()) {
    std::fprintf(stderr, "rayaccel: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  spdlog::info("sink: listening on {}", (*server)->target());
  std::unique_ptr<web::HttpServer> http;
  if (!http_listen.empty()) {
    const web::HttpOptions options = HttpOptionsFor(http_listen, server_options, token.get());
    web::RaiseOpenFilesLimitFor(options);
    absl::StatusOr<std::unique_ptr<web::HttpServer>> started =
        web::HttpServer::Start(options, web::SinkRoutes(&sink));
    if (!started.ok()) {
      std::fprintf(stderr, "rayaccel: %s\n", std::string(started.status().message()).c_str());
      return started.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    http = *std::move(started);
    spdlog::info("sink: web view on {}://{}/ (metrics at /metrics)", http->scheme(),
                 http->address());
  }

  int signal_number = 0;
  sigwait(&stop, &signal_number);
  spdlog::info("sink: {} received, stopping", strsignal(signal_number));
  http.reset();  // its routes read the sink
  // Streams in progress get a moment to finish; then they are cancelled (agents reconnect).
  (*server)->Shutdown(std::chrono::system_clock::now() + kDrainTime);
  return 0;
}

}  // namespace rayaccel::cli
