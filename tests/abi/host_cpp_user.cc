// A C++ host on rayaccel/host.hpp and librayaccel.so alone: compiled with a fake Abseil first
// on its include path (tests/abi/fake_abseil), which would break the build were the wrapper to
// include any Abseil header, and linked against the library file. A registry on the sim
// plugin, its snapshot, a subscription, a lease and a refusal. Prints "ok" or what failed.
//
// usage: rayaccel_host_cpp_user PLUGIN_DIR SIM_SPEC
#include <condition_variable>
#include <cstdio>
#include <mutex>

#include "rayaccel/host.hpp"

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  int failures = 0;
  auto check = [&](bool ok, const char* what) {
    if (!ok) std::fprintf(stderr, "check failed: %s\n", what), ++failures;
  };
  rayaccel::host::Options options;
  options.search_path = {argv[1]};
  options.plugins = {"sim"};
  options.config["sim"]["spec"] = argv[2];
  options.use_environment = false;
  std::vector<std::string> logged;
  options.log = [&](rayaccel_log_level, const char* line) { logged.emplace_back(line); };
  auto registry = rayaccel::host::Registry::Create(options);
  if (!registry.ok()) {
    std::fprintf(stderr, "create: %s\n", registry.status().message().c_str());
    return 1;
  }
  rayaccel::host::Snapshot s = registry->snapshot();
  check(s.generation == 1 && s.devices.size() == 8, "eight devices in generation 1");
  check(s.resources["GPU"] == 8, "GPU: 8");
  check(s.labels["ray.io/accelerator-type"] == "H100", "the accelerator type label");
  check(!s.links.empty() && s.plugins.size() == 1 && s.plugins[0].name == "sim", "links, plugin");

  std::mutex mu;
  std::condition_variable cv;
  uint64_t delivered = 0;
  auto subscription = registry->Subscribe([&](const rayaccel::host::Snapshot& got) {
    std::lock_guard<std::mutex> lock(mu);
    delivered = got.generation;
    cv.notify_all();
  });
  check(subscription.ok(), "subscribe");
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(10), [&] { return delivered != 0; });
    check(delivered == 1, "the current snapshot delivered");
  }

  auto pair = registry->PreferredAllocation({}, {}, 2, "GPU");
  check(pair.ok() && pair->device_ids.size() == 2, "a preferred pair");
  if (pair.ok()) {
    auto env = registry->PrepareAllocation(pair->device_ids, pair->generation);
    check(env.ok() && env->count("CUDA_VISIBLE_DEVICES") == 1, "the pair's environment");
  }
  auto refused = registry->PrepareAllocation({"GPU-no-such-device"});
  check(!refused.ok() && refused.status().message().find("GPU-no-such-device") != std::string::npos,
        "an unknown device refused by name");
  check(registry->stats().scans >= 1, "stats");
  auto telemetry = registry->SampleTelemetry();
  check(telemetry.ok() && telemetry->devices.size() == 8 && telemetry->plugins.size() == 1 &&
            (telemetry->devices[0].sample.known & RAYACCEL_SAMPLE_MEMORY) != 0,
        "telemetry");
  subscription->reset();
  if (failures != 0) return 1;
  std::printf("ok\n");
  return 0;
}
