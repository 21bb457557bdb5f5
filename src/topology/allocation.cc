#include "topology/allocation.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "model/validate.h"
#include "topology/partition.h"

namespace rayaccel {
namespace {

constexpr int64_t kDirectScale = 1000;  // MB/s of direct bandwidth dominates everything else
constexpr int64_t kPcieScale = 100;
constexpr int64_t kNumaWeight = 10;
constexpr int64_t kNicWeight = 1;
constexpr uint64_t kExhaustiveLimit = 20000;     // candidate sets scored one by one below this
constexpr uint64_t kExhaustiveWork = 4'000'000;  // ... and at most this many pair lookups
constexpr size_t kRefined = 4;                   // greedy results polished by swaps
constexpr uint64_t kRefineWork = 2'000'000;      // pair lookups one refinement may spend

bool IsPlugin(const Link& l) { return l.source != "hwloc"; }

// A PCIe link that knows its path before one that does not; then plugin data before derived;
// then the larger bandwidth.
bool Better(const Link& l, const Link* current) {
  if (current == nullptr) return true;
  bool known = l.type != LinkType::kPcie || l.pcie_path != PciePath::kUnknown;
  bool current_known = current->type != LinkType::kPcie || current->pcie_path != PciePath::kUnknown;
  if (known != current_known) return known;
  if (IsPlugin(l) != IsPlugin(*current)) return IsPlugin(l);
  return l.bandwidth_mbps > current->bandwidth_mbps ||
         (l.bandwidth_mbps == current->bandwidth_mbps && l.count > current->count);
}

uint64_t Choose(uint64_t n, uint64_t k, uint64_t cap) {
  if (k > n) return 0;
  k = std::min(k, n - k);
  uint64_t r = 1;
  for (uint64_t i = 1; i <= k; ++i) {
    r = r * (n - k + i) / i;
    if (r > cap) return cap + 1;
  }
  return r;
}

struct Candidate {
  std::vector<size_t> set;  // sorted snapshot positions
  int64_t score = 0;
  int64_t leftover = 0;
  bool operator>(const Candidate& o) const {
    if (score != o.score) return score > o.score;
    if (leftover != o.leftover) return leftover > o.leftover;
    return set < o.set;  // deterministic: lowest positions win ties
  }
};

// Works on matrix rows (0..n-1) and turns them into snapshot positions at the end.
class Search {
 public:
  Search(const AffinityMatrix& m, const std::vector<size_t>& available)
      : m_(m), positions_(available), degree_(available.size(), 0) {
    for (size_t a = 0; a < n(); ++a) {
      for (size_t b = 0; b < n(); ++b) degree_[a] += a == b ? 0 : W(a, b);
      total_ += degree_[a];
    }
    total_ /= 2;
  }

  // The whole-partition answer for `pool` (docs/topology.md): the best split of the pool into
  // sets of `size`, and its best set holding `must`. Exact for small pools; larger ones start
  // a local search from the request-first answer.
  Candidate Partitioned(const std::vector<size_t>& pool, const std::vector<size_t>& must,
                        size_t size, std::string* method) const {
    std::vector<size_t> sorted = pool;  // lowest positions first: ties go to them
    std::sort(sorted.begin(), sorted.end());
    PairWeights w;
    w.n = sorted.size();
    w.w.assign(w.n * w.n, 0);
    std::vector<size_t> rows(w.n);
    for (size_t i = 0; i < w.n; ++i) rows[i] = Row(sorted[i]);
    for (size_t i = 0; i < w.n; ++i) {
      for (size_t j = 0; j < w.n; ++j) w.w[i * w.n + j] = i == j ? 0 : W(rows[i], rows[j]);
    }
    auto local = [&](const std::vector<size_t>& positions) {
      std::vector<uint32_t> out;
      for (size_t p : positions) {
        out.push_back(static_cast<uint32_t>(std::lower_bound(sorted.begin(), sorted.end(), p) -
                                            sorted.begin()));
      }
      return out;
    };
    Partition split;
    if (w.n <= kExactPartitionPool) {
      split = PartitionExactly(w, size, local(must), kExactPartitionSets);
      *method = absl::StrCat("whole partition, exact over ", w.n, " devices");
    }
    if (split.sets.empty()) {  // too large, or too many near-equal splits to settle in time
      std::string unused;
      Candidate alone = Best(pool, must, size, &unused);
      split = PartitionByLocalSearch(w, size, local(must), local(alone.set));
      *method = absl::StrCat("whole partition, local search over ", w.n,
                             " devices from the best set for this request alone");
    }
    if (split.sets.empty()) return Best(pool, must, size, method);  // cannot happen: checked
    // The split's best set holding `must` (equals: the lowest positions, as go-gpuallocator
    // answers). Its leftover, all pairs among the devices left, ranks it against the answers
    // of other domains.
    std::vector<size_t> set_rows;
    for (uint32_t i : split.sets[split.chosen]) set_rows.push_back(rows[i]);
    return Make(set_rows, w.SetWeight(split.sets[split.chosen]));
  }

