// What a raylet does to learn a node's accelerators from the rayaccel agent: register
// rayaccel::rpc::RayletSink in its own gRPC server, next to its own services, and take each
// applied update from the listener. This program prints them and, given an HTTP address, serves
// the cluster's web view of the same sink (rayaccel::web).
//   raylet-sink-example ADDRESS [UPDATES [HTTP]]
// stops after UPDATES applied updates (default, or 0: never); HTTP is tcp://HOST:PORT.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "rpc/raylet_sink.h"
#include "web/cluster_view.h"
#include "web/http_server.h"

namespace {

class Printer : public rayaccel::rpc::RayletSink::Listener {
 public:
  void OnNodeResources(const std::string& node_id, const std::map<std::string, double>& resources,
                       const std::map<std::string, std::string>& labels,
                       const rayaccel::v1::NodeSnapshot& snapshot) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::printf("node %s generation %llu:", node_id.c_str(),
                static_cast<unsigned long long>(snapshot.generation()));
    for (const auto& [name, quantity] : resources) std::printf(" %s=%g", name.c_str(), quantity);
    std::printf(" (%zu labels)\n", labels.size());
    std::fflush(stdout);
    ++applied_;
    changed_.notify_all();
  }

  void WaitFor(long updates) {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return updates > 0 && applied_ >= updates; });
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  long applied_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s ADDRESS [UPDATES]\n", argv[0]);
    return 2;
  }
  Printer printer;
  rayaccel::rpc::RayletSink sink(&printer);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(argv[1], grpc::InsecureServerCredentials());
  builder.RegisterService(&sink);  // a raylet registers its own services here too
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) return 1;
  // The cluster page, /api and /metrics of this sink, on threads of the view's own.
  std::unique_ptr<rayaccel::web::HttpServer> view;
  if (argc > 3) {
    rayaccel::web::HttpOptions http;
    http.listen = argv[3];
    auto started = rayaccel::web::HttpServer::Start(http, rayaccel::web::SinkRoutes(&sink));
    if (!started.ok()) {
      std::fprintf(stderr, "%s\n", std::string(started.status().message()).c_str());
      return 1;
    }
    view = *std::move(started);
    std::printf("web view on http://%s/\n", view->address().c_str());
    std::fflush(stdout);
  }
  printer.WaitFor(argc > 2 ? std::atol(argv[2]) : 0);
  view.reset();  // before the sink it reads
  // Agents keep their streams open: give them a moment, then cancel (they reconnect later).
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return 0;
}
