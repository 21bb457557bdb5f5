// The agent's serving and publishing paths, over real Unix sockets in one process:
//  - GetSnapshot: one AcceleratorRegistry call from a client to the agent's service (request,
//    the shared wire snapshot copied into the reply, serialisation, the socket both ways);
//  - HealthChangeToSink: from a plugin's health change to the raylet sink applying it. The sim
//    plugin's health event is an edit of its spec (renamed into place); then inotify wakes the
//    registry's health watch, the registry rescans, the publisher sends, and the sink checks and
//    applies. p50 and p99 over the iterations are reported as counters.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "rayaccel/registry.h"
#include "rayaccel/v1/agent.grpc.pb.h"
#include "rpc/publisher.h"
#include "rpc/raylet_sink.h"
#include "rpc/registry_service.h"
#include "rpc/server.h"
#include "spdlog/spdlog.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string TempDir() {
  char dir[] = "/tmp/rayaccel-bench-XXXXXX";
  return mkdtemp(dir) != nullptr ? dir : "/tmp";
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::unique_ptr<rayaccel::Registry> SimRegistry(const std::string& spec, bool watch_health) {
  rayaccel::RegistryOptions options;
  options.plugins = {std::string(RAYACCEL_PLUGIN_DIR) + "/librayaccel-sim.so"};
  options.config["sim"]["spec"] = spec;
  options.use_environment = false;
  options.host_topology = false;
  options.watch_health = watch_health;
  return *rayaccel::Registry::Create(options);
}

// One agent per spec for the whole run, shared by the benchmark's client threads.
struct Agent {
  std::unique_ptr<rayaccel::Registry> registry;
  std::unique_ptr<rayaccel::rpc::RegistryService> service;
  std::unique_ptr<rayaccel::rpc::Server> server;
};

const Agent& AgentFor(const std::string& spec) {
  static std::mutex mu;
  static std::map<std::string, Agent>* agents = new std::map<std::string, Agent>();
  std::lock_guard<std::mutex> lock(mu);
  Agent& agent = (*agents)[spec];
  if (agent.server == nullptr) {
    agent.registry = SimRegistry(std::string(RAYACCEL_EXAMPLES_DIR) + "/" + spec, false);
    agent.service = std::make_unique<rayaccel::rpc::RegistryService>(
        agent.registry.get(), rayaccel::rpc::RegistryService::Options{});
    rayaccel::rpc::ServerOptions options;
    options.listen = "unix:" + TempDir() + "/agent.sock";
    agent.server = *rayaccel::rpc::Server::Start(options, {agent.service.get()});
  }
  return agent;
}

// Each client thread has its own channel (its own connection), as separate processes would.
void BM_GetSnapshot(benchmark::State& state, const std::string& spec) {
  spdlog::set_level(spdlog::level::warn);
  auto stub = rayaccel::v1::AcceleratorRegistry::NewStub(
      grpc::CreateChannel(AgentFor(spec).server->target(), grpc::InsecureChannelCredentials()));
  size_t bytes = 0;
  for (auto _ : state) {
    grpc::ClientContext context;
    rayaccel::v1::NodeSnapshot snapshot;
    if (!stub->GetSnapshot(&context, {}, &snapshot).ok()) {
      state.SkipWithError("GetSnapshot failed");
      break;
    }
    bytes = snapshot.ByteSizeLong();
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["snapshot_bytes"] = static_cast<double>(bytes);
}

// Records when each update with a given GPU total reaches the sink.
class Arrivals : public rayaccel::rpc::RayletSink::Listener {
 public:
  void OnNodeResources(const std::string&, const std::map<std::string, double>& resources,
                       const std::map<std::string, std::string>&,
                       const rayaccel::v1::NodeSnapshot&) override {
    std::lock_guard<std::mutex> lock(mu_);
    gpus_ = resources.count("GPU") > 0 ? resources.at("GPU") : 0;
    changed_.notify_all();
  }
  bool WaitFor(double gpus, std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, timeout, [&] { return gpus_ == gpus; });
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  double gpus_ = -1;
};

void BM_HealthChangeToSink(benchmark::State& state) {
  spdlog::set_level(spdlog::level::warn);
  const std::string dir = TempDir();
  const std::string spec = dir + "/node.json";
  const std::string healthy = ReadText(std::string(RAYACCEL_EXAMPLES_DIR) + "/dgx-h100.json");
  std::string unhealthy = healthy;
  const std::string mark = "\"health\": \"healthy\"";
  unhealthy.replace(unhealthy.find(mark), mark.size(), "\"health\": \"unhealthy\"");
  std::ofstream(spec) << healthy;

  Arrivals arrivals;
  rayaccel::rpc::RayletSink sink(&arrivals);
  rayaccel::rpc::ServerOptions sink_options;
  sink_options.listen = "unix:" + dir + "/sink.sock";
  auto sink_server = *rayaccel::rpc::Server::Start(sink_options, {&sink});
  auto registry = SimRegistry(spec, true);
  rayaccel::rpc::PublisherOptions publish;
  publish.target = sink_server->target();
  publish.node_id = std::string(56, 'a');
  auto publisher = std::make_unique<rayaccel::rpc::Publisher>(publish, registry.get());
  if (!arrivals.WaitFor(8, std::chrono::seconds(10))) state.SkipWithError("no first publish");

  std::vector<double> ms;
  bool toward_unhealthy = true;
  for (auto _ : state) {
    std::ofstream(spec + ".tmp") << (toward_unhealthy ? unhealthy : healthy);
    Clock::time_point start = Clock::now();
    rename((spec + ".tmp").c_str(), spec.c_str());
    if (!arrivals.WaitFor(toward_unhealthy ? 7 : 8, std::chrono::seconds(10))) {
      state.SkipWithError("the change never reached the sink");
      break;
    }
    double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    state.SetIterationTime(elapsed);
    ms.push_back(elapsed * 1e3);
    toward_unhealthy = !toward_unhealthy;
  }
  if (!ms.empty()) {
    std::sort(ms.begin(), ms.end());
    state.counters["p50_ms"] = ms[ms.size() / 2];
    state.counters["p99_ms"] = ms[std::min(ms.size() - 1, ms.size() * 99 / 100)];
  }
  publisher.reset();
  registry.reset();
  sink_server->Shutdown(std::chrono::system_clock::now());
  unlink(spec.c_str());
  rmdir(dir.c_str());
}

}  // namespace

BENCHMARK_CAPTURE(BM_GetSnapshot, dgx_h100, std::string("dgx-h100.json"))
    ->UseRealTime()
    ->Threads(1)
    ->Threads(2);
BENCHMARK_CAPTURE(BM_GetSnapshot, nvl72, std::string("nvl72.json"))
    ->UseRealTime()
    ->Threads(1)
    ->Threads(2);
BENCHMARK(BM_HealthChangeToSink)->UseManualTime()->Iterations(200)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
