#include "cli/sink_command.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "cli/render.h"
#include "rpc/listen_address.h"
#include "rpc/raylet_sink.h"
#include "spdlog/spdlog.h"

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
    std::string out = json_ ? SinkUpdateJson(node_id, snapshot.generation(), view)
                            : SinkUpdateText(node_id, snapshot.generation(), view);
    std::lock_guard<std::mutex> lock(mu_);  // streams run on gRPC's threads
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
  }

 private:
  bool json_;
  std::mutex mu_;
};

}  // namespace

int RunSink(const std::string& listen, bool json) {
  absl::StatusOr<rpc::ListenAddress> address = rpc::ParseListenAddress(listen);
  if (!address.ok()) {
    std::fprintf(stderr, "rayaccel: --listen: %s\n",
                 std::string(address.status().message()).c_str());
    return 2;
  }
  // Before gRPC starts its threads, so that they inherit the mask and sigwait sees the signal.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  if (!address->unix_path.empty()) unlink(address->unix_path.c_str());  // a stale socket
  Printer printer(json);
  rpc::RayletSink sink(&printer);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(address->grpc_uri, grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.RegisterService(&sink);
  // The socket is born 0660 (no window in which others may connect), then chmod states it.
  mode_t old_mask = umask(0117);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  umask(old_mask);
  if (server == nullptr || (address->unix_path.empty() && port == 0)) {
    std::fprintf(stderr, "rayaccel: cannot listen on %s\n", listen.c_str());
    return 1;
  }
  if (!address->unix_path.empty() && chmod(address->unix_path.c_str(), 0660) != 0) {
    std::fprintf(stderr, "rayaccel: chmod %s: %s\n", address->unix_path.c_str(),
                 std::strerror(errno));
    server->Shutdown();
    return 1;
  }
  spdlog::info("sink: listening on {}{}", address->grpc_uri,
               address->unix_path.empty() ? " (port " + std::to_string(port) + ")" : "");

  int signal_number = 0;
  sigwait(&stop, &signal_number);
  spdlog::info("sink: {} received, stopping", strsignal(signal_number));
  // Streams in progress get a moment to finish; then they are cancelled (agents reconnect).
  server->Shutdown(std::chrono::system_clock::now() + kDrainTime);
  if (!address->unix_path.empty()) unlink(address->unix_path.c_str());
  return 0;
}

}  // namespace rayaccel::cli
