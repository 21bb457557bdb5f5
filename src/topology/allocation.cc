#include "topology/allocation.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"

namespace rayaccel {
namespace {

constexpr int64_t kDirectScale = 1000;  // MB/s of direct bandwidth dominates everything else
constexpr int64_t kPcieScale = 100;
constexpr int64_t kNumaWeight = 10;
constexpr int64_t kNicWeight = 1;
constexpr uint64_t kExhaustiveLimit = 20000;  // candidate sets scored one by one below this
constexpr size_t kRefined = 4;                // greedy results polished by swaps

bool IsPlugin(const Link& l) { return l.source != "hwloc"; }

// Plugin data before derived; then the larger bandwidth.
bool Better(const Link& l, const Link* current) {
  if (current == nullptr) return true;
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
  std::vector<size_t> set;  // sorted positions
  int64_t score = 0;
  int64_t leftover = 0;
  bool operator>(const Candidate& o) const {
    if (score != o.score) return score > o.score;
    if (leftover != o.leftover) return leftover > o.leftover;
    return set < o.set;  // deterministic: lowest positions win ties
  }
};

class Search {
 public:
  Search(const AffinityMatrix& m, const std::vector<size_t>& available) : m_(m) {
    degree_.assign(*std::max_element(available.begin(), available.end()) + 1, 0);
    for (size_t a : available) {
      int64_t d = 0;
      for (size_t b : available) {
        if (a != b) d += m.weight(a, b);
      }
      degree_[a] = d;
      total_ += d;
    }
    total_ /= 2;
  }

  Candidate Evaluate(std::vector<size_t> set) const {
    std::sort(set.begin(), set.end());
    Candidate c;
    int64_t degrees = 0;
    for (size_t i = 0; i < set.size(); ++i) {
      degrees += degree_[set[i]];
      for (size_t j = i + 1; j < set.size(); ++j) c.score += m_.weight(set[i], set[j]);
    }
    // Pairs among the devices left over = all pairs - pairs touching the set.
    c.leftover = total_ - degrees + c.score;
    c.set = std::move(set);
    return c;
  }

  // Best set of `size` from `pool` containing `must`.
  Candidate Best(const std::vector<size_t>& pool, const std::vector<size_t>& must, size_t size,
                 std::string* method) {
    std::vector<size_t> cand;
    for (size_t p : pool) {
      if (std::find(must.begin(), must.end(), p) == must.end()) cand.push_back(p);
    }
    size_t r = size - must.size();
    uint64_t sets = Choose(cand.size(), r, kExhaustiveLimit);
    if (sets <= kExhaustiveLimit) {
      *method = absl::StrCat("exhaustive over ", sets, " candidate sets");
      return Exhaustive(cand, must, r);
    }
    *method = absl::StrCat("greedy from ", cand.size(), " seeds, refined by swaps");
    return Heuristic(cand, must, size);
  }

 private:
  Candidate Exhaustive(const std::vector<size_t>& cand, const std::vector<size_t>& must,
                       size_t r) const {
    std::vector<size_t> pick(r);
    std::iota(pick.begin(), pick.end(), 0);
    Candidate best;
    bool have = false;
    while (true) {
      std::vector<size_t> set = must;
      for (size_t i : pick) set.push_back(cand[i]);
      Candidate c = Evaluate(std::move(set));
      if (!have || c > best) best = std::move(c), have = true;
      // Next combination in lexicographic order.
      size_t i = r;
      while (i > 0 && pick[i - 1] == cand.size() - r + i - 1) --i;
      if (i == 0) break;
      ++pick[i - 1];
      for (size_t j = i; j < r; ++j) pick[j] = pick[j - 1] + 1;
    }
    return best;
  }

  // Greedy growth from every seed (highest gain first, then the least connected device, to
  // leave well-connected ones together), then 1-swap refinement of the best few.
  Candidate Heuristic(const std::vector<size_t>& cand, const std::vector<size_t>& must,
                      size_t size) const {
    std::set<std::vector<size_t>> seen;
    std::vector<Candidate> grown;
    for (size_t seed : cand) {
      std::vector<size_t> set = must;
      set.push_back(seed);
      std::vector<bool> in(cand.size(), false);
      std::vector<int64_t> gain(cand.size(), 0);
      for (size_t i = 0; i < cand.size(); ++i) {
        in[i] = cand[i] == seed;
        for (size_t s : set) gain[i] += cand[i] == s ? 0 : m_.weight(s, cand[i]);
      }
      while (set.size() < size) {
        size_t pick = cand.size();
        for (size_t i = 0; i < cand.size(); ++i) {
          if (in[i]) continue;
          if (pick == cand.size() || gain[i] > gain[pick] ||
              (gain[i] == gain[pick] && degree_[cand[i]] < degree_[cand[pick]])) {
            pick = i;
          }
        }
        in[pick] = true;
        set.push_back(cand[pick]);
        for (size_t i = 0; i < cand.size(); ++i) gain[i] += m_.weight(cand[pick], cand[i]);
      }
      std::sort(set.begin(), set.end());
      if (seen.insert(set).second) grown.push_back(Evaluate(set));
    }
    std::sort(grown.begin(), grown.end(), std::greater<>());
    if (grown.size() > kRefined) grown.resize(kRefined);
    Candidate best = grown.front();
    for (Candidate& c : grown) {
      Refine(cand, must, &c);
      if (c > best) best = c;
    }
    return best;
  }

  // Swaps one chosen device (not a must-include) for an outside one while that improves.
  void Refine(const std::vector<size_t>& cand, const std::vector<size_t>& must,
              Candidate* c) const {
    for (size_t pass = 0; pass < 2 * c->set.size(); ++pass) {
      bool improved = false;
      for (size_t& chosen : c->set) {
        if (std::find(must.begin(), must.end(), chosen) != must.end()) continue;
        for (size_t outside : cand) {
          if (std::find(c->set.begin(), c->set.end(), outside) != c->set.end()) continue;
          size_t old = chosen;
          chosen = outside;
          Candidate trial = Evaluate(c->set);
          chosen = old;
          if (trial > *c) {
            *c = std::move(trial);
            improved = true;
            break;
          }
        }
        if (improved) break;
      }
      if (!improved) return;
    }
  }

  const AffinityMatrix& m_;
  std::vector<int64_t> degree_;  // by snapshot position: weight to all other available
  int64_t total_ = 0;
};

}  // namespace

int64_t AffinityMatrix::DirectLinkWeight(const Link* l) {
  if (l == nullptr) return 0;
  if (l->bandwidth_mbps > 0) return static_cast<int64_t>(l->bandwidth_mbps);
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
        if (std::find(b.nearest_nics.begin(), b.nearest_nics.end(), nic) !=
            b.nearest_nics.end()) {
          w += kNicWeight;
          break;
        }
      }
      w_[i * n_ + j] = w_[j * n_ + i] = w;
    }
  }
}

Allocation ChoosePreferred(const NodeSnapshot& snap, const std::vector<size_t>& available,
                           const std::vector<size_t>& must, size_t size) {
  Allocation out;
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

  Candidate best;
  const Domain* best_domain = nullptr;
  std::string best_method;
  bool have = false;
  for (const auto& [domain, pool] : pools) {
    std::string method;
    Candidate c = search.Best(pool, must, size, &method);
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
  if (best_domain != nullptr) {
    out.reason += absl::StrCat("; kept inside ", best_domain->kind, " domain ", best_domain->id);
  }
  return out;
}

}  // namespace rayaccel