  // Best set of `size` from `pool` containing `must` (snapshot positions), for the request
  // alone; the connectivity left over breaks ties.
  Candidate Best(const std::vector<size_t>& pool, const std::vector<size_t>& must, size_t size,
                 std::string* method) const {
    std::vector<size_t> must_rows, cand;
    for (size_t p : must) must_rows.push_back(Row(p));
    std::vector<size_t> sorted_pool = pool;  // lowest positions first: ties go to them
    std::sort(sorted_pool.begin(), sorted_pool.end());
    for (size_t p : sorted_pool) {
      if (std::find(must.begin(), must.end(), p) == must.end()) cand.push_back(Row(p));
    }
    size_t r = size - must.size();
    uint64_t sets = Choose(cand.size(), r, kExhaustiveLimit);
    // Each set costs size^2 lookups: bound the work, not only the count of sets.
    if (sets <= kExhaustiveLimit && sets * size * size <= kExhaustiveWork) {
      *method = absl::StrCat("exhaustive over ", sets, " candidate sets");
      return Exhaustive(cand, must_rows, r);
    }
    *method = absl::StrCat("greedy growth over ", cand.size(), " candidates, refined by swaps");
    return Heuristic(cand, must_rows, size);
  }

 private:
  size_t n() const { return positions_.size(); }
  int64_t W(size_t a, size_t b) const { return m_.weight(positions_[a], positions_[b]); }
  size_t Row(size_t position) const {
    return static_cast<size_t>(std::find(positions_.begin(), positions_.end(), position) -
                               positions_.begin());
  }

  int64_t Score(const std::vector<size_t>& rows) const {
    int64_t s = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      for (size_t j = i + 1; j < rows.size(); ++j) s += W(rows[i], rows[j]);
    }
    return s;
  }
  // Pairs among the devices left over = all pairs - pairs touching the set.
  int64_t Leftover(const std::vector<size_t>& rows, int64_t score) const {
    int64_t degrees = 0;
    for (size_t r : rows) degrees += degree_[r];
    return total_ - degrees + score;
  }
  Candidate Make(const std::vector<size_t>& rows, int64_t score) const {
    Candidate c;
    c.score = score;
    c.leftover = Leftover(rows, score);
    for (size_t r : rows) c.set.push_back(positions_[r]);
    std::sort(c.set.begin(), c.set.end());
    return c;
  }
  // Whether (score, leftover, rows) beats `best` without building a Candidate.
  static bool Beats(int64_t score, int64_t leftover, const Candidate& best) {
    return score != best.score ? score > best.score : leftover > best.leftover;
  }

  Candidate Exhaustive(const std::vector<size_t>& cand, const std::vector<size_t>& must,
                       size_t r) const {
    std::vector<size_t> pick(r);
    std::iota(pick.begin(), pick.end(), 0);
    std::vector<size_t> rows = must;
    rows.resize(must.size() + r);
    Candidate best;
    bool have = false;
    while (true) {
      for (size_t i = 0; i < r; ++i) rows[must.size() + i] = cand[pick[i]];
      int64_t score = Score(rows);
      int64_t leftover = Leftover(rows, score);
      if (!have || Beats(score, leftover, best)) {
        best = Make(rows, score);
        have = true;
      }
      // Next combination in lexicographic order (earlier sets win ties: lowest positions).
      size_t i = r;
      while (i > 0 && pick[i - 1] == cand.size() - r + i - 1) --i;
      if (i == 0) break;
      ++pick[i - 1];
      for (size_t j = i; j < r; ++j) pick[j] = pick[j - 1] + 1;
    }
    return best;
  }

  // The greedy order: more gain; then the less connected device (leaves well-connected ones
  // together); then one not in an earlier set (so that seeds explore different sets).
  bool Prefer(int64_t gain_a, size_t a, int64_t gain_b, size_t b,
              const std::vector<bool>& covered) const {
    if (gain_a != gain_b) return gain_a > gain_b;
    if (degree_[a] != degree_[b]) return degree_[a] < degree_[b];
    return !covered[a] && covered[b];
  }

