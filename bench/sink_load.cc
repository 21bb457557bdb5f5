// A cluster's worth of agents publishing to one sink, and a cluster page watching it: the load
// side of bench/sink_load.sh (which starts the sink and reports its CPU and memory).
//
//   rayaccel_bench_sink_load SINK HTTP SINK_PID AGENTS SECONDS CHURN_PERCENT [SPEC]
//
// SINK is the sink's gRPC address (127.0.0.1:PORT), HTTP its web view's (127.0.0.1:PORT).
// AGENTS streams (one per simulated node, each the sim's 8-GPU DGX H100, or the node SPEC
// describes: examples/nvl72.json for 72-GPU racks) say hello and publish; then for SECONDS,
// once a second, CHURN_PERCENT of them turn one GPU unhealthy or healthy again (a new
// generation). Meanwhile a page follows the sink's event stream as the cluster page does
// and, on each event, fetches the churning nodes' rows (a filtered page); the time
// from an update's send to the row showing its generation is the update-to-page latency.
// Another client fetches the first page of all nodes twice a second, as a browser left open
// would. The sink's CPU over the churn and its peak RSS come from /proc/SINK_PID.
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "rayaccel/registry.h"
#include "rayaccel/v1/sink.grpc.pb.h"
#include "rpc/snapshot_proto.h"
#include "util/json.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kChannels = 16;  // the agents' streams spread over this many connections
constexpr int kThreads = 16;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// utime + stime of a process, in seconds; exits when the process is gone (the sink died).
double CpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t name_end = text.rfind(')');
  if (name_end == std::string::npos || name_end + 2 > text.size()) {
    std::fprintf(stderr, "the sink (pid %d) is gone\n", static_cast<int>(pid));
    std::exit(1);
  }
  std::istringstream fields(text.substr(name_end + 2));
  std::string f;
  long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) utime = std::atoll(f.c_str());
    if (i == 15) stime = std::atoll(f.c_str());
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

long long StatusKiB(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::atoll(line.c_str() + key.size() + 1);
  }
  return -1;
}

std::string Percentiles(std::vector<double> ms) {
  if (ms.empty()) return "none";
  std::sort(ms.begin(), ms.end());
  auto at = [&](double p) {
    return ms[std::min(ms.size() - 1, static_cast<size_t>(p * ms.size()))];
  };
  char out[160];
  std::snprintf(out, sizeof out, "p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, max %.1f ms (%zu)",
                at(0.5), at(0.9), at(0.99), ms.back(), ms.size());
  return out;
}

struct Agent {
  std::string node_id;
  bool churns = false;
  rayaccel::v1::NodeSnapshot snapshot;
  std::unique_ptr<grpc::ClientContext> context;
  std::unique_ptr<grpc::ClientReaderWriter<rayaccel::v1::PublishRequest, rayaccel::v1::PublishAck>>
      stream;
};

