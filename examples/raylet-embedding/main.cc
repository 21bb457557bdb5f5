// How a raylet embeds librayaccel (docs/embedding.md): plugins isolated in child processes it
// starts through its own child tracker, the library's log routed into its own, Create bounded by
// a start deadline, a subscription that turns each new snapshot into the node's resources, a
// lease loop on worker threads (PreferredAllocation, then PrepareAllocation by id with the
// snapshot's generation), and an orderly shutdown while a thread still waits for a snapshot.
//
//   raylet-embedding-example [--plugin NAME_OR_PATH]... [--config PLUGIN.KEY=VALUE]...
//                            [--resource GPU] [--leases N]
// Exits 0 after N leases per worker (default 50), printing a summary line.
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rayaccel/registry.h"

namespace {

// What a raylet keeps per node: the resources the newest snapshot gives Ray.
struct NodeResources {
  std::mutex mu;
  uint64_t generation = 0;
  std::map<std::string, double> total;
  int updates = 0;
};

}  // namespace

int main(int argc, char** argv) {
  rayaccel::RegistryOptions options;
  std::string resource = "GPU";
  int leases = 50;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    if (value == nullptr) {
      std::fprintf(stderr, "%s needs a value\n", flag.c_str());
      return 2;
    }
    ++i;
    if (flag == "--plugin") {
      options.plugins.push_back(value);
    } else if (flag == "--config") {
      std::string kv = value;
      size_t dot = kv.find('.'), eq = kv.find('=');
      if (dot == std::string::npos || eq == std::string::npos || dot > eq) {
        std::fprintf(stderr, "--config PLUGIN.KEY=VALUE\n");
        return 2;
      }
      options.config[kv.substr(0, dot)][kv.substr(dot + 1, eq - dot - 1)] = kv.substr(eq + 1);
    } else if (flag == "--resource") {
      resource = value;
    } else if (flag == "--leases") {
      leases = std::atoi(value);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }

  // Vendor code runs in plugin hosts, which the raylet starts through its own tracker (Ray's
  // subreaper mode kills children it does not know), and which may not hold up startup for
  // long: a plugin still starting after five seconds joins a later snapshot.
  std::atomic<int> hosts_started{0};
  options.isolation = rayaccel::RegistryOptions::Isolation::kChildProcess;
  options.spawn_child = [&](const std::function<pid_t()>& spawn) {
    pid_t pid = spawn();
    if (pid > 0) ++hosts_started;  // a raylet: KnownChildrenTracker::addKnownChild
    return pid;
  };
  options.start_deadline_ms = 5000;
  options.watch_health = true;
  // The library's lines go to the raylet's own log, never to stdout.
  std::atomic<int> log_lines{0};
  options.log_level = rayaccel::LogLevel::kInfo;
  options.log_callback = [&](rayaccel::LogLevel level, const std::string& line) {
    ++log_lines;
    std::fprintf(stderr, "[raylet] rayaccel %d: %s\n", static_cast<int>(level), line.c_str());
  };

  absl::StatusOr<std::unique_ptr<rayaccel::Registry>> created = rayaccel::Registry::Create(options);
  if (!created.ok()) {
    std::fprintf(stderr, "rayaccel: %s\n", std::string(created.status().message()).c_str());
    return 1;
  }
  std::unique_ptr<rayaccel::Registry> registry = *std::move(created);

  NodeResources node;
  std::unique_ptr<rayaccel::Registry::Subscription> subscription =
      registry->Subscribe([&](std::shared_ptr<const rayaccel::NodeSnapshot> snap) {
        std::lock_guard<std::mutex> lock(node.mu);
        node.generation = snap->generation;
        node.total = snap->ray.resources;
        ++node.updates;
      });

  // Workers lease devices the way the raylet does for a task asking for 1 or 2 of them.
  std::atomic<int> granted{0}, refused{0}, failed{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] {
      for (int i = 0; i < leases; ++i) {
        const size_t size = 1 + (i + w) % 2;
        absl::StatusOr<rayaccel::Allocation> choice =
            registry->PreferredAllocation({}, {}, size, resource);
        if (!choice.ok()) {
          ++failed;
          continue;
        }
        if (choice->device_ids.empty()) {  // impossible now; the reason says why
          ++refused;
          continue;
        }
        auto env = registry->PrepareAllocation(choice->device_ids, choice->generation);
        if (env.ok() && !env->empty()) {
          ++granted;
        } else {
          ++failed;
        }
      }
    });
  }
  // A thread of the raylet waiting for the next snapshot while the registry shuts down.
  std::thread waiter(
      [&] { registry->WaitForNewer(registry->snapshot()->generation, std::chrono::hours(1)); });
  for (std::thread& t : workers) t.join();
  registry->Rescan();

  subscription.reset();
  registry->Shutdown();  // wakes the waiter
  waiter.join();
  std::shared_ptr<const rayaccel::NodeSnapshot> last = registry->snapshot();
  registry.reset();

  std::lock_guard<std::mutex> lock(node.mu);
  auto it = node.total.find(resource);
  std::printf(
      "raylet-embedding: %s=%g at generation %llu (%d updates); leases granted %d, refused %d, "
      "failed %d; plugin hosts started %d; %d log lines\n",
      resource.c_str(), it == node.total.end() ? 0.0 : it->second,
      static_cast<unsigned long long>(node.generation), node.updates, granted.load(),
      refused.load(), failed.load(), hosts_started.load(), log_lines.load());
  for (const rayaccel::PluginStatus& p : last->plugins) {
    std::printf("plugin %s: %s %s\n", p.name.c_str(), rayaccel::PluginStateName(p.state),
                p.message.c_str());
  }
  return failed.load() == 0 && granted.load() > 0 ? 0 : 1;
}
