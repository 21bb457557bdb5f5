// Preferred allocation through the public API, on sim specs (host topology off, so only the
// allocator is measured). The snapshot is built once; each iteration answers one request.
// Also: the exact whole-partition search alone on its largest pools (16 devices), and how far
// the local search used beyond them lands from the exact optimum (BM_LocalSearchGap).
#include <algorithm>
#include <random>
#include <string>

#include "benchmark/benchmark.h"
#include "rayaccel/registry.h"
#include "spdlog/spdlog.h"
#include "topology/allocation.h"
#include "topology/partition.h"

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
BENCHMARK_CAPTURE(BM_Allocate, dgx2_v100_16gpu, kSpecs + "/dgx2-v100.json")
    ->Arg(2)
    ->Arg(4)
    ->Arg(8)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Allocate, nvl72_72gpu, kExamples + "/nvl72.json")
    ->Arg(2)
    ->Arg(4)
    ->Arg(8)
    ->Arg(16)
    ->Unit(benchmark::kMicrosecond);

// Pair weights with few distinct values (no link, PCIe, NUMA, one or many NVLinks): the
// hard case for an exact search, which must tell apart many equal splits.
rayaccel::PairWeights RandomWeights(size_t n, std::mt19937* rng) {
  rayaccel::PairWeights w;
  w.n = n;
  w.w.assign(n * n, 0);
  const int64_t levels[] = {0, 100, 310, 25'000'310, 50'000'510};
  std::uniform_int_distribution<int> pick(0, 4);
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = a + 1; b < n; ++b) w.w[a * n + b] = w.w[b * n + a] = levels[pick(*rng)];
  }
  return w;
}

// The exact search on 16 devices (the largest pool it answers in production).
void BM_PartitionExact16(benchmark::State& state) {
  std::mt19937 rng(16);
  rayaccel::PairWeights w = RandomWeights(16, &rng);
  size_t size = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    benchmark::DoNotOptimize(rayaccel::PartitionExactly(w, size, {}).total);
  }
}
BENCHMARK(BM_PartitionExact16)
    ->Arg(2)
    ->Arg(3)
    ->Arg(4)
    ->Arg(5)
    ->Arg(8)
    ->Unit(benchmark::kMicrosecond);

// How far the local search (what pools over 16 devices get) lands from the optimum: random
// availability patterns of 17 to 20 devices on a 72-GPU node, sizes 2, 4 and 8, each solved
// both ways (exactly here, offline: seconds per pattern at 20). Counters: the share of
// patterns where the local search found the optimum, and the mean and worst shortfall of its
// split's total, in percent of the optimum.
void BM_LocalSearchGap(benchmark::State& state, const std::string& name) {
  std::mt19937 rng(72);
  rayaccel::PairWeights nvl72;  // the NVL72 spec's own weights, through the registry
  if (name == "nvl72") {
    spdlog::set_level(spdlog::level::warn);
    std::unique_ptr<rayaccel::Registry> registry = Make(kExamples + "/nvl72.json");
    std::shared_ptr<const rayaccel::NodeSnapshot> snap = registry->snapshot();
    std::vector<size_t> all(snap->devices.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    rayaccel::AffinityMatrix m(*snap, all);
    nvl72.n = all.size();
    nvl72.w.assign(nvl72.n * nvl72.n, 0);
    for (size_t a = 0; a < nvl72.n; ++a) {
      for (size_t b = 0; b < nvl72.n; ++b) nvl72.w[a * nvl72.n + b] = a == b ? 0 : m.weight(a, b);
    }
  }
  const rayaccel::PairWeights node = name == "nvl72" ? nvl72 : RandomWeights(72, &rng);
  const int patterns = static_cast<int>(state.range(0));
  for (auto _ : state) {
    int optimal = 0;
    double gap_sum = 0, worst = 0;
    for (int i = 0; i < patterns; ++i) {
      std::vector<uint32_t> devices(node.n);
      for (uint32_t d = 0; d < node.n; ++d) devices[d] = d;
      std::shuffle(devices.begin(), devices.end(), rng);
      devices.resize(17 + rng() % 4);
      const size_t sizes[] = {2, 4, 8};
      size_t size = sizes[rng() % 3];
      rayaccel::PairWeights pool;
      pool.n = devices.size();
      pool.w.assign(pool.n * pool.n, 0);
      for (size_t a = 0; a < pool.n; ++a) {
        for (size_t b = 0; b < pool.n; ++b) {
          pool.w[a * pool.n + b] = node(devices[a], devices[b]);
        }
      }
      int64_t exact = rayaccel::PartitionExactly(pool, size, {}).total;
      int64_t local = rayaccel::PartitionByLocalSearch(pool, size, {}).total;
      double gap = exact > 0 ? 100.0 * static_cast<double>(exact - local) / exact : 0;
      optimal += local == exact;
      gap_sum += gap;
      worst = std::max(worst, gap);
    }
    state.counters["optimal_pct"] = 100.0 * optimal / patterns;
    state.counters["mean_gap_pct"] = gap_sum / patterns;
    state.counters["worst_gap_pct"] = worst;
  }
}
BENCHMARK_CAPTURE(BM_LocalSearchGap, nvl72, std::string("nvl72"))
    ->Arg(300)
    ->Iterations(1)
    ->Unit(benchmark::kSecond);
BENCHMARK_CAPTURE(BM_LocalSearchGap, random_mesh_72, std::string("random"))
    ->Arg(300)
    ->Iterations(1)
    ->Unit(benchmark::kSecond);

}  // namespace

BENCHMARK_MAIN();