  // Greedy growth from every seed not already in a grown set (highest gain first, then the
  // least connected device, to leave well-connected ones together), then 1-swap refinement
  // of the best few.
  Candidate Heuristic(const std::vector<size_t>& cand, const std::vector<size_t>& must,
                      size_t size) const {
    std::set<std::vector<size_t>> seen;
    std::vector<std::pair<Candidate, std::vector<size_t>>> grown;  // with its rows
    std::vector<int64_t> gain(cand.size());
    std::vector<bool> in(cand.size());
    std::vector<bool> covered(n(), false);  // in a set grown before: it would grow it again
    for (size_t seed = 0; seed < cand.size(); ++seed) {
      if (covered[cand[seed]]) continue;
      std::vector<size_t> rows = must;
      rows.push_back(cand[seed]);
      for (size_t i = 0; i < cand.size(); ++i) {
        in[i] = i == seed;
        gain[i] = 0;
        for (size_t s : rows) gain[i] += s == cand[i] ? 0 : W(s, cand[i]);
      }
      while (rows.size() < size) {
        size_t pick = cand.size();
        for (size_t i = 0; i < cand.size(); ++i) {
          if (in[i]) continue;
          if (pick == cand.size() || Prefer(gain[i], cand[i], gain[pick], cand[pick], covered)) {
            pick = i;
          }
        }
        in[pick] = true;
        rows.push_back(cand[pick]);
        for (size_t i = 0; i < cand.size(); ++i) gain[i] += W(cand[pick], cand[i]);
      }
      for (size_t r : rows) covered[r] = true;
      Candidate c = Make(rows, Score(rows));
      if (seen.insert(c.set).second) grown.emplace_back(std::move(c), std::move(rows));
    }
    std::sort(grown.begin(), grown.end(),
              [](const auto& x, const auto& y) { return x.first > y.first; });
    if (grown.size() > kRefined) grown.resize(kRefined);
    Candidate best = grown.front().first;
    for (auto& [c, rows] : grown) {
      Candidate refined = Refine(cand, must.size(), rows);
      if (refined > best) best = std::move(refined);
    }
    return best;
  }

  // Swaps one chosen device (after the must-includes) for an outside one while that
  // improves (score, leftover); each trial is O(size) from the pair sums.
  Candidate Refine(const std::vector<size_t>& cand, size_t fixed, std::vector<size_t> rows) const {
    int64_t score = Score(rows);
    int64_t degrees = 0;
    for (size_t r : rows) degrees += degree_[r];
    auto to_set = [&](size_t x, size_t skip) {
      int64_t s = 0;
      for (size_t k = 0; k < rows.size(); ++k) s += k == skip ? 0 : W(x, rows[k]);
      return s;
    };
    // One pass costs about |rows| * |cand| * |rows| lookups; stop within the budget.
    const uint64_t pass_cost = std::max<uint64_t>(1, rows.size() * cand.size() * rows.size());
    const size_t passes = std::min<uint64_t>(2 * rows.size(), kRefineWork / pass_cost);
    for (size_t pass = 0; pass < passes; ++pass) {
      bool improved = false;
      for (size_t k = fixed; k < rows.size() && !improved; ++k) {
        int64_t out_gain = to_set(rows[k], k);
        for (size_t c : cand) {
          if (std::find(rows.begin(), rows.end(), c) != rows.end()) continue;
          int64_t new_score = score - out_gain + to_set(c, k);
          int64_t new_degrees = degrees - degree_[rows[k]] + degree_[c];
          int64_t new_leftover = total_ - new_degrees + new_score;
          int64_t leftover = total_ - degrees + score;
          if (new_score > score || (new_score == score && new_leftover > leftover)) {
            rows[k] = c;
            score = new_score;
            degrees = new_degrees;
            improved = true;
            break;
          }
        }
      }
      if (!improved) break;
    }
    return Make(rows, score);
  }

  const AffinityMatrix& m_;
  std::vector<size_t> positions_;  // row -> snapshot position
  std::vector<int64_t> degree_;    // row -> weight to every other available device
  int64_t total_ = 0;
};

}  // namespace

int64_t AffinityMatrix::DirectLinkWeight(const Link* l) {
  if (l == nullptr) return 0;
  if (l->bandwidth_mbps > 0) {
    return static_cast<int64_t>(std::min(l->bandwidth_mbps, kMaxLinkBandwidthMbps));
  }
  // Count only: about one 25 GB/s link each (NVLink 2-4 per-link rates are 20-50 GB/s).
  return 25000 * static_cast<int64_t>(std::max<uint32_t>(l->count, 1));
}

