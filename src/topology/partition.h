// Splitting a pool of devices into sets of one size, and one smaller set of whatever is left,
// so that the pair weights summed inside the sets are as high as possible: the whole-partition
// objective of preferred allocation (docs/topology.md). Exact for small pools, by local search
// for large ones. Pure functions of a weight matrix.
#ifndef RAYACCEL_TOPOLOGY_PARTITION_H_
#define RAYACCEL_TOPOLOGY_PARTITION_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rayaccel {

// Symmetric pair weights of devices 0..n-1, row-major; the diagonal is ignored.
struct PairWeights {
  size_t n = 0;
  std::vector<int64_t> w;
  int64_t operator()(size_t a, size_t b) const { return w[a * n + b]; }
  int64_t SetWeight(const std::vector<uint32_t>& set) const;
};

struct Partition {
  // The sets, each ascending, ordered by their first device; every set has `size` devices
  // except, when the pool does not divide evenly, one with the remainder.
  std::vector<std::vector<uint32_t>> sets;
  int64_t total = 0;  // the summed weight inside every set
  // The set given to the request: the best full set holding every required device (ties:
  // the first in `sets`).
  size_t chosen = 0;
};

// The largest pool PartitionExactly takes: its memo has 2^n entries.
inline constexpr size_t kMaxExactPool = 22;

// The best partition with a full set that holds all of `required`. Ties between partitions go
// to the first in lexicographic order of their sets (as NVIDIA's go-gpuallocator enumerates
// them). A memoized search over subsets, cut by a bound: tens of microseconds for real
// 16-GPU topologies, milliseconds for adversarial weights. Empty when no partition has such a
// set, or when more than `max_sets` candidate sets would have to be searched.
Partition PartitionExactly(const PairWeights& weights, size_t size,
                           const std::vector<uint32_t>& required, uint64_t max_sets = UINT64_MAX);

// A good partition for any pool: splits improved by swapping devices between sets while the
// total rises, started from a greedy split (the required devices' set first), from `seed` when
// given (a strong set for the request alone), then from random splits until 16 in a row find
// nothing better or about `work` swap evaluations are spent (a fixed generator: the same
// question gets the same answer).
Partition PartitionByLocalSearch(const PairWeights& weights, size_t size,
                                 const std::vector<uint32_t>& required,
                                 const std::vector<uint32_t>& seed = {}, uint64_t work = 300'000);

}  // namespace rayaccel

#endif  // RAYACCEL_TOPOLOGY_PARTITION_H_
