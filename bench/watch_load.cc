// Opens N WatchSnapshots streams to an agent and reads them until SIGTERM (or --seconds), then
// prints how many snapshots each read in total: the client side of bench/agent_rss.sh.
//   rayaccel_bench_watchers TARGET N SECONDS
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "rayaccel/v1/agent.grpc.pb.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s TARGET WATCHERS SECONDS\n", argv[0]);
    return 2;
  }
  const std::string target = argv[1];
  const int watchers = std::atoi(argv[2]);
  const int seconds = std::atoi(argv[3]);
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  auto stub = rayaccel::v1::AcceleratorRegistry::NewStub(channel);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  contexts.reserve(watchers);
  for (int i = 0; i < watchers; ++i) contexts.push_back(std::make_unique<grpc::ClientContext>());
  std::atomic<long> received{0};
  std::atomic<int> connected{0};
  std::vector<std::thread> threads;
  threads.reserve(watchers);
  for (int i = 0; i < watchers; ++i) {
    threads.emplace_back([&, i] {
      auto reader = stub->WatchSnapshots(contexts[i].get(), {});
      rayaccel::v1::NodeSnapshot s;
      bool first = true;
      while (reader->Read(&s)) {
        if (first) ++connected;
        first = false;
        ++received;
      }
      reader->Finish();
    });
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::printf("connected %d received %ld\n", connected.load(), received.load());
    std::fflush(stdout);
  }
  for (auto& c : contexts) c->TryCancel();
  for (auto& t : threads) t.join();
  std::printf("connected %d received %ld\n", connected.load(), received.load());
  return 0;
}