int64_t AffinityMatrix::PcieWeight(PciePath path) {
  return path == PciePath::kUnknown ? 0 : 6 - static_cast<int64_t>(path);
}

AffinityMatrix::AffinityMatrix(const NodeSnapshot& snap, const std::vector<size_t>& devices)
    : n_(devices.size()), index_(snap.devices.size(), 0), w_(n_ * n_, 0) {
  for (size_t i = 0; i < n_; ++i) index_[devices[i]] = i;
  std::vector<bool> member(snap.devices.size(), false);
  for (size_t d : devices) member[d] = true;
  std::vector<const Link*> direct(n_ * n_, nullptr), pcie(n_ * n_, nullptr);
  for (const Link& l : snap.links) {
    if (!member[l.a] || !member[l.b]) continue;
    size_t k = index_[l.a] * n_ + index_[l.b];
    std::vector<const Link*>& best = l.type == LinkType::kPcie ? pcie : direct;
    if (Better(l, best[k])) best[k] = &l;
  }
  for (size_t i = 0; i < n_; ++i) {
    for (size_t j = i + 1; j < n_; ++j) {
      const Device& a = snap.devices[devices[i]];
      const Device& b = snap.devices[devices[j]];
      // Links are stored with a < b; rows follow `devices` order.
      size_t k = devices[i] < devices[j] ? i * n_ + j : j * n_ + i;
      int64_t w = DirectLinkWeight(direct[k]) * kDirectScale;
      if (pcie[k] != nullptr) w += PcieWeight(pcie[k]->pcie_path) * kPcieScale;
      if (a.numa_node >= 0 && a.numa_node == b.numa_node) w += kNumaWeight;
      for (const std::string& nic : a.nearest_nics) {
        if (std::find(b.nearest_nics.begin(), b.nearest_nics.end(), nic) != b.nearest_nics.end()) {
          w += kNicWeight;
          break;
        }
      }
      w_[i * n_ + j] = w_[j * n_ + i] = w;
    }
  }
}

Allocation ChoosePreferred(const NodeSnapshot& snap, const std::vector<size_t>& available,
                           const std::vector<size_t>& must, size_t size,
                           AllocationObjective objective) {
  Allocation out;
  if (size == 0 || must.size() > size || available.size() < size) {
    out.reason = "the request cannot be met from these devices";
    return out;
  }
  AffinityMatrix matrix(snap, available);
  Search search(matrix, available);

  // Domains the request fits in (with every must-include device): the set stays inside one.
  std::vector<std::pair<const Domain*, std::vector<size_t>>> pools;
  std::set<size_t> avail(available.begin(), available.end());
  for (const Domain& d : snap.domains) {
    std::vector<size_t> members;
    for (size_t p : d.devices) {
      if (avail.count(p) > 0) members.push_back(p);
    }
    bool has_must = std::all_of(must.begin(), must.end(), [&](size_t m) {
      return std::find(members.begin(), members.end(), m) != members.end();
    });
    if (members.size() >= size && has_must) pools.emplace_back(&d, std::move(members));
  }
  if (pools.empty()) pools.emplace_back(nullptr, available);

  // A TPU job needs a contiguous sub-mesh of its host's ICI grid, and the strongest set is one;
  // a split's best total could trade it for a better leftover. ICI families go request-first.
  std::vector<bool> member(snap.devices.size(), false);
  for (size_t p : available) member[p] = true;
  bool mesh = std::any_of(snap.links.begin(), snap.links.end(), [&](const Link& l) {
    return l.type == LinkType::kIci && member[l.a] && member[l.b];
  });
  if (mesh) objective = AllocationObjective::kRequestFirst;

  Candidate best;
  const Domain* best_domain = nullptr;
  std::string best_method;
  bool have = false;
  for (const auto& [domain, pool] : pools) {
    std::string method;
    Candidate c = objective == AllocationObjective::kWholePartition
                      ? search.Partitioned(pool, must, size, &method)
                      : search.Best(pool, must, size, &method);
    if (!have || c > best) {
      best = std::move(c);
      best_domain = domain;
      best_method = method;
      have = true;
    }
  }
  out.devices = best.set;
  out.link_score = best.score;
  out.leftover_score = best.leftover;
  out.reason = best_method;
  if (mesh) out.reason += "; request first: ICI meshes are allocated as contiguous sub-meshes";
  if (best_domain != nullptr) {
    out.reason += absl::StrCat("; kept inside ", best_domain->kind, " domain ", best_domain->id);
  }
  return out;
}

}  // namespace rayaccel
