// rayaccel's side of bench/kv_transfer.py: disaggregated serving's KV-cache move between a
// prefill and a decode process, each holding its cache in memory it allocated itself (as a
// tensor is), one region per layer and K or V.
//
//   rayaccel_bench_kv prefill --layers L --blocks B --block-bytes N
//     Registers L x 2 regions of B blocks of N bytes each (block i of region r filled with a
//     pattern of (r, i)), prints the address and the descriptors (web-safe base64, one per
//     line, after the address), then collects notifications until stdin closes: prints one
//     JSON line, {"notifications": [[message, monotonic us], ...]}.
//   rayaccel_bench_kv decode --layers L --blocks B --block-bytes N --requests K,... --iters I
//     Reads the prefill's lines on stdin, connects, and for each size K (blocks per layer) runs
//     I requests (after a warm-up): K distinct random remote blocks into K distinct random local
//     blocks of every layer, K and V, as one batch, then a notification ("K/i") sent once every
//     block landed. A request ends when the batch and the notification's send both have. Checks
//     the last request's blocks, then prints one JSON line per size: requested bytes,
//     bandwidth, p50 and p99 in us, and each request's start (monotonic us) by its message.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "rayaccel/transport.h"

namespace {

struct Plan {
  uint64_t layers = 32;  // each with a K and a V region
  uint64_t blocks = 512;
  uint64_t block_bytes = 16 << 10;
  std::vector<uint64_t> requests = {16, 64, 256, 512};
  int iters = 20;
  int warmup = 3;
};

double NowUs() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A block's first bytes say which region and block it is; the rest repeats the region's byte.
void Fill(char* block, uint64_t bytes, uint64_t region, uint64_t index) {
  std::memset(block, static_cast<int>('a' + region % 26), bytes);
  const uint64_t tag[2] = {region, index};
  std::memcpy(block, tag, std::min<uint64_t>(sizeof(tag), bytes));
}

bool Holds(const char* block, uint64_t bytes, uint64_t region, uint64_t index) {
  std::vector<char> want(bytes);
  Fill(want.data(), bytes, region, index);
  return std::memcmp(block, want.data(), bytes) == 0;
}

std::unique_ptr<rayaccel::Transport> Open() {
  rayaccel::TransportOptions o;
  o.plugin = "sim";
  o.search_path = {RAYACCEL_PLUGIN_DIR};
  auto t = rayaccel::Transport::Open(o);
  if (!t.ok()) {
    std::cerr << "rayaccel_bench_kv: " << t.status() << "\n";
    std::exit(1);
  }
  return *std::move(t);
}

// The cache: one allocation per layer and K or V, registered.
struct Cache {
  std::vector<std::unique_ptr<char[]>> memory;
  std::vector<rayaccel::Transport::RegionId> regions;
};

Cache Allocate(rayaccel::Transport& t, const Plan& p, bool fill) {
  Cache c;
  const uint64_t bytes = p.blocks * p.block_bytes;
  for (uint64_t r = 0; r < 2 * p.layers; ++r) {
    c.memory.emplace_back(new char[bytes]);
    char* at = c.memory.back().get();
    for (uint64_t b = 0; b < p.blocks; ++b) {
      if (fill) {
        Fill(at + b * p.block_bytes, p.block_bytes, r, b);
      } else {
        std::memset(at + b * p.block_bytes, 0, p.block_bytes);
      }
    }
    auto region = t.Register(at, bytes);
    if (!region.ok()) {
      std::cerr << "rayaccel_bench_kv: register: " << region.status() << "\n";
      std::exit(1);
    }
    c.regions.push_back(*region);
  }
  return c;
}

int Prefill(const Plan& p) {
  auto t = Open();
  Cache cache = Allocate(*t, p, /*fill=*/true);
  std::cout << absl::WebSafeBase64Escape(t->address()) << "\n";
  for (rayaccel::Transport::RegionId r : cache.regions) {
    std::cout << absl::WebSafeBase64Escape(*t->Describe(r)) << "\n";
  }
  std::cout << std::flush;
  // Notifications as they come, until the decode side is done (stdin closes).
  std::vector<std::pair<std::string, double>> heard;
  std::atomic<bool> done{false};
  std::thread stdin_watch([&] {
    std::string line;
    while (std::getline(std::cin, line)) {
    }
    done = true;
  });
  while (!done) {
    auto got = t->TakeNotifications(1, absl::Now() + absl::Milliseconds(20));
    const double now = NowUs();
    if (got.ok()) {
      for (std::string& m : *got) heard.emplace_back(std::move(m), now);
    }
  }
  stdin_watch.join();
  std::string out = "{\"notifications\": [";
  for (size_t i = 0; i < heard.size(); ++i) {
    absl::StrAppend(&out, i ? ", " : "",
                    absl::StrFormat("[\"%s\", %.1f]", heard[i].first, heard[i].second));
  }
  std::cout << out << "]}" << std::endl;
  return 0;
}

int Decode(const Plan& p) {
  std::string line;
  std::vector<std::string> lines;
  while (lines.size() < 1 + 2 * p.layers && std::getline(std::cin, line)) {
    std::string raw;
    if (!absl::WebSafeBase64Unescape(line, &raw)) return 2;
    lines.push_back(raw);
  }
  if (lines.size() != 1 + 2 * p.layers) return 2;
  auto t = Open();
  Cache cache = Allocate(*t, p, /*fill=*/false);
  auto conn = t->Connect(lines[0]);
  if (!conn.ok()) {
    std::cerr << "rayaccel_bench_kv: connect: " << conn.status() << "\n";
    return 1;
  }
  std::mt19937_64 random(7);
  std::vector<uint64_t> all(p.blocks);
  std::iota(all.begin(), all.end(), 0);
  for (uint64_t k : p.requests) {
    std::vector<double> latencies, starts;
    std::vector<uint64_t> local, remote;
    for (int i = 0; i < p.warmup + p.iters; ++i) {
      std::shuffle(all.begin(), all.end(), random);
      remote.assign(all.begin(), all.begin() + k);
      std::shuffle(all.begin(), all.end(), random);
      local.assign(all.begin(), all.begin() + k);
      const double start = NowUs();
      // The request: every layer's K and V blocks, one batch, then the notification.
      std::vector<rayaccel::TransferEntry> entries;
      entries.reserve(2 * p.layers * k);
      for (uint64_t r = 0; r < 2 * p.layers; ++r) {
        for (uint64_t b = 0; b < k; ++b) {
          entries.push_back({cache.regions[r], local[b] * p.block_bytes, lines[1 + r],
                             remote[b] * p.block_bytes, p.block_bytes});
        }
      }
      auto batch = t->ReadBatch(*conn, entries);
      const std::string message = absl::StrCat(k, "/", i);
      auto notify = batch.ok() ? t->Notify(*conn, message) : batch.status();
      if (!batch.ok() || !notify.ok()) {
        std::cerr << "rayaccel_bench_kv: " << (batch.ok() ? notify.status() : batch.status())
                  << "\n";
        return 1;
      }
      absl::Status s = batch->Wait(absl::Now() + absl::Seconds(60));
      if (s.ok()) s = notify->Wait(absl::Now() + absl::Seconds(60));
      if (!s.ok()) {
        std::cerr << "rayaccel_bench_kv: request " << message << ": " << s << "\n";
        return 1;
      }
      if (i >= p.warmup) {
        latencies.push_back(NowUs() - start);
        starts.push_back(start);
      }
    }
    for (uint64_t r = 0; r < 2 * p.layers; ++r) {  // the last request's blocks landed whole
      for (uint64_t b = 0; b < k; ++b) {
        if (!Holds(cache.memory[r].get() + local[b] * p.block_bytes, p.block_bytes, r, remote[b])) {
          std::cerr << "rayaccel_bench_kv: block " << remote[b] << " of region " << r
                    << " arrived wrong\n";
          return 1;
        }
      }
    }
    std::vector<double> sorted = latencies;
    std::sort(sorted.begin(), sorted.end());
    const double total = std::accumulate(latencies.begin(), latencies.end(), 0.0);
    const uint64_t bytes = 2 * p.layers * k * p.block_bytes;
    std::string starts_json;
    for (size_t i = 0; i < starts.size(); ++i) {
      absl::StrAppend(&starts_json, i ? ", " : "",
                      absl::StrFormat("[\"%d/%d\", %.1f]", k, p.warmup + i, starts[i]));
    }
    const uint64_t entries = 2 * p.layers * k;
    std::cout << absl::StrFormat(
                     "{\"blocks_per_layer\": %d, \"bytes\": %d, \"entries\": %d, "
                     "\"bandwidth_bytes_per_s\": %.0f, \"latency_us_p50\": %.1f, "
                     "\"latency_us_p99\": %.1f, \"starts\": [%s]}",
                     k, bytes, entries, bytes * latencies.size() / total * 1e6,
                     sorted[sorted.size() / 2],
                     sorted[std::min(sorted.size() - 1, sorted.size() * 99 / 100)], starts_json)
              << std::endl;
  }
  return 0;
}

bool Parse(int argc, char** argv, Plan* p) {
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    bool ok = true;
    if (flag == "--layers") {
      ok = absl::SimpleAtoi(value, &p->layers) && p->layers > 0;
    } else if (flag == "--blocks") {
      ok = absl::SimpleAtoi(value, &p->blocks) && p->blocks > 0;
    } else if (flag == "--block-bytes") {
      ok = absl::SimpleAtoi(value, &p->block_bytes) && p->block_bytes > 0;
    } else if (flag == "--iters") {
      ok = absl::SimpleAtoi(value, &p->iters) && p->iters > 0;
    } else if (flag == "--warmup") {
      ok = absl::SimpleAtoi(value, &p->warmup) && p->warmup >= 0;
    } else if (flag == "--requests") {
      p->requests.clear();
      for (absl::string_view k : absl::StrSplit(value, ',')) {
        uint64_t n = 0;
        ok = ok && absl::SimpleAtoi(k, &n) && n > 0;
        p->requests.push_back(n);
      }
    } else {
      ok = false;
    }
    if (!ok) {
      std::cerr << "rayaccel_bench_kv: bad " << flag << " " << value << "\n";
      return false;
    }
  }
  for (uint64_t k : p->requests) {
    if (k > p->blocks) return false;
  }
  return (argc % 2) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  Plan p;
  if (argc < 2 || !Parse(argc, argv, &p)) {
    std::cerr << "usage: rayaccel_bench_kv prefill|decode [--layers L] [--blocks B] "
                 "[--block-bytes N] [--requests K,...] [--iters I] [--warmup W]\n";
    return 2;
  }
  const std::string role = argv[1];
  if (role == "prefill") return Prefill(p);
  if (role == "decode") return Decode(p);
  return 2;
}