// Sends the agent's snapshot and reads the ack; false when the stream broke.
bool Publish(Agent& a) {
  rayaccel::v1::PublishRequest request;
  *request.mutable_snapshot() = a.snapshot;
  rayaccel::v1::PublishAck ack;
  return a.stream->Write(request) && a.stream->Read(&ack);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7 && argc != 8) {
    std::fprintf(stderr, "usage: %s SINK HTTP SINK_PID AGENTS SECONDS CHURN_PERCENT [SPEC]\n",
                 argv[0]);
    return 2;
  }
  const std::string sink = argv[1], http = argv[2];
  const pid_t sink_pid = std::atoi(argv[3]);
  const int agents = std::atoi(argv[4]), seconds = std::atoi(argv[5]);
  const int churning = std::max(1, agents * std::atoi(argv[6]) / 100);

  // One real node's snapshot: the sim plugin on the DGX H100 spec, or on SPEC.
  rayaccel::RegistryOptions options;
  options.plugins = {RAYACCEL_PLUGIN_DIR "/librayaccel-sim.so"};
  options.config["sim"]["spec"] = argc == 8 ? argv[7] : RAYACCEL_EXAMPLES_DIR "/dgx-h100.json";
  options.use_environment = false;
  options.host_topology = false;
  auto registry = rayaccel::Registry::Create(options);
  if (!registry.ok()) {
    std::fprintf(stderr, "%s\n", std::string(registry.status().message()).c_str());
    return 1;
  }
  const rayaccel::v1::NodeSnapshot base = rayaccel::rpc::ToProto(*(*registry)->snapshot());
  if (base.devices_size() == 0) {  // a wrong SPEC: the sim found nothing to publish
    std::fprintf(stderr, "no devices in %s\n", options.config["sim"]["spec"].c_str());
    return 1;
  }

  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < kChannels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("rayaccel.bench.channel", i);  // distinct arguments: a connection of its own
    channels.push_back(grpc::CreateCustomChannel(sink, grpc::InsecureChannelCredentials(), args));
  }
  std::mt19937_64 random(42);
  std::vector<Agent> fleet(agents);
  for (int i = 0; i < agents; ++i) {
    Agent& a = fleet[i];
    a.churns = i < churning;
    // The churning nodes share a prefix, so that one filtered page shows them all.
    char id[57];
    std::snprintf(id, sizeof id, "%s%015" PRIx64 "%016" PRIx64 "%016" PRIx64 "%08x",
                  a.churns ? "c" : "a", random() & 0xfffffffffffffffULL, random(), random(),
                  static_cast<unsigned>(i));
    a.node_id = id;
    a.snapshot = base;
  }

  // Everyone connects and publishes generation 1.
  const auto start = Clock::now();
  std::atomic<int> published{0}, broken{0};
  auto each = [&](const std::function<void(Agent&, int)>& work) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = t; i < agents; i += kThreads) work(fleet[i], i);
      });
    }
    for (auto& th : threads) th.join();
  };
  each([&](Agent& a, int i) {
    auto stub = rayaccel::v1::RayletAcceleratorSink::NewStub(channels[i % kChannels]);
    a.context = std::make_unique<grpc::ClientContext>();
    // A channel's first connection may fail under load and retry: the agent waits for it, as
    // rayaccel serve's publisher does, rather than failing fast (this measures the sink).
    a.context->set_wait_for_ready(true);
    a.stream = stub->Publish(a.context.get());
    rayaccel::v1::PublishRequest hello;
    hello.mutable_hello()->set_node_id(a.node_id);
    hello.mutable_hello()->set_agent_session(absl::StrCat("bench-", i));
    if (a.stream->Write(hello) && Publish(a)) {
      ++published;
    } else {
      ++broken;
    }
  });
  const double connect_s = Seconds(Clock::now() - start);
  std::printf("agents: %d published in %.2f s (%d failed), %d churn\n", published.load(), connect_s,
              broken.load(), churning);

  // The page: follows /api/events, fetches the churning nodes' rows on each event.
  std::mutex mu;
  std::map<std::string, std::pair<uint64_t, Clock::time_point>> pending;  // node -> sent
  std::vector<double> update_to_page_ms, first_page_ms;
  size_t first_page_bytes = 0;
  std::atomic<bool> stop{false};
  std::thread page([&] {
    httplib::Client events(http), rows(http);
    events.set_read_timeout(2, 0);
    while (!stop) {
      events.Get("/api/events", [&](const char*, size_t) {
        auto got = rows.Get("/api/nodes?q=c&limit=500");
        if (!got || got->status != 200) return !stop;
        const auto now = Clock::now();
        auto doc = rayaccel::json::Parse(got->body, nullptr);
        if (!doc.has_value()) return !stop;
        std::lock_guard<std::mutex> lock(mu);
        for (const auto& node : doc->Find("nodes")->array()) {
          auto it = pending.find(node.Find("node_id")->string());
          if (it == pending.end()) continue;
          if (node.Find("generation")->as_uint64().value_or(0) >= it->second.first) {
            update_to_page_ms.push_back(1e3 * Seconds(now - it->second.second));
            pending.erase(it);
          }
        }
        return !stop;
      });
    }
  });
  std::thread browser([&] {
    httplib::Client client(http);
    while (!stop) {
      const auto began = Clock::now();
      auto got = client.Get("/api/nodes?limit=50");
      if (got && got->status == 200) {
        std::lock_guard<std::mutex> lock(mu);
        first_page_ms.push_back(1e3 * Seconds(Clock::now() - began));
        first_page_bytes = got->body.size();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  });

  // Churn: once a second, each churning node flips one GPU's health.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double cpu_before = CpuSeconds(sink_pid);
  const auto churn_start = Clock::now();
  std::atomic<long> updates{0};
  for (int tick = 1; tick <= seconds; ++tick) {
    each([&](Agent& a, int) {
      if (!a.churns) return;
      auto* device = a.snapshot.mutable_devices(tick % a.snapshot.devices_size());
      const bool bad = tick % 2 == 1;
      device->set_health(bad ? rayaccel::v1::HEALTH_UNHEALTHY : rayaccel::v1::HEALTH_HEALTHY);
      device->set_health_reason(bad ? "XID 79 (load test)" : "");
      a.snapshot.set_generation(a.snapshot.generation() + 1);
      {
        std::lock_guard<std::mutex> lock(mu);
        pending[a.node_id] = {a.snapshot.generation(), Clock::now()};
      }
      if (Publish(a)) ++updates;
    });
    std::this_thread::sleep_until(churn_start + std::chrono::seconds(tick));
  }
  const double churn_s = Seconds(Clock::now() - churn_start);
  const double cpu = CpuSeconds(sink_pid) - cpu_before;
  std::this_thread::sleep_for(std::chrono::seconds(1));  // the last updates reach the page
  stop = true;
  page.join();
  browser.join();

  std::lock_guard<std::mutex> lock(mu);
  std::printf("churn: %ld updates in %.1f s (%.0f/s) from %d nodes\n", updates.load(), churn_s,
              updates.load() / churn_s, churning);
  std::printf("sink CPU during churn: %.1f%% of one core (%.2f s)\n", 100 * cpu / churn_s, cpu);
  std::printf("sink memory: peak RSS %lld KiB (%lld MiB), RSS now %lld KiB\n",
              StatusKiB(sink_pid, "VmHWM"), StatusKiB(sink_pid, "VmHWM") / 1024,
              StatusKiB(sink_pid, "VmRSS"));
  std::printf("update to page: %s; %zu updates never seen on the page\n",
              Percentiles(update_to_page_ms).c_str(), pending.size());
  std::printf("first page of %d nodes (50 rows, %zu bytes): %s\n", agents, first_page_bytes,
              Percentiles(first_page_ms).c_str());

  each([&](Agent& a, int) {
    a.stream->WritesDone();
    a.stream->Finish();
  });
  return broken.load() == 0 && pending.empty() ? 0 : 1;
}
