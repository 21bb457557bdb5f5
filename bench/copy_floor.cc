// The floor under a batch on one host: what copying its entries costs with nothing else, the
// same copy (CopyMemory) between the same kind of memory (sealed memfds, mapped shared) that a
// reader of mapped shared host memory makes. For bench/compare_batches.sh.
// Usage: rayaccel_bench_copy SIZE BATCH same|each  -> "<bytes per second> <entries per second>"
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "same_host_copy.h"

using rayaccel::plugin::CopyMemory;
using rayaccel::plugin::SharedMemory;

int main(int argc, char** argv) {
  if (argc != 4 || (std::strcmp(argv[3], "same") != 0 && std::strcmp(argv[3], "each") != 0)) {
    std::fprintf(stderr, "usage: %s SIZE BATCH same|each\n", argv[0]);
    return 2;
  }
  const uint64_t size = std::strtoull(argv[1], nullptr, 10);
  const uint64_t batch = std::strtoull(argv[2], nullptr, 10);
  const bool same = std::strcmp(argv[3], "same") == 0;
  if (size == 0 || batch == 0 || size * batch / batch != size) return 2;
  const uint64_t span = same ? size : size * batch;
  std::string why;
  std::unique_ptr<SharedMemory> from = SharedMemory::Create(span, &why);
  std::unique_ptr<SharedMemory> to = SharedMemory::Create(span, &why);
  if (from == nullptr || to == nullptr) {
    std::fprintf(stderr, "no shared memory: %s\n", why.c_str());
    return 1;
  }
  std::memset(from->data(), 1, span);
  std::memset(to->data(), 2, span);
  auto* in = static_cast<const char*>(from->data());
  auto* out = static_cast<char*>(to->data());
  auto once = [&] {
    for (uint64_t i = 0; i < batch; ++i) {
      const uint64_t at = same ? 0 : i * size;
      CopyMemory(out + at, in + at, size);
    }
  };
  // About a quarter of a second of copies, after a warm-up.
  once();
  uint64_t rounds = 0;
  const auto start = std::chrono::steady_clock::now();
  double seconds = 0;
  do {
    for (int k = 0; k < 16; ++k) once();
    rounds += 16;
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } while (seconds < 0.25);
  const double entries = static_cast<double>(rounds * batch);
  std::printf("%.0f %.0f\n", entries * static_cast<double>(size) / seconds, entries / seconds);
  return 0;
}
