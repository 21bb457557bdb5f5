// A host that links librayaccel.so and its public headers alone, as the raylet does: loads the
// sim plugin named on the command line and prints the Ray resources. Proves that the exported
// API is enough (tests/CMakeLists.txt runs it).
#include <cstdio>

#include "rayaccel/registry.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s SIM_PLUGIN.so SPEC.json\n", argv[0]);
    return 2;
  }
  rayaccel::RegistryOptions options;
  options.plugins = {argv[1]};
  options.config["sim"]["spec"] = argv[2];
  options.host_topology = false;
  options.isolation = rayaccel::RegistryOptions::Isolation::kInProcess;
  auto registry = rayaccel::Registry::Create(options);
  if (!registry.ok()) {
    std::fprintf(stderr, "%s\n", std::string(registry.status().message()).c_str());
    return 1;
  }
  auto snap = (*registry)->snapshot();
  for (const auto& [name, quantity] : snap->ray.resources) {
    std::printf("%s %g\n", name.c_str(), quantity);
  }
  auto lease = (*registry)->PreferredAllocation({}, {}, 2, "GPU");
  if (!lease.ok() || lease->device_ids.size() != 2) return 1;
  auto env = (*registry)->PrepareAllocation(lease->device_ids, lease->generation);
  if (!env.ok()) return 1;
  for (const auto& [key, value] : *env) std::printf("%s=%s\n", key.c_str(), value.c_str());
  std::printf("%s\n", rayaccel::HealthName(snap->devices.at(0).health));
  return 0;
}
