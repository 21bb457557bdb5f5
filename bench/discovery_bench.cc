// Discovery cost, end to end through the public API with the real sim plugin:
//  - Create: dlopen + negotiate + initialize + discover + snapshot + Ray mapping (a cold start,
//    what `rayaccel discover` pays besides process start-up);
//  - Rescan: discover + snapshot + Ray mapping on a loaded plugin (what the agent pays per
//    rescan). The sim plugin re-reads and parses its JSON spec in both.
//  - LoadXml: an exported hwloc topology from outside (a bundle's, --hwloc-xml), read first in
//    a forked child (host_topology.h), against hwloc reading the same bytes directly: the
//    difference is what the guard against hwloc's assertions costs.
#include <hwloc.h>

#include <fstream>
#include <iterator>
#include <string>

#include "benchmark/benchmark.h"
#include "rayaccel/registry.h"
#include "spdlog/spdlog.h"
#include "topology/host_topology.h"

namespace {

rayaccel::RegistryOptions Options(const std::string& spec) {
  rayaccel::RegistryOptions options;
  options.plugins = {std::string(RAYACCEL_PLUGIN_DIR) + "/librayaccel-sim.so"};
  options.config["sim"]["spec"] = std::string(RAYACCEL_EXAMPLES_DIR) + "/" + spec;
  options.use_environment = false;
  return options;
}

void BM_Create(benchmark::State& state, const std::string& spec) {
  spdlog::set_level(spdlog::level::warn);
  rayaccel::RegistryOptions options = Options(spec);
  size_t devices = 0;
  for (auto _ : state) {
    auto registry = rayaccel::Registry::Create(options);
    devices = (*registry)->snapshot()->devices.size();
    benchmark::DoNotOptimize(devices);
  }
  state.counters["devices"] = static_cast<double>(devices);
}

void BM_Rescan(benchmark::State& state, const std::string& spec) {
  spdlog::set_level(spdlog::level::warn);
  auto registry = rayaccel::Registry::Create(Options(spec));
  size_t links = 0;
  for (auto _ : state) {
    links = (*registry)->Rescan()->links.size();
    benchmark::DoNotOptimize(links);
  }
  state.counters["links"] = static_cast<double>(links);
}

// The same through the plugin host: one child process per plugin (docs/conformance.md).
rayaccel::RegistryOptions IsolatedOptions(const std::string& spec) {
  rayaccel::RegistryOptions options = Options(spec);
  options.isolation = rayaccel::RegistryOptions::Isolation::kChildProcess;
  options.plugin_host = RAYACCEL_PLUGIN_HOST;
  return options;
}

void BM_CreateIsolated(benchmark::State& state, const std::string& spec) {
  spdlog::set_level(spdlog::level::warn);
  rayaccel::RegistryOptions options = IsolatedOptions(spec);
  for (auto _ : state) {
    auto registry = rayaccel::Registry::Create(options);
    benchmark::DoNotOptimize((*registry)->snapshot()->devices.size());
  }
}

void BM_RescanIsolated(benchmark::State& state, const std::string& spec) {
  spdlog::set_level(spdlog::level::warn);
  auto registry = rayaccel::Registry::Create(IsolatedOptions(spec));
  for (auto _ : state) benchmark::DoNotOptimize((*registry)->Rescan()->links.size());
}

// The floor under any isolated call: one request and one small reply over the plugin host's
// socket (validate_quantity, which the sim plugin does not hook, so the host answers at once).
void BM_IsolatedRoundTrip(benchmark::State& state) {
  spdlog::set_level(spdlog::level::warn);
  auto registry = rayaccel::Registry::Create(IsolatedOptions("dgx-h100.json"));
  for (auto _ : state) benchmark::DoNotOptimize((*registry)->ValidateQuantity("GPU", 1).ok());
}
std::string HwlocXml(const std::string& name) {
  std::ifstream in(std::string(RAYACCEL_FIXTURES_DIR) + "/hwloc/" + name);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void BM_LoadXmlGuarded(benchmark::State& state, const std::string& name) {
  const std::string xml = HwlocXml(name);
  for (auto _ : state) {
    auto host = rayaccel::HostTopology::LoadXml(xml, "XML " + name);
    if (!host.ok()) state.SkipWithError(std::string(host.status().message()).c_str());
    benchmark::DoNotOptimize(host);
  }
  state.counters["bytes"] = static_cast<double>(xml.size());
}

// hwloc alone on the same bytes, with the filters HostTopology sets that matter for XML.
void BM_LoadXmlHwlocDirect(benchmark::State& state, const std::string& name) {
  const std::string xml = HwlocXml(name);
  for (auto _ : state) {
    hwloc_topology_t topo;
    hwloc_topology_init(&topo);
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_ALL);
    hwloc_topology_set_cache_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_NONE);
    hwloc_topology_set_icache_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_NONE);
    hwloc_topology_set_xmlbuffer(topo, xml.c_str(), static_cast<int>(xml.size() + 1));
    if (hwloc_topology_load(topo) != 0) state.SkipWithError("hwloc refused the fixture");
    hwloc_topology_destroy(topo);
  }
}

BENCHMARK_CAPTURE(BM_LoadXmlGuarded, xeon_2n8c2t, std::string("32em64t-2n8c2t-pci-wholeio.xml"))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LoadXmlHwlocDirect, xeon_2n8c2t, std::string("32em64t-2n8c2t-pci-wholeio.xml"))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LoadXmlGuarded, dgx2, std::string("nvidiaDGX2.xml"))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LoadXmlHwlocDirect, dgx2, std::string("nvidiaDGX2.xml"))
    ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_IsolatedRoundTrip)->Unit(benchmark::kMicrosecond);

BENCHMARK_CAPTURE(BM_CreateIsolated, dgx_h100_8gpu, std::string("dgx-h100.json"))
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_RescanIsolated, dgx_h100_8gpu, std::string("dgx-h100.json"))
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_RescanIsolated, nvl72_72gpu, std::string("nvl72.json"))
    ->Unit(benchmark::kMicrosecond);

BENCHMARK_CAPTURE(BM_Create, dgx_h100_8gpu, std::string("dgx-h100.json"))
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Create, nvl72_72gpu, std::string("nvl72.json"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Rescan, dgx_h100_8gpu, std::string("dgx-h100.json"))
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Rescan, nvl72_72gpu, std::string("nvl72.json"))->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
