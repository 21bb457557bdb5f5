// The transport's cost against the floor: a one-sided READ between two endpoints of the sim
// plugin (two UCX contexts in this process, so shared memory or CMA under UCX_TLS=all), and a
// memcpy of the same size. bench/compare_ucx_perftest.sh adds ucx_perftest across processes.
#include <cstring>
#include <vector>

#include "benchmark/benchmark.h"
#include "rayaccel/transport.h"

namespace rayaccel {
namespace {

std::unique_ptr<Transport> Open() {
  TransportOptions o;
  o.plugin = "sim";
  o.search_path = {RAYACCEL_PLUGIN_DIR};
  auto t = Transport::Open(o);
  return t.ok() ? *std::move(t) : nullptr;
}

void BM_Memcpy(benchmark::State& state) {
  size_t size = static_cast<size_t>(state.range(0));
  std::vector<char> a(size, 1), b(size, 0);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), size);
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

void Transfer(benchmark::State& state, bool write) {
  size_t size = static_cast<size_t>(state.range(0));
  auto owner = Open(), reader = Open();
  if (owner == nullptr || reader == nullptr) return state.SkipWithError("no transport");
  std::vector<char> remote(size, 1), local(size, 0);
  auto r = owner->Register(remote.data(), size);
  auto l = reader->Register(local.data(), size);
  auto c = reader->Connect(owner->address());
  if (!r.ok() || !l.ok() || !c.ok()) return state.SkipWithError("set-up failed");
  std::string d = *owner->Describe(*r);
  for (auto _ : state) {
    auto req = write ? reader->Write(*c, *l, 0, d, 0, size) : reader->Read(*c, *l, 0, d, 0, size);
    if (!req.ok() || !req->Wait(absl::InfiniteFuture()).ok()) {
      return state.SkipWithError("transfer failed");
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

void BM_Read(benchmark::State& state) { Transfer(state, false); }
void BM_Write(benchmark::State& state) { Transfer(state, true); }

// The sizes bench/compare_ucx_perftest.sh reports: 8 KiB, 1 MiB, 64 MiB, 256 MiB.
BENCHMARK(BM_Memcpy)->Arg(8 << 10)->Arg(1 << 20)->Arg(64 << 20)->Arg(256 << 20)->UseRealTime();
BENCHMARK(BM_Read)
    ->Arg(8)
    ->Arg(8 << 10)
    ->Arg(1 << 20)
    ->Arg(64 << 20)
    ->Arg(256 << 20)
    ->UseRealTime();
BENCHMARK(BM_Write)->Arg(8)->Arg(64 << 20)->UseRealTime();

}  // namespace
}  // namespace rayaccel

BENCHMARK_MAIN();
