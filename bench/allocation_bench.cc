// Preferred allocation through the public API, on sim specs (host topology off, so only the
// allocator is measured). The snapshot is built once; each iteration answers one request.
#include <string>

#include "benchmark/benchmark.h"
#include "rayaccel/registry.h"
#include "spdlog/spdlog.h"

namespace {

std::unique_ptr<rayaccel::Registry> Make(const std::string& spec) {
  spdlog::set_level(spdlog::level::warn);
  rayaccel::RegistryOptions options;
  options.plugins = {std::string(RAYACCEL_PLUGIN_DIR) + "/librayaccel-sim.so"};
  options.config["sim"]["spec"] = spec;
  options.use_environment = false;
  options.host_topology = false;
  return *rayaccel::Registry::Create(options);
}

void BM_Allocate(benchmark::State& state, const std::string& spec) {
  std::unique_ptr<rayaccel::Registry> registry = Make(spec);
  size_t size = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    auto allocation = registry->PreferredAllocation({}, {}, size);
    benchmark::DoNotOptimize(allocation->devices.data());
  }
}

const std::string kExamples = RAYACCEL_EXAMPLES_DIR;
const std::string kSpecs = std::string(RAYACCEL_FIXTURES_DIR) + "/specs";

BENCHMARK_CAPTURE(BM_Allocate, dgx1_v100_8gpu, kExamples + "/dgx1-v100.json")
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Allocate, mi210_2hives_8gpu, kSpecs + "/mi210-2hives.json")
    ->Arg(2)
    ->Arg(4)
    ->Arg(6)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Allocate, nvl72_72gpu, kExamples + "/nvl72.json")
    ->Arg(2)
    ->Arg(4)
    ->Arg(8)
    ->Arg(16)
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
