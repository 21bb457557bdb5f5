// Topology-aware preferred allocation: which `size` devices to give a request.
// The model, the scoring and a worked example are in docs/topology.md.
#ifndef RAYACCEL_TOPOLOGY_ALLOCATION_H_
#define RAYACCEL_TOPOLOGY_ALLOCATION_H_

#include <cstdint>
#include <vector>

#include "rayaccel/snapshot.h"

namespace rayaccel {

// Pairwise affinity of devices, from the snapshot's links, NUMA nodes and NICs.
class AffinityMatrix {
 public:
  AffinityMatrix(const NodeSnapshot& snapshot, const std::vector<size_t>& devices);
  // Weight of the pair (positions in the snapshot; both among `devices`).
  int64_t weight(size_t a, size_t b) const { return w_[index_[a] * n_ + index_[b]]; }

  // The parts a weight is built from, exposed for tests and explanations.
  static int64_t DirectLinkWeight(const Link* direct);  // MB/s of NVLink/xGMI/ICI bandwidth
  static int64_t PcieWeight(PciePath path);             // PIX 5 ... SYS 1, unknown 0

 private:
  size_t n_ = 0;
  std::vector<size_t> index_;  // snapshot position -> row
  std::vector<int64_t> w_;
};

// Chooses the best set. `available` and `must_include` are snapshot positions of one family,
// `must_include` within `available`; `size` >= 1. Always returns a set (the caller checked
// feasibility) unless the inputs contradict, in which case `reason` says why.
Allocation ChoosePreferred(const NodeSnapshot& snapshot, const std::vector<size_t>& available,
                           const std::vector<size_t>& must_include, size_t size,
                           AllocationObjective objective = AllocationObjective::kWholePartition);

// Pools of at most this many devices get an exact whole-partition answer when it takes at
// most kExactPartitionSets candidate sets (about a millisecond); larger pools, and the rare
// weights that need more, a local search started from the request-first answer.
inline constexpr size_t kExactPartitionPool = 16;
inline constexpr uint64_t kExactPartitionSets = 100'000;

}  // namespace rayaccel

#endif  // RAYACCEL_TOPOLOGY_ALLOCATION_H_
